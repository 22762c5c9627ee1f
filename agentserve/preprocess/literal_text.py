"""Special-token text in client content stays text: no field a client sends can forge a role marker or a tool call.

Chat templates render to a string that is then tokenized with special tokens recognised, so a user message,
tool result or tool description containing `<|im_end|>\\n<|im_start|>system` would otherwise become real
role markers. Before rendering, every special-token literal in client strings is swapped for a marker
carrying a per-render random nonce (unguessable, so content cannot forge one); the rendered string is
tokenized piecewise and each marker becomes the literal's *text* tokens. Content without such literals is
rendered and tokenized exactly as before, so prefix caching and token counts are unchanged for it.

Client strings are everything the conversation holds, in every role: user, system and tool text, tool results and
their call ids, and the assistant turns a harness sends back (text, reasoning, tool-call ids, names and
arguments: a model that copied `<|im_start|>system` into its reply must not turn it into a real system turn when
the reply is re-rendered), plus the tool schemas (MCP servers write descriptions) and the client's template
variables. They are shielded on the Conversation, before the replay policy and the template add their own
markers (`<think>`, `<tool_response>`), which stay real. Spliced kept turns are the engine's own token ids and
never pass through here.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from agentserve.protocol import Conversation, ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, Turn


def _is_markup(content: str, special: bool) -> bool:
    """Added tokens that structure a prompt: special ones, and `<…>` / `[…]` ones (Qwen's <tool_call>, Mistral's [INST])."""
    if special:
        return True
    c = content.strip()
    return len(c) > 2 and ((c[0] == "<" and c[-1] == ">") or (c[0] == "[" and c[-1] == "]"))


@dataclass
class Shield:
    """One render's markers: marker index -> the literal it stands for."""

    nonce: str
    literals: list[str] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict)

    def marker(self, literal: str) -> str:
        i = self._index.get(literal)
        if i is None:
            i = self._index[literal] = len(self.literals)
            self.literals.append(literal)
        return f"[[as-{self.nonce}-{i}]]"

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(rf"\[\[as-{self.nonce}-(\d+)\]\]")


def _splitting_copy(tokenizer: Any) -> Any:
    """A private copy of the Rust tokenizer that reads special-token text as text.

    transformers' `encode(..., split_special_tokens=True)` flips a flag on the *shared* Rust tokenizer for the
    call; Ray runs the preprocessor's sync methods in a thread pool, so another thread's encode could run with
    the flag in the wrong state and turn user text into real role markers (or the reverse). A copy with the
    flag set once is never flipped.
    """
    from tokenizers import Tokenizer

    rust = getattr(tokenizer, "_tokenizer", None)
    if rust is None:
        return None
    copy = Tokenizer.from_str(rust.to_str())
    copy.encode_special_tokens = True
    return copy


class _Substitution:
    """One render's substitution: strings with literals become new strings with markers; others stay the same object."""

    def __init__(self, find: re.Pattern[str]) -> None:
        self._find = find
        self._shield: Shield | None = None

    @property
    def found(self) -> bool:
        return self._shield is not None

    @property
    def shield(self) -> Shield | None:
        return self._shield

    def _marker(self, m: re.Match[str]) -> str:
        if self._shield is None:
            self._shield = Shield(secrets.token_hex(6))
        return self._shield.marker(m.group(0))

    def sub(self, value: Any) -> Any:
        if isinstance(value, str):
            return value if self._find.search(value) is None else self._find.sub(self._marker, value)
        if isinstance(value, list):
            return [self.sub(v) for v in value]
        if isinstance(value, dict):
            return {k: self.sub(v) for k, v in value.items()}
        return value

    def arguments(self, text: str) -> str:
        """Tool-call arguments: JSON text a template may render verbatim or parse and re-serialise, so a literal
        spelled with JSON escapes (`\\u003c|im_start|>`) is shielded too (the JSON is then re-written)."""
        out = self.sub(text)
        if "\\u" not in out:
            return out
        try:
            decoded = json.loads(out)
        except ValueError:
            return out
        shielded = self.sub(decoded)
        return json.dumps(shielded, ensure_ascii=False) if shielded != decoded else out


class LiteralGuard:
    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self._split = _splitting_copy(tokenizer)
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        literals = sorted({t.content for t in added.values() if _is_markup(t.content, bool(t.special))}, key=len, reverse=True)
        self._added_ids = frozenset(added)
        self._find = re.compile("|".join(re.escape(s) for s in literals)) if literals else None
        self._literal_ids: dict[str, list[int]] = {}

    # -- before rendering -------------------------------------------------------------------------------
    def shield(
        self, conversation: Conversation, tools: list[dict[str, Any]] | None, kwargs: dict[str, Any] | None = None
    ) -> tuple[Conversation, list[dict[str, Any]] | None, dict[str, Any], Shield | None]:
        """The conversation, tools and client template variables with special-token literals replaced by markers
        (the same objects, and no Shield, when nothing needed it)."""
        kwargs = dict(kwargs or {})
        if self._find is None:
            return conversation, tools, kwargs, None
        shield = _Substitution(self._find)
        turns = tuple(self._turn(t, shield) for t in conversation.turns)
        shielded_tools = shield.sub(tools) if tools else tools
        shielded_kwargs = shield.sub(kwargs)
        if not shield.found:
            return conversation, tools, kwargs, None
        return conversation.model_copy(update={"turns": turns}), shielded_tools, shielded_kwargs, shield.shield

    def _turn(self, turn: Turn, s: "_Substitution") -> Turn:
        blocks = []
        changed = False
        for b in turn.blocks:
            new = b
            if isinstance(b, (TextBlock, ReasoningBlock)):
                text = s.sub(b.text)
                new = b if text is b.text else b.model_copy(update={"text": text})
            elif isinstance(b, ToolCallBlock):
                fields = {"id": s.sub(b.id), "name": s.sub(b.name), "arguments": s.arguments(b.arguments)}
                if any(v is not getattr(b, k) for k, v in fields.items()):
                    new = b.model_copy(update=fields)
            elif isinstance(b, ToolResultBlock):
                fields = {"tool_call_id": s.sub(b.tool_call_id), "content": s.sub(b.content)}
                if any(v is not getattr(b, k) for k, v in fields.items()):
                    new = b.model_copy(update=fields)
            changed = changed or new is not b
            blocks.append(new)
        return turn.model_copy(update={"blocks": tuple(blocks)}) if changed else turn

    # -- after rendering ----------------------------------------------------------------------------------
    def restore(self, text: str, shield: Shield | None) -> str:
        """The rendered text as the model will read it (markers back to their literals)."""
        if shield is None:
            return text
        return shield.pattern.sub(lambda m: shield.literals[int(m.group(1))], text)

    def encode(self, text: str, shield: Shield | None) -> list[int]:
        if shield is None:
            return self._tok.encode(text, add_special_tokens=False)
        ids: list[int] = []
        pos = 0
        for m in shield.pattern.finditer(text):
            if m.start() > pos:
                ids += self._tok.encode(text[pos : m.start()], add_special_tokens=False)
            ids += self.literal_ids(shield.literals[int(m.group(1))])
            pos = m.end()
        if pos < len(text):
            ids += self._tok.encode(text[pos:], add_special_tokens=False)
        return ids

    def literal_ids(self, literal: str) -> list[int]:
        """The literal's text tokens: never an added token's id."""
        ids = self._literal_ids.get(literal)
        if ids is None:
            ids = self._text_ids(literal)
            if any(i in self._added_ids for i in ids):  # non-special added tokens still match: split the literal
                ids = []
                for ch in literal:
                    ids += self._text_ids(ch)
            self._literal_ids[literal] = ids
        return ids

    def _text_ids(self, text: str) -> list[int]:
        if self._split is None:  # a slow (Python) tokenizer: no shared Rust flag to race on
            return self._tok.encode(text, add_special_tokens=False, split_special_tokens=True)
        return self._split.encode(text, add_special_tokens=False).ids

"""Special-token text in untrusted content stays text: user text cannot forge a role marker or a tool call.

Chat templates render to a string that is then tokenized with special tokens recognised, so a user message,
tool result or tool description containing `<|im_end|>\\n<|im_start|>system` would otherwise become real
role markers. Before rendering, every special-token literal in untrusted strings is swapped for a marker
carrying a per-render random nonce (unguessable, so content cannot forge one); the rendered string is
tokenized piecewise and each marker becomes the literal's *text* tokens. Content without such literals is
rendered and tokenized exactly as before, so prefix caching and token counts are unchanged for it.

Untrusted: user, system/developer and tool messages, and the tool schemas (MCP servers write descriptions).
Assistant turns are replayed as the model produced them and are left alone.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any

UNTRUSTED_ROLES = frozenset({"user", "system", "developer", "tool"})


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
    def shield(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, Shield | None]:
        """Messages and tools with special-token literals in untrusted strings replaced by markers."""
        if self._find is None:
            return messages, tools, None
        shield = Shield(secrets.token_hex(6))
        found = False

        def sub(value: Any) -> Any:
            nonlocal found
            if isinstance(value, str):
                if self._find.search(value) is None:
                    return value
                found = True
                return self._find.sub(lambda m: shield.marker(m.group(0)), value)
            if isinstance(value, list):
                return [sub(v) for v in value]
            if isinstance(value, dict):
                return {k: sub(v) for k, v in value.items()}
            return value

        out = [
            {**m, "content": sub(m.get("content"))} if m.get("role") in UNTRUSTED_ROLES and "content" in m else m
            for m in messages
        ]
        shielded_tools = sub(tools) if tools else tools
        if not found:
            return messages, tools, None
        return out, shielded_tools, shield

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

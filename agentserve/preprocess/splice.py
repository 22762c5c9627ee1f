"""Token-exact replay: earlier assistant turns go back into the prompt as the tokens the engine generated.

The chat template re-renders an assistant turn from its parsed content; where the model's own output was spelled
differently (no newlines around reasoning, compact JSON, another key order) the prompt would part from the
engine's cache at the start of that output. For each earlier assistant turn with a kept entry the splice:

1. renders the conversation before the turn with the generation prompt (A: the prompt the turn was generated
   after) and the conversation up to and including the turn (B). The turn's rendering is B after A; the
   template's end of turn is what follows the last occurrence of the kept output's end token in it;
2. keeps the template's choice: the whole prompt must begin with B up to that end token (a template that drops or
   rewrites the turn's reasoning once later turns exist, e.g. DeepSeek or Nemotron, fails this and re-renders);
3. checks the tokens before the turn are the prompt the turn followed (digest kept with it);
4. places the kept tokens there and continues with the template's rendering after the end token.

Meaning is unchanged by construction: the kept tokens are found by the digest of their own parse (what the
client was sent), so they decode to content equal to the turn the client sent back. Anything else re-renders.
Tokenization is piecewise at the same cuts every turn, so turn N's prompt + output is a prefix of turn N+1's.

Rendering A and B per turn makes a request's work grow with the square of its turns; `SpanMemo` remembers, per
process, where a turn's rendering sits (lengths, and a digest of the rendering up to its end token), keyed by a
digest of the messages rendered, so each request renders only the turns it has not seen before and checks the
others with one pass of hashing over the prompt text.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from agentserve.preprocess.template_render import RenderBudgetExceeded
from agentserve.protocol.token_ids import TYPECODE
from agentserve.state.kept_turns import KeptTurn, TokenHasher

Outcome = str  # spliced | not_kept | template_changed | prompt_changed | end_of_turn | render_failed | extended


@dataclass(frozen=True, slots=True)
class TurnSlot:
    """An earlier assistant turn: its messages [start, end) in the render plan, and its kept-turn key."""

    start: int
    end: int
    key: str
    render_key: bytes = b""  # digest of what renders A and B (messages, tools, switches); empty: not memoized


def _text_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class SpanMemo:
    """render_key + end token -> (len(A), end of the turn's end token in B, digest of B up to there). Bounded
    LRU, shared by the preprocessor's threads."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._max = max_entries
        self._spans: OrderedDict[bytes, tuple[int, int, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> tuple[int, int, bytes] | None:
        with self._lock:
            hit = self._spans.get(key)
            if hit is not None:
                self._spans.move_to_end(key)
            return hit

    def put(self, key: bytes, span: tuple[int, int, bytes]) -> None:
        with self._lock:
            self._spans[key] = span
            while len(self._spans) > self._max:
                self._spans.popitem(last=False)


class _TextPrefix:
    """Digests of growing prefixes of one text, hashing each character once when asked in increasing order."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._h = hashlib.blake2b(digest_size=16)
        self._pos = 0

    def digest(self, end: int) -> bytes:
        if end < self._pos:
            return _text_digest(self._text[:end])
        self._h.update(self._text[self._pos : end].encode())
        self._pos = end
        return self._h.copy().digest()


@dataclass
class Spliced:
    token_ids: array  # packed (protocol/token_ids.py)
    outcomes: Counter = field(default_factory=Counter)
    last_rerendered: bool = False  # the conversation's last assistant turn went back through the template
    used: list[str] = field(default_factory=list)  # keys spliced (their recency is refreshed)
    base: str = ""  # the last turn spliced, and where its output ends in token_ids (the prompt's kept link)
    base_end: int = 0


class _Prompt:
    """The token ids built so far: text[:pos] rendered, kept turns in place, and their running digest."""

    def __init__(self) -> None:
        self.ids = array(TYPECODE)
        self.pos = 0
        self.digest = TokenHasher()


def splice(
    text: str,
    slots: Sequence[TurnSlot],
    kept: dict[str, KeptTurn],
    *,
    render: Callable[[int, bool], str],  # render(n messages, add_generation_prompt) with this request's settings
    encode: Callable[[str], list[int]],  # text -> ids, the prompt's own tokenization
    token_text: Callable[[int], str],  # one id -> its text, special tokens included
    memo: SpanMemo | None = None,
) -> Spliced:
    """The prompt's token ids for rendered `text`, with kept turns in place of their re-rendering."""
    out = Spliced(array(TYPECODE))
    prompt = _Prompt()
    prefix = _TextPrefix(text)
    for i, slot in enumerate(slots):
        outcome = _place(text, slot, kept.get(slot.key), prompt, render, encode, token_text, memo, prefix)
        out.outcomes[outcome] += 1
        if outcome == "spliced":
            out.used.append(slot.key)
            out.base, out.base_end = slot.key, len(prompt.ids)
        if i == len(slots) - 1:
            out.last_rerendered = outcome != "spliced"
    if prompt.pos < len(text):
        prompt.ids.extend(encode(text[prompt.pos :]))
    out.token_ids = prompt.ids
    return out


def _place(
    text: str,
    slot: TurnSlot,
    turn: KeptTurn | None,
    prompt: _Prompt,
    render: Callable[[int, bool], str],
    encode: Callable[[str], list[int]],
    token_text: Callable[[int], str],
    memo: SpanMemo | None,
    prefix: _TextPrefix,
) -> Outcome:
    if turn is None or not turn.output_ids:
        return "not_kept"
    end_token = token_text(turn.output_ids[-1])
    if not end_token:
        return "end_of_turn"
    memo_key = slot.render_key + end_token.encode() if memo is not None and slot.render_key else None
    span = memo.get(memo_key) if memo_key is not None else None
    if span is None:
        try:
            before = render(slot.start, True)
            through = render(slot.end, False)
        except RenderBudgetExceeded:  # the request's render budget is spent: its 400, not one more render
            raise
        except Exception:  # noqa: BLE001 - a template that cannot render this prefix alone: re-render the turn
            return "render_failed"
        if not through.startswith(before):
            return "template_changed"  # the turn's rendering rewrites the generation prompt
        at = through.rfind(end_token, len(before))
        if at < 0:
            return "end_of_turn"
        span = (len(before), at + len(end_token), _text_digest(through[: at + len(end_token)]))
        if memo_key is not None:
            memo.put(memo_key, span)
    start, end, digest = span
    # The whole prompt must read as B up to the end token: a template that renders the turn otherwise once
    # later turns exist (drops its reasoning, say) keeps its choice.
    if start < prompt.pos or end > len(text) or prefix.digest(end) != digest:
        return "template_changed"
    gap = encode(text[prompt.pos : start]) if start > prompt.pos else []
    digest = prompt.digest.copy()
    digest.update(gap)
    if digest.digest() != turn.prompt_digest:
        return "prompt_changed"
    digest.update(turn.output_ids)
    prompt.ids.extend(gap)
    prompt.ids.extend(turn.output_ids)
    prompt.pos = end
    prompt.digest = digest
    return "spliced"

"""Naming the cache-buster behind a prefix divergence, from the decoded text around it.

The inputs are what the engine saw at turn N (prompt + output) and the prompt of turn N+1, as
token ids, with the first position where they differ. Causes are checked from most to least
specific; `unknown` is an honest answer.

A diagnosis reads token windows around the divergence (`WINDOW_TOKENS` either side, and the output's first
`WINDOW_TOKENS`), never the whole history: its cost is the same at turn 3 and at turn 300 (decoding both histories
whole took ~125 ms at 250K tokens, on a core the serving path shares). The sequences agree before the divergence,
so both windows start at the same token and positions in one are positions in the other. Every scan is linear in
the text it reads, and the scans that look for something after the divergence (reasoning markers and spans) read
a bounded window from it (`WINDOW_CHARS`): a prompt is client input, and a regex that rescans to the end from each
of 10K unclosed `<think>` openers was quadratic. A `deadline` (`time.monotonic()`) is checked between the steps:
past it the answer is `undiagnosed`, with the counts exact.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from itertools import islice
from typing import Callable, Literal, Sequence

from agentserve.preprocess.replay import POLICIES

Cause = Literal[
    "billing_header",
    "date_line",
    "tools_reordered",
    "tools_changed",
    "system_prompt_changed",
    "reasoning_dropped",
    "reasoning_reordered",
    "retokenization",
    "output_rerendered",
    "history_changed",
    "unknown",
    "undiagnosed",  # not diagnosed in time (the doctor was busy, or past its deadline): the counts stay exact
]

_BILLING = "x-anthropic-billing-header"
_DATE = re.compile(
    r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|"
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2},? \d{4}|"
    r"\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{4})\b"
)
# How reasoning reads in a prompt, one pair per replay family: a family added there is diagnosed here too.
_THINK_PAIRS = sorted({(p.think_open.strip(), p.think_close.strip()) for p in POLICIES.values()})
_THINK_OPENERS = tuple(o for o, _ in _THINK_PAIRS)
_SPAN_OPEN = re.compile("|".join(re.escape(o) for o, _ in _THINK_PAIRS))
_SPAN_CLOSE = {o: re.compile(re.escape(c)) for o, c in _THINK_PAIRS}

# Characters read past the start of the divergent line, and reasoning spans compared, at most.
WINDOW_CHARS = 64 * 1024
MAX_SPANS = 64
# Tokens decoded either side of the divergence (a tool list or a system prompt fits; ~4 characters a token).
WINDOW_TOKENS = 16 * 1024
# Characters left out where a window's edge may have split a token's character.
_EDGE = 8


class _Late(Exception):
    """The diagnosis passed its deadline."""


@dataclass(frozen=True)
class Divergence:
    expected: Sequence[int]  # turn N's prompt + output
    actual: Sequence[int]  # turn N+1's prompt
    at: int  # first differing token position
    prompt_len: int  # where turn N's output began inside `expected`
    # The preprocessor re-rendered turn N's output through the chat template instead of placing the generated
    # tokens (token-exact replay off, the turn not kept, or kept but not placeable).
    output_rerendered: bool = False


def _line_at(text: str, pos: int) -> str:
    """The line around `pos`, at most WINDOW_CHARS either side of it."""
    lo = max(0, pos - WINDOW_CHARS)
    start = text.rfind("\n", lo, pos) + 1 or lo
    end = text.find("\n", pos, pos + WINDOW_CHARS)
    return text[start : end if end >= 0 else min(len(text), pos + WINDOW_CHARS)]


def _tool_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("{") and ('"name"' in s or '"function"' in s):
            try:
                json.loads(s)
            except ValueError:
                continue
            out.append(s)
    return out


def attribute(
    d: Divergence,
    decode: Callable[[Sequence[int]], str],
    special_ids: frozenset[int] = frozenset(),
    deadline: float | None = None,
) -> Cause:
    """The cause of the divergence; `undiagnosed` once `deadline` (a `time.monotonic()` instant) has passed."""
    def on_time() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise _Late

    try:
        return _attribute(d, decode, special_ids, on_time)
    except _Late:
        return "undiagnosed"


@dataclass(frozen=True)
class _Window:
    """Both sequences decoded from the same token `lo` (they agree before `at`): `head` ends at the divergence, so
    len(head) is its position in both texts; `cut_*` says a text stops at the window, not at its sequence's end."""

    head: str
    exp: str  # expected[lo : at + WINDOW_TOKENS]
    act: str  # actual[lo : at + WINDOW_TOKENS]
    exp_prompt: int  # characters of `exp` that are turn N's prompt
    cut_exp: bool
    cut_act: bool
    cut_prompt: bool

    @classmethod
    def around(cls, d: Divergence, decode: Callable[[Sequence[int]], str]) -> "_Window":
        # From before the divergence, or before the output when the divergence is inside it (its reasoning is
        # looked for where the output began).
        lo = max(0, min(d.at, d.prompt_len) - WINDOW_TOKENS)
        e_hi = a_hi = d.at + WINDOW_TOKENS
        prompt_end = min(d.prompt_len, e_hi, len(d.expected))
        exp = decode(d.expected[lo:e_hi])
        return cls(
            head=decode(d.expected[lo : d.at]),
            exp=exp,
            act=decode(d.actual[lo:a_hi]),
            exp_prompt=len(exp) if prompt_end == min(e_hi, len(d.expected)) else len(decode(d.expected[lo:prompt_end])),
            cut_exp=e_hi < len(d.expected),
            cut_act=a_hi < len(d.actual),
            cut_prompt=d.prompt_len > e_hi,
        )


def _starts_with(text: str, prefix: str, cut: bool) -> bool:
    """text.startswith(prefix); where a window cut either, as far as both go, less a character a split token may
    have garbled at the edge."""
    if not cut:
        return text.startswith(prefix)
    n = max(0, min(len(text), len(prefix)) - _EDGE)
    return text[:n] == prefix[:n]


def _second_special(ids: Sequence[int], special_ids: frozenset[int], stop: int) -> int | None:
    """Where the second special token of ids[:stop] is (the end of the first turn): a scan that stops there."""
    seen = 0
    for i, t in enumerate(islice(ids, stop)):
        if t in special_ids:
            seen += 1
            if seen == 2:
                return i
    return None


def _attribute(
    d: Divergence, decode: Callable[[Sequence[int]], str], special_ids: frozenset[int], on_time: Callable[[], None]
) -> Cause:
    w = _Window.around(d, decode)
    on_time()
    exp_line, act_line = _line_at(w.exp, len(w.head)), _line_at(w.act, len(w.head))

    if _BILLING in exp_line or _BILLING in act_line:
        return "billing_header"
    if d.at < d.prompt_len:
        if _DATE.search(exp_line) and _DATE.search(act_line) and _DATE.sub("", exp_line) == _DATE.sub("", act_line):
            return "date_line"
        on_time()
        exp_prompt = w.exp[: w.exp_prompt]
        exp_tools, act_tools = _tool_lines(exp_prompt), _tool_lines(w.act)
        on_time()
        if exp_line.strip() in exp_tools or act_line.strip() in act_tools:
            return "tools_reordered" if sorted(exp_tools) == sorted(act_tools[: len(exp_tools)]) else "tools_changed"
        # Inside the first turn (before the second special token): the system prompt itself changed.
        second = _second_special(d.expected, special_ids, d.prompt_len) if special_ids else None
        if second is not None and d.at < second:
            return "system_prompt_changed"
        if _starts_with(w.act, exp_prompt, w.cut_act or w.cut_prompt):
            return "retokenization"
        # An earlier assistant turn lost (or moved) its reasoning: a proxy trimming old thinking.
        tail_exp, tail_act = _tails(w.head, w.exp, w.act)
        if tail_exp.lstrip().startswith(_THINK_OPENERS) and not tail_act.lstrip().startswith(_THINK_OPENERS):
            spans = _reasoning_spans(tail_exp, 1)
            return "reasoning_reordered" if spans and spans[0] and spans[0] in tail_act else "reasoning_dropped"
        return "history_changed"
    # The divergence is inside what the model generated last turn.
    output_text = decode(d.expected[d.prompt_len : d.prompt_len + WINDOW_TOKENS])[:WINDOW_CHARS]
    if _starts_with(w.act, w.exp, w.cut_act or w.cut_exp):
        return "retokenization"
    on_time()
    tail_exp, tail_act = _tails(w.head, w.exp, w.act)
    reasoning = _reasoning_spans(output_text)
    # Where the output's reasoning would be in the next prompt: from where the output began (the prompts agree
    # up to there), a window as long as the output plus WINDOW_CHARS.
    begun = w.exp_prompt
    seen = _Seen(w.act[begun : begun + len(output_text) + WINDOW_CHARS], on_time)
    if tail_exp.lstrip().startswith(_THINK_OPENERS) and not tail_act.lstrip().startswith(_THINK_OPENERS):
        if reasoning and any(r and seen(r) for r in reasoning):
            return "reasoning_reordered"
        return "reasoning_dropped"
    if reasoning and any(r and not seen(r) for r in reasoning):
        return "reasoning_dropped"
    if reasoning and len(reasoning) > 1:
        return "reasoning_reordered"
    if d.output_rerendered:  # same content, another spelling: the template's, not the model's
        return "output_rerendered"
    return "history_changed"


class _Seen:
    """Whether a reasoning span of the output is in the next prompt's window (each look is linear in the window;
    at most MAX_SPANS looks, and the deadline is checked between them)."""

    def __init__(self, window: str, on_time: Callable[[], None]) -> None:
        self._window = window
        self._on_time = on_time

    def __call__(self, span: str) -> bool:
        self._on_time()
        return span in self._window


def _tails(head: str, exp_text: str, act_text: str) -> tuple[str, str]:
    """Both texts from the start of the line where they part (a marker may straddle the divergent token), at most
    WINDOW_CHARS of each."""
    start = head.rfind("\n") + 1
    return exp_text[start : start + WINDOW_CHARS], act_text[start : start + WINDOW_CHARS]


def _reasoning_spans(text: str, limit: int = MAX_SPANS) -> list[str]:
    """The first `limit` closed reasoning spans, each closed by its own family's closer, in one left-to-right pass
    (an opener with no closer after it ends the search: in one family's prompt no later opener has one either)."""
    spans: list[str] = []
    pos = 0
    while len(spans) < limit:
        opened = _SPAN_OPEN.search(text, pos)
        if opened is None:
            break
        closed = _SPAN_CLOSE[opened.group()].search(text, opened.end())
        if closed is None:
            break
        spans.append(text[opened.end() : closed.start()].strip())
        pos = closed.end()
    return spans

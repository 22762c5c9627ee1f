"""Naming the cache-buster behind a prefix divergence, from the decoded text around it.

The inputs are what the engine saw at turn N (prompt + output) and the prompt of turn N+1, as
token ids, with the first position where they differ. Causes are checked from most to least
specific; `unknown` is an honest answer.

Every scan is linear in the text it reads, and the scans that look for something after the divergence
(reasoning markers and spans) read a bounded window from it (`WINDOW_CHARS`): a prompt is client input, and a
regex that rescans to the end from each of 10K unclosed `<think>` openers was quadratic. A `deadline`
(`time.monotonic()`) is checked between the steps: past it the answer is `undiagnosed`, with the counts exact.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
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


def _attribute(
    d: Divergence, decode: Callable[[Sequence[int]], str], special_ids: frozenset[int], on_time: Callable[[], None]
) -> Cause:
    head = decode(d.expected[: d.at])
    exp_text, act_text = decode(d.expected), decode(d.actual)
    on_time()
    exp_line, act_line = _line_at(exp_text, len(head)), _line_at(act_text, len(head))

    if _BILLING in exp_line or _BILLING in act_line:
        return "billing_header"
    if d.at < d.prompt_len:
        if _DATE.search(exp_line) and _DATE.search(act_line) and _DATE.sub("", exp_line) == _DATE.sub("", act_line):
            return "date_line"
        on_time()
        exp_tools, act_tools = _tool_lines(exp_text[: len(decode(d.expected[: d.prompt_len]))]), _tool_lines(act_text)
        on_time()
        if exp_line.strip() in exp_tools or act_line.strip() in act_tools:
            return "tools_reordered" if sorted(exp_tools) == sorted(act_tools[: len(exp_tools)]) else "tools_changed"
        # Inside the first turn (before the second special token): the system prompt itself changed.
        specials = [i for i, t in enumerate(d.expected[: d.prompt_len]) if t in special_ids]
        if len(specials) >= 2 and d.at < specials[1]:
            return "system_prompt_changed"
        if act_text.startswith(exp_text[: len(decode(d.expected[: d.prompt_len]))]):
            return "retokenization"
        # An earlier assistant turn lost (or moved) its reasoning: a proxy trimming old thinking.
        tail_exp, tail_act = _tails(head, exp_text, act_text)
        if tail_exp.lstrip().startswith(_THINK_OPENERS) and not tail_act.lstrip().startswith(_THINK_OPENERS):
            spans = _reasoning_spans(tail_exp, 1)
            return "reasoning_reordered" if spans and spans[0] and spans[0] in tail_act else "reasoning_dropped"
        return "history_changed"
    # The divergence is inside what the model generated last turn.
    output_text = decode(d.expected[d.prompt_len :])[:WINDOW_CHARS]
    if act_text.startswith(exp_text):
        return "retokenization"
    on_time()
    tail_exp, tail_act = _tails(head, exp_text, act_text)
    reasoning = _reasoning_spans(output_text)
    # Where the output's reasoning would be in the next prompt: from where the output began (the prompts agree
    # up to there), a window as long as the output plus WINDOW_CHARS.
    begun = len(decode(d.expected[: d.prompt_len]))
    seen = _Seen(act_text[begun : begun + len(output_text) + WINDOW_CHARS], on_time)
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

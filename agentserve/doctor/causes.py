"""Naming the cache-buster behind a prefix divergence, from the decoded text around it.

The inputs are what the engine saw at turn N (prompt + output) and the prompt of turn N+1, as
token ids, with the first position where they differ. Causes are checked from most to least
specific; `unknown` is an honest answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

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
]

_BILLING = "x-anthropic-billing-header"
_DATE = re.compile(
    r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|"
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2},? \d{4}|"
    r"\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{4})\b"
)
_THINK_OPENERS = ("<think>", "◁think▷", "[THINK]", "<|channel|>analysis")


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
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start : end if end >= 0 else len(text)]


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
) -> Cause:
    head = decode(d.expected[: d.at])
    exp_text, act_text = decode(d.expected), decode(d.actual)
    exp_line, act_line = _line_at(exp_text, len(head)), _line_at(act_text, len(head))

    if _BILLING in exp_line or _BILLING in act_line:
        return "billing_header"
    if d.at < d.prompt_len:
        if _DATE.search(exp_line) and _DATE.search(act_line) and _DATE.sub("", exp_line) == _DATE.sub("", act_line):
            return "date_line"
        exp_tools, act_tools = _tool_lines(exp_text[: len(decode(d.expected[: d.prompt_len]))]), _tool_lines(act_text)
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
            spans = _reasoning_spans(tail_exp)
            return "reasoning_reordered" if spans and spans[0] and spans[0] in tail_act else "reasoning_dropped"
        return "history_changed"
    # The divergence is inside what the model generated last turn.
    output_text = decode(d.expected[d.prompt_len :])
    if act_text.startswith(exp_text):
        return "retokenization"
    tail_exp, tail_act = _tails(head, exp_text, act_text)
    if tail_exp.lstrip().startswith(_THINK_OPENERS) and not tail_act.lstrip().startswith(_THINK_OPENERS):
        reasoning = _reasoning_spans(output_text)
        if reasoning and any(r and r in act_text for r in reasoning):
            return "reasoning_reordered"
        return "reasoning_dropped"
    reasoning = _reasoning_spans(output_text)
    if reasoning and any(r and r not in act_text for r in reasoning):
        return "reasoning_dropped"
    if reasoning and len(reasoning) > 1:
        return "reasoning_reordered"
    if d.output_rerendered:  # same content, another spelling: the template's, not the model's
        return "output_rerendered"
    return "history_changed"


def _tails(head: str, exp_text: str, act_text: str) -> tuple[str, str]:
    """Both texts from the start of the line where they part (a marker may straddle the divergent token)."""
    start = head.rfind("\n") + 1
    return exp_text[start:], act_text[start:]


def _reasoning_spans(text: str) -> list[str]:
    spans = re.findall(r"(?:<think>|◁think▷|\[THINK\])(.*?)(?:</think>|◁/think▷|\[/THINK\])", text, re.S)
    return [s.strip() for s in spans]

"""Shared test helpers: run a parser over chunks, check the event protocol, summarise events for assertions."""

from __future__ import annotations

import itertools
import json
from typing import Any

from agentserve.parsers import (
    ReasoningDelta,
    StreamParser,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
)


def make(**kw: Any) -> StreamParser:
    counter = itertools.count()
    return StreamParser(id_factory=lambda: f"id{next(counter)}", **kw)


def run(kw: dict[str, Any], chunks: list[str]) -> list[Any]:
    p = make(**kw)
    events: list[Any] = []
    for c in chunks:
        events += p.feed(c)
    tail = p.finish()
    assert not p.internal_errors, p.internal_errors
    assert not any(isinstance(e, ToolCallTruncated) for e in events), "truncation is only known at finish()"
    return events + tail


def merged(events: list[Any]) -> list[Any]:
    """Join adjacent same-kind deltas so that differently split streams compare equal."""
    out: list[Any] = []
    for e in events:
        if out and type(e) is type(out[-1]):
            last = out[-1]
            if isinstance(e, TextDelta):
                out[-1] = TextDelta(last.text + e.text)
                continue
            if isinstance(e, ReasoningDelta):
                out[-1] = ReasoningDelta(last.text + e.text)
                continue
            if isinstance(e, ToolCallArgsDelta) and e.index == last.index:
                out[-1] = ToolCallArgsDelta(e.index, last.fragment + e.fragment)
                continue
        out.append(e)
    return out


def check_protocol(events: list[Any]) -> None:
    """Start -> ArgsDelta* -> exactly one of End/Error/Truncated per index; fragments concatenate to arguments."""
    state: dict[int, str] = {}
    frags: dict[int, list[str]] = {}
    next_index = 0
    for e in events:
        if isinstance(e, (TextDelta, ReasoningDelta)):
            assert e.text, e
            continue
        i = e.index
        if i not in state:
            assert i == next_index, f"indices must appear in order: {e}"
            next_index += 1
            state[i] = "new"
        assert state[i] in ("new", "open"), f"event after the call was closed: {e}"
        if isinstance(e, ToolCallStart):
            assert state[i] == "new" and e.name and e.id, e
            state[i], frags[i] = "open", []
        elif isinstance(e, ToolCallArgsDelta):
            assert state[i] == "open" and e.fragment, e
            frags[i].append(e.fragment)
        elif isinstance(e, ToolCallEnd):
            assert state[i] == "open", e
            assert "".join(frags[i]) == e.arguments, (frags[i], e.arguments)
            assert isinstance(json.loads(e.arguments), dict), e
            state[i] = "closed"
        elif isinstance(e, (ToolCallError, ToolCallTruncated)):
            state[i] = "closed"
        else:  # pragma: no cover
            raise AssertionError(e)
    assert all(s == "closed" for s in state.values()), f"unclosed calls: {state}"


def summary(events: list[Any]) -> list[tuple]:
    """Compact, user-level view: ("R", text), ("T", text), ("call", i, name, args), ("error", i, name|None),
    ("trunc", i, name|None)."""
    check_protocol(events)
    out: list[tuple] = []
    names: dict[int, str] = {}
    for e in merged(events):
        if isinstance(e, ReasoningDelta):
            out.append(("R", e.text))
        elif isinstance(e, TextDelta):
            out.append(("T", e.text))
        elif isinstance(e, ToolCallStart):
            names[e.index] = e.name
        elif isinstance(e, ToolCallEnd):
            out.append(("call", e.index, names[e.index], json.loads(e.arguments)))
        elif isinstance(e, ToolCallError):
            out.append(("error", e.index, names.get(e.index)))
        elif isinstance(e, ToolCallTruncated):
            out.append(("trunc", e.index, names.get(e.index)))
    # merge R/T again: a call between them may have been dropped from the view
    res: list[tuple] = []
    for item in out:
        if res and item[0] in ("R", "T") and res[-1][0] == item[0]:
            res[-1] = (item[0], res[-1][1] + item[1])
        else:
            res.append(item)
    return res


def views(kw: dict[str, Any], text: str) -> list[tuple]:
    """The summary of `text` fed whole, after checking that one character a delta gives the same."""
    whole = summary(run(kw, [text]))
    assert summary(run(kw, list(text))) == whole
    return whole


def split(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]

"""The parser benchmark's workloads are the formats as registered and named as vLLM names them: each renders a call
or a reasoning block our parser reads back exactly (the benchmark asserts it on 1K-32K-token bodies; a workload that
did not parse would stop the run after minutes), and each names a vLLM parser class that exists."""

from __future__ import annotations

import importlib
import json

import pytest

from agentserve.bench.parsers import REASONING_WORKLOADS, TOOL_WORKLOADS, TOOLS, WORDS
from agentserve.parsers import StreamParser, reasoning_parsers, tool_call_parsers

BODY = " ".join(WORDS * 3)


def feed(kw: dict, text: str, step: int = 3) -> list:
    p = StreamParser(**kw)
    events = []
    for i in range(0, len(text), step):
        events += p.feed(text[i:i + step])
    return events + p.finish()


@pytest.mark.parametrize(("name", "render", "module", "cls"), TOOL_WORKLOADS, ids=[w[0] for w in TOOL_WORKLOADS])
def test_tool_workload_reads_back_its_body(name, render, module, cls):
    assert name in tool_call_parsers()
    ends = [e for e in feed({"tool_calls": name, "tools": TOOLS}, render(BODY)) if type(e).__name__ == "ToolCallEnd"]
    assert [json.loads(e.arguments) for e in ends] == [{"path": "app/handler.py", "content": BODY}]
    assert hasattr(importlib.import_module(module), cls)


@pytest.mark.parametrize(("name", "start", "stop", "module", "cls"), REASONING_WORKLOADS,
                         ids=[w[0] for w in REASONING_WORKLOADS])
def test_reasoning_workload_reads_back_its_body(name, start, stop, module, cls):
    assert name in reasoning_parsers()
    events = feed({"reasoning": name}, start + BODY + stop + "\n\nDone.")
    assert "".join(e.text for e in events if type(e).__name__ == "ReasoningDelta") == BODY
    assert "".join(e.text for e in events if type(e).__name__ == "TextDelta") == "Done."
    assert hasattr(importlib.import_module(module), cls)

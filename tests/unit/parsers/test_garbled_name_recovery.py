"""A call whose name is garbled ends as a ToolCallError, and the calls around it in the same output still arrive,
whole and in order, however the stream is split (MiniMax-M2 writes several <invoke>s in one block, nemotron_deci a
JSON array: a bad name there used to cost every later call of the block)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.parsers import ToolCallError
from agentserve.parsers.tools.pythonic import PY_END, PY_START

from .fixtures import CALL_A, CALL_B, CALL_NESTED, TOOLS, r_pythonic
from .helpers import run, split, summary
from .test_multi_call_deltas import RENDER

# (parser, renderer) per form. The bare pythonic list is answer text unless its first element reads as a call:
# wrapped, every element counts.
FORMATS = {name: (name, r) for name, r in RENDER.items()} | {
    "pythonic": ("pythonic", lambda calls: PY_START + r_pythonic(calls) + PY_END),
    "mistral(array)": ("mistral", lambda calls: "[TOOL_CALLS]" + json.dumps(
        [{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)),
}
GOOD = [CALL_A, CALL_B, CALL_NESTED, ("ping", {})]
GARBLED = ["x:y", "a/b", "bad name"]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@settings(max_examples=40, deadline=None)
@given(calls=st.lists(st.sampled_from(GOOD), min_size=1, max_size=3), at=st.integers(0, 3),
       bad=st.sampled_from(GARBLED), data=st.data())
def test_a_garbled_name_costs_only_its_own_call(fmt, calls, at, bad, data):
    if fmt == "harmony" and " " in bad:
        bad = "x:y"  # a space ends harmony's recipient: `functions.bad` is a valid name followed by junk
    at = min(at, len(calls))
    parser, render = FORMATS[fmt]
    text = render(calls[:at] + [(bad, {"a": 1})] + calls[at:])
    expected = [("call", i, n, a) for i, (n, a) in enumerate(calls[:at])] + [("error", at, None)] + [
        ("call", at + 1 + i, n, a) for i, (n, a) in enumerate(calls[at:])
    ]
    kw = {"tool_calls": parser, "tools": TOOLS}
    whole = run(kw, [text])
    assert [v for v in summary(whole) if v[0] != "T"] == expected
    (err,) = [e for e in whole if isinstance(e, ToolCallError)]
    assert bad in err.raw
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))
    assert summary(run(kw, split(text, cuts))) == summary(whole)

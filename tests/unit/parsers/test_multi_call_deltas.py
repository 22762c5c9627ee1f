"""Several calls in one delta (MTP, speculative decoding, a slow client) give the same events as any other split of
the same stream, ToolCallError.raw included: a call's events may not depend on where the deltas were cut."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.parsers import ToolCallError, tool_call_parsers

from .fixtures import CALL_A, CALL_B, CALL_NESTED, FAMILIES, TOOLS, r_deepseek_v31, r_hermes, r_qwen3_coder
from .helpers import check_protocol, merged, run, split

# every tool-call format, aliases included (another name for a format renders as that format)
RENDER = {f.tool_calls: f.render_calls for f in FAMILIES if f.render_calls} | {
    "deepseek_v3_1": r_deepseek_v31, "qwen3_xml": r_qwen3_coder, "qwen3_json": r_hermes, "step3p5": r_qwen3_coder}
POOL = [CALL_A, CALL_B, CALL_NESTED, ("bad name", {"a": 1}), ("x:y", {}), ("ping", {})]


def _view(events):
    return [(type(e).__name__, {k: getattr(e, k) for k in e.__slots__ if k != "id"}) for e in merged(events)]


def test_every_tool_format_has_a_renderer():
    assert set(RENDER) == set(tool_call_parsers())


@pytest.mark.parametrize("fmt", sorted(RENDER))
@settings(max_examples=60, deadline=None)
@given(calls=st.lists(st.sampled_from(POOL), min_size=1, max_size=4),
       lead=st.sampled_from(["", "Checking. ", "Checking.\n"]), data=st.data())
def test_multi_call_deltas_do_not_depend_on_chunking(fmt, calls, lead, data):
    text = RENDER[fmt](calls)
    if fmt not in ("pythonic", "llama3_json") or lead.endswith("\n"):  # bare calls start at a line start
        text = lead + text
    kw = {"tool_calls": fmt, "tools": TOOLS}
    whole = run(kw, [text])
    check_protocol(whole)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))
    assert _view(run(kw, split(text, cuts))) == _view(whole)


@pytest.mark.parametrize("chunks", ["whole", "chars"])
def test_nemotron_error_between_calls_keeps_its_text(chunks):
    text = '<TOOLCALL>[{"name":"a","arguments":{}}, {"x": 1}, {"name":"b","arguments":{}}]</TOOLCALL>'
    events = run({"tool_calls": "nemotron_deci"}, [text] if chunks == "whole" else list(text))
    assert [e for e in events if isinstance(e, ToolCallError)] == [ToolCallError(1, "tool call has no name",
                                                                                 ', {"x": 1}')]


ELEMENTS = ['{"name": "a", "arguments": {"x": [1, {"y": "}"}]}}', '{"arguments": {}, "name": "b"}', '{"x": 1}',
            '{"name": "bad name", "arguments": {}}', '{"name": "c", "arguments": "nope"}']
JSON_MULTI = {
    "nemotron_deci": lambda els: "<TOOLCALL>[" + ", ".join(els) + "]</TOOLCALL>",
    "mistral": lambda els: "[TOOL_CALLS] [" + ", ".join(els) + "]",
    "llama3_json": lambda els: "<|python_tag|>" + "; ".join(els),
    "hermes": lambda els: "".join(f"<tool_call>{e}</tool_call>\n" for e in els),
}


@pytest.mark.parametrize("fmt", sorted(JSON_MULTI))
@settings(max_examples=80, deadline=None)
@given(els=st.lists(st.sampled_from(ELEMENTS), min_size=1, max_size=4), data=st.data())
def test_json_calls_and_broken_objects_in_one_delta(fmt, els, data):
    text = "Sure. " + JSON_MULTI[fmt](els) if fmt != "llama3_json" else JSON_MULTI[fmt](els)
    kw = {"tool_calls": fmt}
    whole = run(kw, [text])
    check_protocol(whole)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))
    assert _view(run(kw, split(text, cuts))) == _view(whole)
    assert _view(run(kw, list(text))) == _view(whole)


BROKEN_BETWEEN = [
    ("pythonic", "<|python_start|>[f(a=1) x, g()]<|python_end|> after"),
    ("pythonic", "[f(a=1), g(1), h()]"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>bad name\n```json\n{}\n```"
                    "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>ok\n```json\n{}\n```<｜tool▁call▁end｜>"
                    "<｜tool▁calls▁end｜>"),
    ("mistral", '[TOOL_CALLS]a{"x": 1}[TOOL_CALLS]b{"x": }, more[TOOL_CALLS]c{}'),
    ("llama3_json", '{"name": "a", "arguments": {}}; {"x": 1}; {"name": "b", "arguments": {}} then text'),
]


@pytest.mark.parametrize(("fmt", "text"), BROKEN_BETWEEN)
def test_broken_call_between_good_ones_is_split_independent(fmt, text):
    whole = run({"tool_calls": fmt}, [text])
    assert any(isinstance(e, ToolCallError) and e.raw for e in whole), whole
    assert _view(run({"tool_calls": fmt}, list(text))) == _view(whole)

"""Random text and marker soup: `feed` never raises, the event protocol holds, and splitting never matters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.parsers import reasoning_parsers, tool_call_parsers

from .fixtures import FAMILIES, TOOLS
from .helpers import check_protocol, merged, run, split

MARKERS = [
    "<think>", "</think>", "◁think▷", "◁/think▷", "[THINK]", "[/THINK]",
    "<tool_call>", "</tool_call>", "<TOOLCALL>", "</TOOLCALL>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]",
    "[CALL_ID]", "<|python_start|>", "<|python_end|>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
    "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
    "<|tool_calls_section_end|>", "<function=", "</function>", "<parameter=", "</parameter>", ">",
    "<minimax:tool_call>", "</minimax:tool_call>", '<invoke name="', '<parameter name="', "</invoke>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<seed:tool_call>", "</seed:tool_call>",
    "<｜DSML｜function_calls>", "</｜DSML｜function_calls>", '<｜DSML｜invoke name="', "</｜DSML｜invoke>",
    '<｜DSML｜parameter name="', '" string="true">', '" string="false">', "</｜DSML｜parameter>", "\n```",
    "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>",
    "analysis", "final", "commentary", " to=functions.f ", "json",
    "<|channel>", "thought\n", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "call:", "call:f{",
    "<start_function_call>", "<end_function_call>", "<escape>", "<seed:think>", "</seed:think>",
    "<longcat_tool_call>", "</longcat_tool_call>", "<tool_calls>", "</tool_calls>", "<|action_start|>", "<|plugin|>",
    "<|action_end|>", "<|tool_call_start|>", "<|tool_call_end|>", "<function_calls>", "</function_calls>", "true",
]
JSONISH = ['{"name": "f", "arguments": {"a": 1}}', '{"name": ', '"arguments": {', "}", "{", "]", "[", '"', "\\",
           ", ", ";", "f(a=1)", "[f(", "x=", "'s'", "\n", " ", "```json\n", "get_weather", "null", "é☃🎉"]

soup = st.lists(
    st.one_of(st.sampled_from(MARKERS), st.sampled_from(JSONISH), st.text(max_size=6)), max_size=30
).map("".join)

CONFIGS = [(f.reasoning, f.tool_calls) for f in FAMILIES] + [
    (r, None) for r in reasoning_parsers() if r != "gpt_oss"
] + [(None, t) for t in tool_call_parsers()]
CONFIGS = list(dict.fromkeys(CONFIGS))


@pytest.mark.parametrize(("reasoning", "tool_calls"), CONFIGS, ids=[f"{r}+{t}" for r, t in CONFIGS])
@settings(max_examples=120, deadline=None)
@given(text=soup, data=st.data(), started=st.booleans())
def test_soup_never_raises_and_split_invariant(reasoning, tool_calls, text, data, started):
    kw = {"reasoning": reasoning, "tool_calls": tool_calls, "tools": TOOLS, "reasoning_started": started}
    whole = run(kw, [text])
    check_protocol(whole)
    for e in whole:
        if hasattr(e, "raw"):
            assert e.raw in text
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=20)) if text else []
    parts = run(kw, split(text, cuts))
    check_protocol(parts)
    assert _norm(merged(parts)) == _norm(merged(whole))


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200))
def test_random_unicode_text_is_kept_verbatim_without_markers(text):
    for marker in ("<", "[", "◁", "{"):
        text = text.replace(marker, "")
    events = run({"reasoning": "qwen3", "tool_calls": "hermes"}, [text])
    assert "".join(e.text for e in events) == text


def _norm(events):
    """Compare everything but ids (ToolCallError.raw included: it may not depend on the split either)."""
    return [tuple((k, getattr(e, k)) for k in e.__slots__ if k != "id") + (type(e).__name__,) for e in events]

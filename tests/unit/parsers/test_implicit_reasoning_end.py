"""Qwen3.5 may open a tool call inside its thinking without closing it, and Kimi its tool-call section: the call must
still reach the tool parser (reasoning ends there, as vLLM and Dynamo end it). A `<tool_call>` that only appears in
the thought (not followed by `<function=`) stays reasoning."""

from __future__ import annotations

import pytest

from .helpers import views

XML_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
KIMI_CALL = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
             '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>')


@pytest.mark.parametrize(("lead", "started"), [("<think>", False), ("<think>", True), ("", True)])
def test_qwen3_tool_call_ends_unclosed_reasoning(lead, started):
    kw = {"reasoning": "qwen3", "tool_calls": "qwen3_coder", "reasoning_started": started}
    assert views(kw, f"{lead}I need the weather.\n\n{XML_CALL}") == [
        ("R", "I need the weather.\n\n"), ("call", 0, "get_weather", {"city": "Paris"})
    ]


def test_kimi_tool_section_ends_unclosed_reasoning():
    kw = {"reasoning": "kimi", "tool_calls": "kimi_k2"}
    assert views(kw, f"<think>I need the weather. {KIMI_CALL}") == [
        ("R", "I need the weather. "), ("call", 0, "get_weather", {"city": "Paris"})
    ]


@pytest.mark.parametrize("thought", [
    "maybe <tool_call>{\"name\": \"x\"}</tool_call> later",
    "a <tool_call> here is just words",
    "ends with <tool_call>",
    "ends with <tool_call>\n\n  ",
    "<tool_call>" + " " * 100 + "<function=f>",  # too far to be the call's opening
])
def test_tool_call_mentioned_in_reasoning_stays_reasoning(thought):
    kw = {"reasoning": "qwen3", "tool_calls": "qwen3_coder"}
    assert views(kw, f"<think>{thought}") == [("R", thought)]
    assert views(kw, f"<think>{thought}</think>ok") == [("R", thought), ("T", "ok")]


def test_formats_without_implicit_end_keep_the_call_in_reasoning():
    kw = {"reasoning": "deepseek_r1", "tool_calls": "qwen3_coder"}
    assert views(kw, f"thinking {XML_CALL}") == [("R", f"thinking {XML_CALL}")]

"""Hand-written cases: API surface, errors, truncation, format variants and edge cases a user would check."""

from __future__ import annotations

import json

import pytest

from agentserve.parsers import (
    ReasoningDelta,
    StreamParser,
    TextDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
    reasoning_parsers,
    tool_call_parsers,
)

from .fixtures import TOOLS
from .helpers import run, views


def test_registries_are_sorted_and_complete():
    r, t = reasoning_parsers(), tool_call_parsers()
    assert list(r) == sorted(r) and list(t) == sorted(t)
    assert {"deepseek_r1", "qwen3", "nemotron_deci", "nemotron3", "nemotron_nano", "glm45", "kimi", "mistral",
            "gpt_oss", "minimax_append_think", "gemma4", "seed_oss"} <= set(r)
    assert {"hermes", "qwen3_coder", "llama3_json", "mistral", "pythonic", "deepseek_v3", "deepseek_v31", "kimi_k2",
            "glm47", "glm45", "minimax_m2", "harmony", "nemotron_deci", "gemma4", "functiongemma", "granite4"} <= set(t)


def test_unknown_names_and_bad_combinations_raise_at_construction():
    with pytest.raises(ValueError):
        StreamParser(reasoning="nope")
    with pytest.raises(ValueError):
        StreamParser(tool_calls="nope")
    with pytest.raises(ValueError):
        StreamParser(reasoning="gpt_oss", tool_calls="hermes")


def test_passthrough_when_both_none():
    p = StreamParser()
    text = "<think>x</think><tool_call>{}</tool_call>"
    assert p.feed(text) + p.finish() == [TextDelta(text)]


def test_default_ids_are_unique_call_ids_and_id_factory_is_used():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>'
    p = StreamParser(tool_calls="hermes")
    starts = [e for e in p.feed(text) if isinstance(e, ToolCallStart)]
    assert [s.id[:5] for s in starts] == ["call_", "call_"] and starts[0].id != starts[1].id
    p = StreamParser(tool_calls="hermes", id_factory=iter(["toolu_1", "toolu_2"]).__next__)
    assert [e.id for e in p.feed(text) if isinstance(e, ToolCallStart)] == ["toolu_1", "toolu_2"]


def test_tool_call_end_is_emitted_before_end_of_stream():
    p = StreamParser(tool_calls="hermes")
    evs = p.feed('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>')
    assert evs[-1] == ToolCallEnd(0, '{"x": 1}')


def test_hermes_name_after_arguments_is_buffered_then_streamed():
    text = '<tool_call>{"arguments": {"path": "a", "n": [1, 2]}, "name": "write"}</tool_call>'
    assert views({"tool_calls": "hermes"}, text) == [("call", 0, "write", {"path": "a", "n": [1, 2]})]


def test_hermes_arguments_given_as_json_string():
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'
    assert views({"tool_calls": "hermes"}, text) == [("call", 0, "f", {"a": 1})]


def test_malformed_json_is_an_error_and_parsing_continues():
    text = ('<tool_call>{"name": "f", "arguments": {"a": 1,}}</tool_call>ok'
            '<tool_call>{"name": "g", "arguments": {}}</tool_call>')
    assert views({"tool_calls": "hermes"}, text) == [("error", 0, "f"), ("T", "ok"), ("call", 1, "g", {})]
    text = "<tool_call>not json at all</tool_call>after"
    out = views({"tool_calls": "hermes"}, text)
    assert out == [("error", 0, None), ("T", "after")]
    err = [e for e in run({"tool_calls": "hermes"}, [text]) if isinstance(e, ToolCallError)][0]
    assert err.raw == "<tool_call>not json at all</tool_call>"


def test_truncated_call_is_reported_with_raw_text():
    text = '<think>r</think><tool_call>{"name": "f", "arguments": {"a": "lo'
    events = run({"reasoning": "qwen3", "tool_calls": "hermes"}, [text])
    assert events[-1] == ToolCallTruncated(0, '<tool_call>{"name": "f", "arguments": {"a": "lo')
    # cut before the name is known: still reported, never dropped
    events = run({"tool_calls": "hermes"}, ['<tool_call>{"na'])
    assert events == [ToolCallTruncated(0, '<tool_call>{"na')]


def test_partial_marker_at_end_of_stream_is_text():
    assert views({"reasoning": "qwen3", "tool_calls": "hermes"}, "answer <tool_ca") == [("T", "answer <tool_ca")]
    assert views({"reasoning": "qwen3", "tool_calls": "hermes"}, "answer </thi") == [("T", "answer </thi")]


def test_tool_call_inside_reasoning_is_reasoning_and_think_inside_arguments_is_argument_text():
    text = '<think>maybe <tool_call>{"name": "x"}</tool_call></think>'
    assert views({"reasoning": "qwen3", "tool_calls": "hermes"}, text) == [
        ("R", 'maybe <tool_call>{"name": "x"}</tool_call>')
    ]
    text = '<tool_call>{"name": "w", "arguments": {"s": "<think>not reasoning</think>"}}</tool_call>'
    assert views({"reasoning": "qwen3", "tool_calls": "hermes"}, text) == [
        ("call", 0, "w", {"s": "<think>not reasoning</think>"})
    ]


def test_reasoning_started_and_forced_formats():
    assert views({"reasoning": "qwen3", "reasoning_started": True}, "r</think>t") == [("R", "r"), ("T", "t")]
    assert views({"reasoning": "deepseek_r1"}, "<think>r</think>\n\nt") == [("R", "r"), ("T", "t")]
    assert views({"reasoning": "deepseek_r1"}, "r</think>t") == [("R", "r"), ("T", "t")]
    assert views({"reasoning": "qwen3"}, "no thinking") == [("T", "no thinking")]


def test_text_between_blocks_is_text_and_several_reasoning_blocks():
    text = "<think>a</think>mid<think>b</think>end"
    assert views({"reasoning": "qwen3"}, text) == [("R", "a"), ("T", "mid"), ("R", "b"), ("T", "end")]


def test_qwen3_coder_types_values_by_schema_and_keeps_unknown_as_strings():
    text = ("<tool_call>\n<function=search>\n<parameter=n>\n5\n</parameter>\n<parameter=zip>\n007\n</parameter>\n"
            "<parameter=exact>\nTrue\n</parameter>\n<parameter=tags>\n['a', 'b']\n</parameter>\n"
            "<parameter=other>\n12\n</parameter>\n<parameter=s>\nline1\nline2\n</parameter>\n</function>\n</tool_call>")
    assert views({"tool_calls": "qwen3_coder", "tools": TOOLS}, text) == [
        ("call", 0, "search", {"n": 5, "zip": "007", "exact": True, "tags": ["a", "b"], "other": "12",
                               "s": "line1\nline2"})
    ]
    # a value that does not fit its schema stays the string the model wrote
    text = "<tool_call><function=search><parameter=n>many</parameter></function></tool_call>"
    assert views({"tool_calls": "qwen3_coder", "tools": TOOLS}, text) == [("call", 0, "search", {"n": "many"})]


def test_xml_call_without_parameters_and_glm_untyped_values():
    assert views({"tool_calls": "qwen3_coder"}, "<tool_call><function=ping></function></tool_call>") == [
        ("call", 0, "ping", {})
    ]
    text = "<tool_call>f<arg_key>a</arg_key><arg_value>[1, 2]</arg_value><arg_key>b</arg_key><arg_value>x y</arg_value></tool_call>"
    assert views({"tool_calls": "glm47"}, text) == [("call", 0, "f", {"a": [1, 2], "b": "x y"})]
    assert views({"tool_calls": "glm47"}, "<tool_call>noargs</tool_call>") == [("call", 0, "noargs", {})]


def test_mistral_pre_v11_array_and_call_id_forms():
    text = '[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]'
    assert views({"tool_calls": "mistral"}, text) == [("call", 0, "a", {"x": 1}), ("call", 1, "b", {})]
    text = '[TOOL_CALLS]a[CALL_ID]abc123XYZ[ARGS]{"x": 1}[TOOL_CALLS]b{"y": 2} trailing'
    assert views({"tool_calls": "mistral"}, text) == [
        ("call", 0, "a", {"x": 1}), ("call", 1, "b", {"y": 2}), ("T", "trailing")
    ]


def test_llama3_json_bare_object_only_at_a_line_start():
    assert views({"tool_calls": "llama3_json"}, 'See {"name": "f"} here') == [("T", 'See {"name": "f"} here')]
    assert views({"tool_calls": "llama3_json"}, '  {"name": "f", "arguments": {"a": 1}}') == [
        ("call", 0, "f", {"a": 1})
    ]


def test_pythonic_list_that_is_not_a_call_is_text_and_wrapped_form():
    assert views({"tool_calls": "pythonic"}, "[1, 2] are numbers") == [("T", "[1, 2] are numbers")]
    assert views({"tool_calls": "pythonic"}, "[") == [("T", "[")]
    text = 'Sure.<|python_start|>[f(a=True, b=None, c=(1, 2))]<|python_end|>'
    assert views({"tool_calls": "pythonic"}, text) == [("T", "Sure."), ("call", 0, "f", {"a": True, "b": None,
                                                                                         "c": [1, 2]})]
    assert views({"tool_calls": "pythonic"}, "[f(1)]")[0] == ("error", 0, "f")


def test_harmony_recipient_before_channel_preamble_and_missing_call_token():
    kw = {"reasoning": "gpt_oss", "tool_calls": "harmony"}
    text = ('<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.'
            '<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}')
    assert views(kw, text) == [("R", "think"), ("T", "Checking."), ("call", 0, "get_weather", {"city": "Oslo"})]
    kw_text_only = {"tool_calls": "harmony"}
    assert views(kw_text_only, "<|channel|>analysis<|message|>think<|end|>")[0] == ("T", "think")


def test_deepseek_and_kimi_truncated_and_errors():
    text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{bad json}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    assert views({"tool_calls": "deepseek_v31"}, text) == [("error", 0, "f")]
    assert views({"tool_calls": "kimi_k2"}, "<|tool_calls_section_begin|>") == [("trunc", 0, None)]
    text = "<|tool_calls_section_begin|><|tool_call_begin|>functions.a.b:3<|tool_call_argument_begin|>{}<|tool_call_end|>"
    assert views({"tool_calls": "kimi_k2"}, text) == [("call", 0, "a.b", {})]


def test_unicode_is_never_split_or_lost():
    text = "<think>日本語🎉</think>😀 ok<tool_call>" + json.dumps({"name": "f", "arguments": {"e": "🎉é"}},
                                                                  ensure_ascii=False) + "</tool_call>"
    events = run({"reasoning": "qwen3", "tool_calls": "hermes"}, list(text))
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "日本語🎉"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "😀 ok"
    assert json.loads([e for e in events if isinstance(e, ToolCallEnd)][0].arguments) == {"e": "🎉é"}


def test_feed_after_finish_is_ignored():
    p = StreamParser(reasoning="qwen3")
    p.feed("a")
    p.finish()
    assert p.feed("b") == [] and p.finish() == []


def test_mistral_json_form_reads_other_markers_as_text_however_split():
    text = '[TOOL_CALLS]{"name": "f", "arguments": {"s": "[ARGS] [CALL_ID]"}}[ARGS]'
    assert views({"tool_calls": "mistral"}, text) == [("call", 0, "f", {"s": "[ARGS] [CALL_ID]"}), ("T", "[ARGS]")]

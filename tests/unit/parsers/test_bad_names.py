"""A header whose name is not a valid tool name is a tool-call error carrying its raw text, never a call."""

from __future__ import annotations

import pytest

from agentserve.parsers import ToolCallError, ToolCallStart

from .helpers import run, summary

KIMI_CALL = "<|tool_calls_section_begin|><|tool_call_begin|>{}<|tool_call_argument_begin|>{{}}<|tool_call_end|>"
CASES = [
    ("qwen3_coder", "<tool_call><function=bad_func_no_gt\n</function></tool_call>", "bad_func_no_gt"),
    ("mistral", '[TOOL_CALLS]  junk [{"name":"add","arguments":{"a":1}}]', "junk"),
    ("kimi_k2", KIMI_CALL.format(":::0"), "<|tool_call_begin|>:::0"),
    ("kimi_k2", KIMI_CALL.format("functions.get_weather:abc"), "functions.get_weather:abc"),
    ("hermes", '<tool_call>{"name": "get weather", "arguments": {}}</tool_call>', '"get weather"'),
    ("deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a b<｜tool▁sep｜>{}<｜tool▁call▁end｜>", "a b"),
    ("glm47", "<tool_call>not a name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>", "not a name"),
    ("gemma4", '<|tool_call>call:get weather{city:<|"|>Paris<|"|>}<tool_call|>', "get weather"),
    ("functiongemma", "<start_function_call>call:a/b{}<end_function_call>", "a/b"),
    ("granite4", '<tool_call>{"name": "x:y", "arguments": {}}</tool_call>', '"x:y"'),
]


@pytest.mark.parametrize(("fmt", "text", "in_raw"), CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_invalid_name_is_an_error_with_its_raw_text(fmt, text, in_raw):
    raws = []
    for chunks in ([text], list(text)):
        events = run({"tool_calls": fmt}, chunks)
        assert not any(isinstance(e, ToolCallStart) for e in events), events
        view = summary(events)
        assert view[0] == ("error", 0, None), view
        raws.append(next(e for e in events if isinstance(e, ToolCallError)).raw)
    assert in_raw in raws[0] and raws[0] == raws[1], raws


@pytest.mark.parametrize("name", ["get_weather", "mcp__fs__read-file", "a.b", "Ünïcode_tool", "f2"])
def test_valid_names_still_make_calls(name):
    text = f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'
    assert summary(run({"tool_calls": "hermes"}, [text])) == [("call", 0, name, {})]
    assert summary(run({"tool_calls": "kimi_k2"}, [KIMI_CALL.format(f"functions.{name}:0")])) == [
        ("call", 0, name, {})
    ]

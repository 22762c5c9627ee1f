"""Gemma 4 and FunctionGemma as those models write them: the thought channel, and calls in Gemma's own notation (bare
keys, strings between a quote token, bare typed values) turned into JSON arguments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.parsers import ToolCallError, parser_markers

from .fixtures import TOOLS, r_gemma4
from .helpers import run, split, summary, views

Q = '<|"|>'
KW = {"reasoning": "gemma4", "tool_calls": "gemma4", "tools": TOOLS}


def call(body: str, name: str = "f") -> str:
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


@pytest.mark.parametrize(("body", "args"), [
    (f"location:{Q}Paris, France{Q}", {"location": "Paris, France"}),
    (f"text:{Q}a, b: {{c}} [d]{Q}", {"text": "a, b: {c} [d]"}),  # structure inside a string is text
    ("count:42,score:3.14,active:true,off:false,param:null", {"count": 42, "score": 3.14, "active": True,
                                                              "off": False, "param": None}),
    ("left:108.", {"left": 108.0}),
    ("t:10:30,url:https://a.b/c", {"t": "10:30", "url": "https://a.b/c"}),  # bare values with colons
    (f"nested:{{inner:{Q}value{Q}}},list:[{Q}a{Q},{Q}b{Q}]", {"nested": {"inner": "value"}, "list": ["a", "b"]}),
    (f"record_map:{{{Q}3{Q}:{Q}new text{Q}}}", {"record_map": {"3": "new text"}}),  # a quoted key
    (f"items:[[{Q}a]b{Q},{Q}c{Q}],{Q}tail{Q}]", {"items": [["a]b", "c"], "tail"]}),
    ("", {}),
])
def test_gemma4_arguments_become_json(body, args):
    assert views({"tool_calls": "gemma4"}, call(body)) == [("call", 0, "f", args)]


def test_a_bare_value_is_typed_by_the_tools_schema():
    # zip is a string parameter: a bare 02139 stays the string the model wrote; days is an integer
    text = call("zip:02139,n:7,exact:true", "search") + call(f"city:{Q}Oslo{Q},days:3", "get_weather")
    assert views({"tool_calls": "gemma4", "tools": TOOLS}, text) == [
        ("call", 0, "search", {"zip": "02139", "n": 7, "exact": True}),
        ("call", 1, "get_weather", {"city": "Oslo", "days": 3}),
    ]


def test_thought_channel_then_text_then_calls():
    text = (f"<|channel>thought\nThe user wants two cities.<channel|>Checking both. {call(f'city:{Q}Paris{Q}', 'get_weather')}"
            f"{call(f'city:{Q}Rome{Q}', 'get_weather')}")
    assert views(KW, text) == [
        ("R", "The user wants two cities."), ("T", "Checking both."),
        ("call", 0, "get_weather", {"city": "Paris"}), ("call", 1, "get_weather", {"city": "Rome"}),
    ]


@pytest.mark.parametrize(("text", "expected"), [
    # the thinking-off prompt closes an empty channel; one the model writes itself is empty reasoning too
    ("<|channel>thought\n<channel|>Paris is sunny.", [("T", "Paris is sunny.")]),
    ("<|channel>thought<channel|>Paris is sunny.", [("T", "Paris is sunny.")]),
    ("<|channel>Bare channel.<channel|>ok", [("R", "Bare channel."), ("T", "ok")]),
    # a call straight from the thought, without <channel|> (vLLM ends reasoning there too)
    (f"<|channel>thought\nNeed it. {call('', 'ping')}", [("R", "Need it. "), ("call", 0, "ping", {})]),
    ("No thinking here.", [("T", "No thinking here.")]),
])
def test_gemma4_reasoning_splits(text, expected):
    assert views(KW, text) == expected


@pytest.mark.parametrize(("text", "name"), [
    ("<|tool_call>call:get weather{a:1}<tool_call|>", None),  # not a tool name: no call is started
    ("<|tool_call>call:x:y{a:1}<tool_call|>", None),
    (call("a:{b:1"), "f"),  # closed inside a nested value
    (call(f"a:{Q}x{Q} junk"), "f"),  # text after a value
    (call("a"), "f"),  # a key without a value
])
def test_a_broken_gemma_call_is_an_error_with_its_raw_and_the_next_call_parses(text, name):
    whole = text + call("", "ping")
    for chunks in ([whole], list(whole)):
        events = run({"tool_calls": "gemma4"}, chunks)
        assert summary(events) == [("error", 0, name), ("call", 1, "ping", {})]
        (err,) = [e for e in events if isinstance(e, ToolCallError)]
        assert err.raw == text


def test_a_call_cut_off_is_truncated_and_one_missing_only_its_end_marker_is_kept():
    assert views({"tool_calls": "gemma4"}, f"<|tool_call>call:f{{a:{Q}lo") == [("trunc", 0, "f")]
    assert views({"tool_calls": "gemma4"}, "<|tool_call>call:f{a:1}") == [("call", 0, "f", {"a": 1})]
    assert views({"tool_calls": "gemma4"}, "<|tool_call>:f{a:1}<tool_call|>") == [("call", 0, "f", {"a": 1})]


def test_the_round_bracket_variant_is_the_same_call_and_does_not_swallow_the_next():
    text = f"<|tool_call>call:f(a:1,b:{Q}x, y{Q})<tool_call|>{call('', 'ping')}"
    assert views({"tool_calls": "gemma4"}, text) == [("call", 0, "f", {"a": 1, "b": "x, y"}), ("call", 1, "ping", {})]


def test_functiongemma_uses_the_same_notation_with_its_own_markers():
    text = ("Sure.<start_function_call>call:get_weather{city:<escape>Paris, FR<escape>,days:3}"
            "<end_function_call>")
    assert views({"tool_calls": "functiongemma", "tools": TOOLS}, text) == [
        ("T", "Sure."), ("call", 0, "get_weather", {"city": "Paris, FR", "days": 3})
    ]


def test_gemma4_special_tokens_are_kept_for_the_parser_and_never_shown():
    markers = parser_markers("gemma4", "gemma4")
    assert {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", Q} <= markers
    text = f"<|channel>thought\nHm.<channel|>Done.<channel|>{call(f'a:{Q}x{Q}')}"
    events = run({**KW, "special_markers": markers}, [text])
    assert summary(events) == [("R", "Hm."), ("T", "Done."), ("call", 0, "f", {"a": "x"})]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(st.characters(blacklist_characters="<"), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True),
                                                                inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(args=st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True), json_values, max_size=4),
       data=st.data())
def test_any_arguments_the_template_writes_read_back_equal_however_split(args, data):
    """Arguments rendered the way Gemma 4's template writes them parse back to the same JSON, in any chunking."""
    text = r_gemma4([("f", args)])
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=20))
    assert summary(run({"tool_calls": "gemma4"}, split(text, cuts))) == [("call", 0, "f", args)]

"""Tool calls of the JSON- and pythonic-bodied families added as data (Qwen3.5 / 3.6 under vLLM's names, Step-3.5,
LongCat, Hunyuan A13B, Jamba, InternLM, LFM2, OLMo 3), as those models write them."""

from __future__ import annotations

import pytest

from agentserve.parsers import parser_markers

from .fixtures import TOOLS
from .helpers import run, summary, views

ARRAY_TOOL = [{"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"items": {"type": "array"}}}}}]


@pytest.mark.parametrize("fmt", ["qwen3_xml", "qwen3_coder", "step3p5"])
def test_qwen35_xml_array_with_json_literals_is_a_list_and_two_calls_in_one_delta_both_arrive(fmt):
    text = '<tool_call>\n<function=pick>\n<parameter=items>\n["a", "b", 1, true]\n</parameter>\n</function>\n</tool_call>'
    assert views({"tool_calls": fmt, "tools": ARRAY_TOOL}, text) == [("call", 0, "pick", {"items": ["a", "b", 1, True]})]
    two = "".join(f"<tool_call>\n<function=get_weather>\n<parameter=city>\n{c}\n</parameter>\n</function>\n</tool_call>\n"
                  for c in ("Paris", "London"))
    assert summary(run({"tool_calls": fmt, "tools": TOOLS}, [two])) == [
        ("call", 0, "get_weather", {"city": "Paris"}), ("call", 1, "get_weather", {"city": "London"})]


def test_qwen3_json_is_hermes():
    text = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert views({"tool_calls": "qwen3_json"}, text) == [("T", "Sure."), ("call", 0, "get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("fmt", ["hunyuan_a13b", "jamba"])
def test_a_json_array_of_calls_after_text(fmt):
    text = ('Checking both.<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
            '{"name": "get_weather", "arguments": {"city": "Rome"}}]</tool_calls>')
    assert views({"tool_calls": fmt}, text) == [
        ("T", "Checking both."), ("call", 0, "get_weather", {"city": "Paris"}),
        ("call", 1, "get_weather", {"city": "Rome"})]


def test_longcat_calls_each_in_their_block():
    text = ('<longcat_tool_call>{"name": "a", "arguments": {"x": 1}}</longcat_tool_call>\n'
            '<longcat_tool_call>{"name": "b", "arguments": {}}</longcat_tool_call>Done.')
    assert views({"tool_calls": "longcat"}, text) == [("call", 0, "a", {"x": 1}), ("call", 1, "b", {}), ("T", "Done.")]


def test_internlm_plugin_action_with_parameters_and_its_tokens_kept():
    text = 'Let me see.<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}<|action_end|>'
    assert views({"tool_calls": "internlm"}, text) == [
        ("T", "Let me see."), ("call", 0, "get_weather", {"city": "Paris"})]
    assert {"<|action_start|>", "<|plugin|>", "<|action_end|>"} <= parser_markers(None, "internlm")


def test_lfm2_pythonic_list_between_its_tokens_and_text_after():
    text = '<|tool_call_start|>[get_weather(city="Paris", days=3), ping()]<|tool_call_end|>Checking.'
    assert views({"tool_calls": "lfm2", "tools": TOOLS}, text) == [
        ("call", 0, "get_weather", {"city": "Paris", "days": 3}), ("call", 1, "ping", {}), ("T", "Checking.")]
    # a bare list is LFM2's answer text: only its tokens open calls
    assert views({"tool_calls": "lfm2"}, "[ping()]") == [("T", "[ping()]")]


def test_olmo3_one_call_a_line_with_json_literals():
    text = ('I will look.\n<function_calls>get_weather(city="Paris", days=3)\n'
            'search(exact=true, q=null, n=[1, false])\nbad name(a=1)\nping()</function_calls>')
    assert views({"tool_calls": "olmo3", "tools": TOOLS}, text) == [
        ("T", "I will look."), ("call", 0, "get_weather", {"city": "Paris", "days": 3}),
        ("call", 1, "search", {"exact": True, "q": None, "n": [1, False]}), ("error", 2, None), ("call", 3, "ping", {})]
    # Llama's pythonic parser still reads Python literals only
    assert views({"tool_calls": "pythonic"}, "[f(a=true)]")[0] == ("error", 0, "f")

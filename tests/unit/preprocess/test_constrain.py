"""The grammar preprocess/constrain.py writes: what it accepts is what the parsers read back as the chosen call."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.parsers import StreamParser
from agentserve.parsers.events import ToolCallEnd, ToolCallStart
from agentserve.preprocess.constrain import ReasoningMarkers, structural_tag
from agentserve.protocol import Conversation, NamedToolChoice, OutputFormat, TextBlock, ToolSpec, Turn
from agentserve.protocol.errors import RequestError

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = (ToolSpec(name="get_weather", parameters=SCHEMA), ToolSpec(name="get_time", parameters={"type": "object"}))
OPTIONAL = ReasoningMarkers("optional")


def _conv(choice, tools=TOOLS) -> Conversation:
    return Conversation(turns=(Turn(role="user", blocks=(TextBlock(text="x"),)),), tools=tools, tool_choice=choice)


def _tag(choice, tools=TOOLS, fmt=None, reasoning=OPTIONAL) -> str | None:
    return structural_tag(_conv(choice, tools), fmt, tool_call_parser="hermes", reasoning=reasoning)


def _call(name: str, args: dict) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args, ensure_ascii=False)}}}\n</tool_call>'


def test_free_requests_have_no_grammar():
    assert _tag("auto") is None and _tag("none", tools=()) is None


def test_required_named_none(grammar):
    call = _call("get_weather", {"city": "Paris"})
    required, named, none = _tag("required"), _tag(NamedToolChoice(name="get_time")), _tag("none")
    assert grammar(required, call) and grammar(required, call + "\n" + _call("get_time", {}))
    assert not grammar(required, "Sure.") and not grammar(required, call + "Done.")
    assert not grammar(required, _call("get_weather", {"city": 5}))  # arguments follow the schema
    assert grammar(named, _call("get_time", {"zone": "UTC"})) and not grammar(named, call)
    assert not grammar(named, _call("get_time", {}) + _call("get_time", {}))  # exactly one call
    assert grammar(none, "Sure.") and not grammar(none, "Sure." + call)


def test_a_thinking_budget_caps_reasoning_inside_the_grammar(grammar):
    capped = _tag("required", reasoning=ReasoningMarkers("optional", max_tokens=3))
    call = _call("get_weather", {"city": "Paris"})
    assert grammar(capped, "<think>a b</think>" + call)
    assert not grammar(capped, "<think>" + "word " * 20 + "</think>" + call)


def test_reasoning_stays_free_before_the_constraint(grammar):
    call = _call("get_weather", {"city": "Paris"})
    assert grammar(_tag("required"), "<think>maybe <tool_call> later</think>\n\n" + call)
    opened = _tag("required", reasoning=ReasoningMarkers("open"))
    assert grammar(opened, "thinking...</think>\n" + call) and not grammar(opened, call)
    off = _tag("required", reasoning=ReasoningMarkers("off"))
    assert not grammar(off, "<think>x</think>" + call)


def test_strict_tools_under_auto(grammar):
    tools = (TOOLS[0].model_copy(update={"strict": True}), TOOLS[1])
    tag = _tag("auto", tools=tools)
    assert grammar(tag, "No call needed.") and grammar(tag, "Let me check. " + _call("get_weather", {"city": "X"}))
    assert not grammar(tag, _call("get_weather", {"city": "X", "extra": 1}))
    assert not grammar(tag, _call("unknown_tool", {}))


def test_output_format(grammar):
    fmt = OutputFormat(kind="json_schema", schema_=SCHEMA)
    assert grammar(_tag("none", tools=(), fmt=fmt), '{"city": "Oslo", "days": 2}')
    assert not grammar(_tag("none", tools=(), fmt=fmt), 'Here: {"city": "Oslo"}')
    either = _tag("auto", fmt=fmt)  # tools on offer and a format: a call, or the formatted answer
    assert grammar(either, '{"city": "Oslo"}') and grammar(either, _call("get_time", {}))


def test_formats_without_a_constrained_form_are_a_400():
    with pytest.raises(RequestError) as err:
        structural_tag(_conv("required"), None, tool_call_parser="mistral", reasoning=OPTIONAL)
    assert err.value.param == "tool_choice" and err.value.status == 400


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,20}", fullmatch=True),
    city=st.text(st.characters(blacklist_categories=("Cs", "Cn", "Co")), max_size=20),  # assigned characters
    days=st.integers(-1000, 1000),
)
def test_what_the_grammar_accepts_the_parser_reads_back_as_that_call(grammar, name, city, days):
    tools = (ToolSpec(name=name, parameters=SCHEMA),)
    args = {"city": city, "days": days}
    text = _call(name, args)
    assert grammar(_tag(NamedToolChoice(name=name), tools=tools), text)
    parser = StreamParser(reasoning="qwen3", tool_calls="hermes", tools=[t.openai_schema() for t in tools])
    events = parser.feed(text) + parser.finish()
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert [s.name for s in starts] == [name] and json.loads(ends[0].arguments) == args

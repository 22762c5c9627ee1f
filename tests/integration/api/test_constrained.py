"""Tool choice, strict tools and JSON output are enforced while decoding, in all three APIs, through the real graph.

The scripted engine honours the request's grammar (it replays the first scripted reply the grammar accepts, see
tests/integration/constraint_rules.py), so these tests check the wire behaviour each SDK user sees.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from tests.integration.conftest import WEATHER_TOOL
from tests.integration.constraint_rules import FORECAST, FORECAST_SCHEMA, TIME_TOOL

pytestmark = pytest.mark.integration

MODEL = "smollm2"
ASK = [{"role": "user", "content": "CX_ASK what is the weather?"}]
CHAT_TOOLS = [WEATHER_TOOL, {"type": "function", "function": TIME_TOOL}]
ANT_TOOLS = [
    {"name": t["function"]["name"], "description": t["function"]["description"],
     "input_schema": t["function"]["parameters"]}
    for t in CHAT_TOOLS
]
RESP_TOOLS = [{"type": "function", **t["function"]} for t in CHAT_TOOLS]


@pytest.fixture(scope="module")
def oai(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def ant(graph_url):
    return anthropic.Anthropic(base_url=graph_url, api_key="unused", max_retries=0)


# -- chat completions -------------------------------------------------------------------------------------------
def test_chat_auto_lets_the_model_answer_in_text(oai):
    resp = oai.chat.completions.create(model=MODEL, messages=ASK, tools=CHAT_TOOLS)
    assert resp.choices[0].message.content == "I can answer that without tools."
    assert not resp.choices[0].message.tool_calls


def test_chat_required_gets_a_call_and_keeps_reasoning(oai):
    resp = oai.chat.completions.create(model=MODEL, messages=ASK, tools=CHAT_TOOLS, tool_choice="required",
                                       reasoning_effort="high")
    msg = resp.choices[0].message
    assert resp.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in msg.tool_calls] == ["get_weather"]
    assert json.loads(msg.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert msg.model_extra["reasoning_content"] == "Use the tool."


def test_chat_required_without_reasoning_asked_starts_the_call_at_once(oai):
    # The embedded template has no thinking switch: unless the client asks for reasoning, the grammar allows none
    # (so a model that does not reason on its own cannot wander into an unclosed block), and the first scripted
    # reply with a bare call is the one a constrained model could produce.
    resp = oai.chat.completions.create(model=MODEL, messages=ASK, tools=CHAT_TOOLS, tool_choice="required")
    assert [c.function.name for c in resp.choices[0].message.tool_calls] == ["get_time"]
    assert not resp.choices[0].message.model_extra.get("reasoning_content")


def test_chat_named_tool_streamed(oai):
    stream = oai.chat.completions.create(
        model=MODEL, messages=ASK, tools=CHAT_TOOLS, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    names, args, finish = [], "", None
    for chunk in stream:
        for c in chunk.choices or []:  # the graph's tool_call_dispatch events carry no choices
            for tc in c.delta.tool_calls or []:
                if tc.function.name:
                    names.append(tc.function.name)
                args += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert names == ["get_time"] and json.loads(args) == {"zone": "UTC"} and finish == "tool_calls"


def test_chat_none_never_calls(oai):
    resp = oai.chat.completions.create(model=MODEL, messages=ASK, tools=CHAT_TOOLS, tool_choice="none")
    assert resp.choices[0].message.content == "I can answer that without tools."
    assert not resp.choices[0].message.tool_calls


def test_chat_strict_tool_arguments_follow_the_schema(oai):
    loose = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "CX_STRICT"}],
                                        tools=[WEATHER_TOOL])
    assert json.loads(loose.choices[0].message.tool_calls[0].function.arguments) == {"city": 5}
    strict_tool = {"type": "function", "function": {**WEATHER_TOOL["function"], "strict": True}}
    resp = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "CX_STRICT"}],
                                       tools=[strict_tool])
    assert json.loads(resp.choices[0].message.tool_calls[0].function.arguments) == {"city": "Paris"}


def test_chat_json_schema_response_format(oai):
    resp = oai.chat.completions.create(
        model=MODEL, messages=ASK, reasoning_effort="low",
        response_format={"type": "json_schema", "json_schema": {"name": "forecast", "schema": FORECAST_SCHEMA}},
    )
    assert json.loads(resp.choices[0].message.content) == FORECAST
    assert resp.choices[0].message.model_extra["reasoning_content"] == "JSON it is."


def test_chat_json_object_response_format(oai):
    resp = oai.chat.completions.create(model=MODEL, messages=ASK, response_format={"type": "json_object"},
                                       reasoning_effort="low")
    assert json.loads(resp.choices[0].message.content) == FORECAST


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
         "response_format"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": True,
                                                      "parameters": {"type": "nonsense"}}}]}, "tools"),
    ],
)
def test_chat_schema_the_grammar_cannot_compile_is_400(graph_url, extra, param):
    r = httpx.post(f"{graph_url}/v1/chat/completions", json={"model": MODEL, "messages": ASK, **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith(param)


# -- Anthropic Messages -----------------------------------------------------------------------------------------
def test_anthropic_tool_choice_any(ant):
    msg = ant.messages.create(model=MODEL, max_tokens=2000, messages=ASK, tools=ANT_TOOLS, tool_choice={"type": "any"},
                              thinking={"type": "enabled", "budget_tokens": 1024})
    assert msg.stop_reason == "tool_use"
    assert [b.thinking for b in msg.content if b.type == "thinking"] == ["Use the tool."]
    assert [(b.name, b.input) for b in msg.content if b.type == "tool_use"] == [("get_weather", {"city": "Paris"})]


def test_anthropic_tool_choice_tool_streamed(ant):
    with ant.messages.stream(model=MODEL, max_tokens=200, messages=ASK, tools=ANT_TOOLS,
                             tool_choice={"type": "tool", "name": "get_time"}) as stream:
        msg = stream.get_final_message()
    assert [(b.name, b.input) for b in msg.content if b.type == "tool_use"] == [("get_time", {"zone": "UTC"})]


def test_anthropic_tool_choice_none(ant):
    msg = ant.messages.create(model=MODEL, max_tokens=200, messages=ASK, tools=ANT_TOOLS, tool_choice={"type": "none"})
    assert msg.stop_reason == "end_turn" and not [b for b in msg.content if b.type == "tool_use"]


def test_anthropic_strict_tool(ant):
    tool = {**ANT_TOOLS[0], "strict": True}
    msg = ant.messages.create(model=MODEL, max_tokens=200, messages=[{"role": "user", "content": "CX_STRICT"}],
                              tools=[tool])
    assert [b.input for b in msg.content if b.type == "tool_use"] == [{"city": "Paris"}]


@pytest.mark.parametrize("field", ["output_format", "output_config"])
def test_anthropic_json_output(graph_url, field):
    fmt = {"type": "json_schema", "schema": FORECAST_SCHEMA}
    body = {"model": MODEL, "max_tokens": 2000, "messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 1024},
            field: fmt if field == "output_format" else {"format": fmt}}
    r = httpx.post(f"{graph_url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    text = "".join(b["text"] for b in r.json()["content"] if b["type"] == "text")
    assert json.loads(text) == FORECAST


def test_anthropic_bad_schema_is_400_in_its_envelope(graph_url):
    body = {"model": MODEL, "max_tokens": 50, "messages": ASK,
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "nonsense"}}}}
    r = httpx.post(f"{graph_url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "output_config.format" in r.json()["error"]["message"] or "schema" in r.json()["error"]["message"]


# -- Responses --------------------------------------------------------------------------------------------------
def _calls(resp) -> list[tuple[str, dict]]:
    return [(i.name, json.loads(i.arguments)) for i in resp.output if i.type == "function_call"]


def test_responses_required_and_named(oai):
    resp = oai.responses.create(model=MODEL, input=ASK[0]["content"], tools=RESP_TOOLS, tool_choice="required",
                                reasoning={"effort": "medium"})
    assert _calls(resp) == [("get_weather", {"city": "Paris"})]
    named = oai.responses.create(model=MODEL, input=ASK[0]["content"], tools=RESP_TOOLS,
                                 tool_choice={"type": "function", "name": "get_time"})
    assert _calls(named) == [("get_time", {"zone": "UTC"})]


def test_responses_none_and_strict(oai):
    none = oai.responses.create(model=MODEL, input=ASK[0]["content"], tools=RESP_TOOLS, tool_choice="none")
    assert not _calls(none) and none.output_text == "I can answer that without tools."
    strict = oai.responses.create(model=MODEL, input="CX_STRICT", tools=[{**RESP_TOOLS[0], "strict": True}])
    assert _calls(strict) == [("get_weather", {"city": "Paris"})]


def test_responses_text_format_json_schema_streamed(oai):
    fmt = {"format": {"type": "json_schema", "name": "forecast", "schema": FORECAST_SCHEMA, "strict": True}}
    with oai.responses.stream(model=MODEL, input=ASK[0]["content"], text=fmt, reasoning={"effort": "low"}) as stream:
        final = stream.get_final_response()
    assert json.loads(final.output_text) == FORECAST


def test_responses_bad_text_format_is_400(graph_url):
    body = {"model": MODEL, "input": "CX_ASK", "text": {"format": {"type": "json_schema", "name": "x"}}}
    r = httpx.post(f"{graph_url}/v1/responses", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "text.format"

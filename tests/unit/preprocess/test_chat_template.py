"""The SmolLM2 agent chat template (agentserve/templates/smollm2_agent.jinja).

Rendered with transformers' own Jinja environment (the one `tokenizer.apply_chat_template` and vLLM use), so the
`tojson` filter behaves as in serving (json.dumps, ensure_ascii=False, no key sorting).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from agentserve.prepare.model import chat_template

TEMPLATE = chat_template()
DEFAULT_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"

# SmolLM2-135M-Instruct's own template, as shipped in the GGUF metadata (tokenizer.chat_template).
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def render(messages, tools=None, add_generation_prompt=False, template=None, **kwargs) -> str:
    rendered, _ = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=template or TEMPLATE,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    return rendered[0]


def call(name, arguments, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ------------------------------------------------------------------------------------------ one message kind each


def test_default_system_prompt_and_generation_prompt():
    assert render([{"role": "user", "content": "Hi"}], add_generation_prompt=True) == (
        DEFAULT_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_small_conversation_exact():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
    ]
    assert render(messages, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render(messages) == render(messages, add_generation_prompt=True).removesuffix("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "Hi"}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
        [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "c"}],
    ],
)
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_plain_chats_render_like_smollm2_own_template(messages, add_generation_prompt):
    assert render(messages, add_generation_prompt=add_generation_prompt) == render(
        messages, add_generation_prompt=add_generation_prompt, template=SMOLLM2_TEMPLATE
    )


def test_assistant_reasoning_before_content():
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "The user greets me.\nGreet back."},
    ]
    assert render(messages) == (
        DEFAULT_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nThe user greets me.\nGreet back.\n</think>\n\nHello!<|im_end|>\n"
    )


def test_reasoning_field_alias_and_empty_reasoning():
    with_alias = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", "reasoning": "r"}]
    assert render(with_alias).endswith("<|im_start|>assistant\n<think>\nr\n</think>\n\nYo<|im_end|>\n")
    for empty in ("", None):
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", "reasoning_content": empty}]
        assert render(messages).endswith("<|im_start|>assistant\nYo<|im_end|>\n")


def test_tool_calls_string_arguments_verbatim_and_dict_arguments_tojson():
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                call("get_weather", '{"city":"Paris"}'),  # a string is kept byte for byte
                call("get_weather", {"city": "Zürich", "unit": "°C"}, "call_2"),  # a mapping goes through tojson
            ],
        },
    ]
    assert render(messages).endswith(
        "<|im_start|>assistant\nLet me check.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "°C"}}\n</tool_call>'
        "<|im_end|>\n"
    )


def test_tool_call_without_content_and_empty_arguments():
    for content in (None, ""):
        messages = [
            {"role": "user", "content": "Time?"},
            {"role": "assistant", "content": content, "tool_calls": [call("now", None), call("now", "", "c2")]},
        ]
        assert render(messages).endswith(
            "<|im_start|>assistant\n"
            '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call><|im_end|>\n'
        )


def test_reasoning_with_two_tool_calls_exact():
    messages = [
        {"role": "user", "content": "Compare the weather in Paris and Rome."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I need both cities.",
            "tool_calls": [
                call("get_weather", '{"city": "Paris"}', "call_1"),
                call("get_weather", {"city": "Rome"}, "call_2"),
            ],
        },
    ]
    assert render(messages, tools=[WEATHER_TOOL]).endswith(
        "<|im_start|>user\nCompare the weather in Paris and Rome.<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\nI need both cities.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
        "<|im_end|>\n"
    )


def test_consecutive_tool_results_grouped_in_one_user_turn():
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("get_weather", '{"city": "Paris"}'), call("get_weather", '{"city": "Rome"}', "c2")],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "22C"}, {"type": "text", "text": "dry"}]},
        {"role": "assistant", "content": "Paris 18C, Rome 22C."},
        {"role": "user", "content": "Thanks"},
        {"role": "tool", "tool_call_id": "x", "content": "late result"},
    ]
    rendered = render(messages, add_generation_prompt=True)
    assert rendered == (
        DEFAULT_SYSTEM + "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response>\n<tool_response>\n22C\ndry\n</tool_response>"
        "<|im_end|>\n"
        "<|im_start|>assistant\nParis 18C, Rome 22C.<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nlate result\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_tools_listed_in_system_turn():
    expected_tools_block = (
        "\n\n# Tools\n\nYou can call functions to help with the request. Their signatures are listed within "
        "<tools></tools> XML tags:\n<tools>\n"
        + json.dumps(WEATHER_TOOL, ensure_ascii=False)
        + "\n"
        + json.dumps({"type": "function", "function": {"name": "now", "parameters": {}}})
        + "\n</tools>\n\nTo call a function, write a JSON object with its name and arguments within "
        "<tool_call></tool_call> XML tags, one block per call:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
        "The results come back within <tool_response></tool_response> XML tags.<|im_end|>\n"
    )
    tools = [WEATHER_TOOL, {"type": "function", "function": {"name": "now", "parameters": {}}}]
    user = {"role": "user", "content": "Hi"}
    assert render([{"role": "system", "content": "Be brief."}, user], tools=tools) == (
        "<|im_start|>system\nBe brief." + expected_tools_block + "<|im_start|>user\nHi<|im_end|>\n"
    )
    default = DEFAULT_SYSTEM.removesuffix("<|im_end|>\n")
    assert render([user], tools=tools) == default + expected_tools_block + "<|im_start|>user\nHi<|im_end|>\n"
    # no tools (None or empty list): no tools block
    assert render([user], tools=[]) == render([user]) == DEFAULT_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n"


def test_mid_conversation_system_and_developer_rendered_in_place():
    messages = [
        {"role": "developer", "content": "Top rules."},
        {"role": "user", "content": "A"},
        {"role": "assistant", "content": "B"},
        {"role": "system", "content": "Context changed."},
        {"role": "developer", "content": "More rules."},
        {"role": "user", "content": "C"},
    ]
    assert render(messages) == (
        "<|im_start|>system\nTop rules.<|im_end|>\n"
        "<|im_start|>user\nA<|im_end|>\n"
        "<|im_start|>assistant\nB<|im_end|>\n"
        "<|im_start|>system\nContext changed.<|im_end|>\n"
        "<|im_start|>system\nMore rules.<|im_end|>\n"
        "<|im_start|>user\nC<|im_end|>\n"
    )


def test_content_parts_joined_with_newlines():
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}, "b"]},
        {"role": "assistant", "content": [{"type": "text", "text": "c"}]},
    ]
    assert render(messages) == (
        "<|im_start|>system\nS1\nS2<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\nc<|im_end|>\n"
    )


def test_enable_thinking_is_accepted_and_ignored():
    messages = [{"role": "user", "content": "Hi"}]
    plain = render(messages, add_generation_prompt=True)
    assert render(messages, add_generation_prompt=True, enable_thinking=True) == plain
    assert render(messages, add_generation_prompt=True, enable_thinking=False) == plain


def test_template_is_whitespace_control_independent():
    """The template spells out every newline itself: trim_blocks/lstrip_blocks (as in transformers) change nothing."""
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=False)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [call("f", {"a": 1})]},
        {"role": "tool", "content": "ok"},
    ]
    kwargs = dict(messages=messages, tools=[WEATHER_TOOL], add_generation_prompt=True)
    assert env.from_string(TEMPLATE).render(**kwargs) == render(messages, tools=[WEATHER_TOOL], add_generation_prompt=True)


# ------------------------------------------------------------------------------------------- prefix stability


def generated_text(message) -> str:
    """What the model generates for an assistant turn (between `<|im_start|>assistant\\n` and `<|im_end|>`)."""
    out = ""
    # The parser hands reasoning over with its framing newlines (`<think>\nR\n</think>` -> "\nR\n");
    # the template strips them and frames the text again, exactly as generated.
    reasoning = (message.get("reasoning_content") or "").strip("\n")
    if reasoning:
        out += f"<think>\n{reasoning}\n</think>\n\n"
    content = message.get("content") or ""
    out += content
    for i, tool_call in enumerate(message.get("tool_calls") or ()):
        if content or i:
            out += "\n"
        arguments = tool_call["function"]["arguments"]
        if arguments is None or arguments == "":
            arguments = "{}"
        elif not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        out += f'<tool_call>\n{{"name": {json.dumps(tool_call["function"]["name"])}, "arguments": {arguments}}}\n</tool_call>'
    return out


text = st.lists(
    st.one_of(
        st.text(max_size=4),
        st.sampled_from(["\n", " ", "<think>", "</think>", "<tool_call>", "{", '"', "<|im_end|>"]),
    ),
    max_size=4,
).map("".join)
json_value = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=6))
json_object = st.dictionaries(st.text(max_size=5), json_value, max_size=3)
arguments = st.one_of(
    json_object,  # a mapping: rendered with tojson
    # a string, as the model wrote it (any spacing, even around the object): rendered verbatim
    st.tuples(json_object, st.sampled_from([None, 1]), st.sampled_from(["", " ", "\n"])).map(
        lambda t: t[2] + json.dumps(t[0], indent=t[1], ensure_ascii=False) + t[2]
    ),
)
tool_call = st.builds(
    lambda name, args, n: {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": args}},
    st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True),
    arguments,
    st.integers(0, 999),
)
assistant = st.builds(
    lambda content, reasoning, calls: {
        "role": "assistant",
        "content": content,
        **({"reasoning_content": reasoning} if reasoning is not None else {}),
        **({"tool_calls": calls} if calls else {}),
    },
    text,
    st.one_of(st.none(), text),
    st.lists(tool_call, max_size=3),
)
user = st.builds(lambda c: {"role": "user", "content": c}, text)
tool = st.builds(
    lambda c, parts: {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": c}] if parts else c},
    text,
    st.booleans(),
)
system = st.builds(lambda c: {"role": "system", "content": c}, text)
conversation = st.tuples(
    st.one_of(st.none(), system),
    st.lists(st.one_of(user, user, assistant, assistant, tool, tool, system), min_size=1, max_size=10),
).map(lambda t: ([t[0]] if t[0] else []) + t[1])
tools = st.one_of(st.none(), st.just([WEATHER_TOOL]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation, tools)
def test_prefix_stability(messages, tools):
    """Prompt of turn N + what the model generated + <|im_end|>\\n is exactly how the next turn renders it."""
    full = render(messages, tools=tools)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = render(messages[:i], tools=tools, add_generation_prompt=True)
        turn = prompt + generated_text(message) + "<|im_end|>\n"
        assert render(messages[: i + 1], tools=tools) == turn
        assert full.startswith(turn)


@settings(max_examples=200, deadline=None)
@given(conversation, tools)
def test_renderings_only_grow(messages, tools):
    """Appending a message never rewrites what was rendered, except closing a run of tool results."""
    for k in range(1, len(messages)):
        if messages[k - 1]["role"] == "tool" and messages[k]["role"] == "tool":
            # the open tool-result turn gets one more block: everything before its <|im_end|> stays
            before = render(messages[:k], tools=tools).removesuffix("<|im_end|>\n")
            assert render(messages[: k + 1], tools=tools).startswith(before)
        else:
            assert render(messages[: k + 1], tools=tools).startswith(render(messages[:k], tools=tools))

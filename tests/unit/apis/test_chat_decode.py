import pytest

from agentserve.apis.chat_completions import ChatCompletionRequest, decode
from agentserve.protocol import ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock
from agentserve.protocol.errors import RequestError


def _decode(body):
    return decode(ChatCompletionRequest.model_validate(body), request_id="r", model="m")


def test_history_keeps_reasoning_calls_and_results_in_order():
    gen = _decode(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {
                    "role": "assistant",
                    "content": "ok",
                    "reasoning_content": "why",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
            "stop": "END",
            "max_completion_tokens": 7,
        }
    )
    turns = gen.conversation.turns
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool"]
    assert turns[1].blocks == (TextBlock(text="a"), TextBlock(text="b"))
    assert turns[2].blocks == (
        ReasoningBlock(text="why"),
        TextBlock(text="ok"),
        ToolCallBlock(id="c1", name="f", arguments='{"x": 1}'),
    )
    assert turns[3].blocks == (ToolResultBlock(tool_call_id="c1", content="42"),)
    assert gen.sampling.stop == ("END",) and gen.sampling.max_tokens == 7
    assert gen.conversation.last_user_text() == "42"


@pytest.mark.parametrize(
    "extra",
    [
        {"n": 3},
        {"tool_choice": "required"},
        {"tools": [{"type": "function", "function": {"name": "f"}}],
         "tool_choice": {"type": "function", "function": {"name": "g"}}},
    ],
)
def test_unsatisfiable_requests_are_invalid(extra):
    with pytest.raises(RequestError) as exc:
        _decode({"model": "m", "messages": [{"role": "user", "content": "x"}], **extra})
    assert exc.value.status == 400


CUSTOM = {"type": "custom", "custom": {"name": "apply_patch", "format": {"type": "grammar", "grammar": {
    "syntax": "lark", "definition": 'start: "*** Begin Patch"'}}}}
FUNCTION = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("extra, param", [
    ({"tools": [FUNCTION, CUSTOM]}, "tools[1]"),
    ({"tools": [FUNCTION], "tool_choice": {"type": "custom", "custom": {"name": "apply_patch"}}}, "tool_choice"),
])
def test_custom_tools_are_refused_naming_the_field_and_where_they_are_served(extra, param):
    with pytest.raises(RequestError) as exc:
        _decode({"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra})
    assert exc.value.status == 400 and exc.value.param == param
    assert "Responses API (POST /v1/responses)" in str(exc.value)
    assert param != "tools[1]" or "apply_patch" in str(exc.value)


def test_a_function_tool_or_choice_still_needs_its_function():
    from pydantic import ValidationError

    for extra in ({"tools": [{"type": "function"}]},
                  {"tools": [FUNCTION], "tool_choice": {"type": "function"}}):
        with pytest.raises(ValidationError, match="needs `function`"):
            ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra})

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

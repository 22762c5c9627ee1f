"""Requests arrive at the next replica exactly as they were sent.

Serve pickles handle-call arguments and results; an EngineRequest's token ids are a packed array and a
Conversation travels as plain data rebuilt by pydantic on arrival, so what is checked here is that the trip changes
nothing a replica can see.
"""

from __future__ import annotations

import pickle
from array import array

import pytest
from hypothesis import given, strategies as st
from pydantic import ValidationError
from ray import cloudpickle

from agentserve.protocol import (
    AgentHints,
    Conversation,
    GenerationRequest,
    ImageBlock,
    EngineRequest,
    Preprocessed,
    PromptReport,
    RouteRequest,
    ReasoningBlock,
    SamplingParams,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Turn,
)
from agentserve.protocol.conversation import NamedToolChoice

_UINT32 = st.integers(min_value=0, max_value=2**32 - 1)


def _request(token_ids: list[int], **extra) -> EngineRequest:
    return EngineRequest(
        request_id="req_1",
        model="m",
        token_ids=token_ids,
        sampling=SamplingParams(temperature=0.3, stop=["\n\n"]),
        max_tokens=64,
        **extra,
    )


def _preprocessed(token_ids: list[int]) -> Preprocessed:
    return Preprocessed(
        engine=_request(token_ids, reasoning_started=True),
        route=RouteRequest(
            request_id="req_1", model="m", block_hashes=[2**63 - 1, -5, 0], prompt_tokens=len(token_ids),
            max_tokens=64, hints=AgentHints(session_id="s"), session_key="k",
        ),
        report=PromptReport(session_key="k", replay_outcomes=(("spliced", 2),)),
    )


@given(token_ids=st.lists(_UINT32, max_size=3000), dumps=st.sampled_from([cloudpickle.dumps, pickle.dumps]))
def test_a_request_crosses_a_replica_boundary_unchanged(token_ids, dumps):
    sent = _preprocessed(token_ids)
    received = pickle.loads(dumps(sent))
    assert received == sent
    ids = received.engine.token_ids
    assert isinstance(ids, array) and ids.typecode == "I" and ids.tolist() == token_ids
    assert received.prompt_tokens == len(token_ids)
    assert received.route == sent.route and received.report == sent.report


@given(token_ids=st.lists(st.integers(), min_size=1, max_size=200).filter(lambda ids: any(not 0 <= t < 2**32 for t in ids)))
def test_an_id_outside_uint32_is_refused_where_the_request_is_made(token_ids):
    """No tokenizer makes one; a request that carried one could not be packed, so it is refused at construction
    with a validation error naming the field, never later in another replica."""
    with pytest.raises(ValidationError, match="token_ids"):
        _request(token_ids)


def test_the_ids_cross_as_their_packed_bytes():
    """The prompt is packed once where it is made: pickling it is its 4-byte ids (plus a small header), not a list
    of Python ints, and the receiver gets the array without unpacking it."""
    ids = list(range(50_000))
    sent = _request(ids)
    assert isinstance(sent.token_ids, array) and sent.token_ids.tolist() == ids
    assert len(pickle.dumps(sent)) < 4 * len(ids) + 2_000
    assert pickle.loads(pickle.dumps(sent)).token_ids.tolist() == ids
    assert sent.model_dump()["token_ids"] == ids  # JSON-shaped dumps (logs, traces) still read as a list


_TEXT = st.text(max_size=40)
_BLOCKS = st.one_of(
    st.builds(TextBlock, text=_TEXT),
    st.builds(ReasoningBlock, text=_TEXT, signature=st.none() | _TEXT),
    st.builds(ToolCallBlock, id=_TEXT, name=_TEXT, arguments=_TEXT),
    st.builds(ToolResultBlock, tool_call_id=_TEXT, content=_TEXT, is_error=st.booleans()),
    st.builds(ImageBlock, url=_TEXT),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_CONVERSATIONS = st.builds(
    Conversation,
    turns=st.lists(
        st.builds(Turn, role=st.sampled_from(["system", "user", "assistant", "tool"]),
                  blocks=st.lists(_BLOCKS, max_size=4).map(tuple)),
        max_size=6,
    ).map(tuple),
    tools=st.lists(
        st.builds(ToolSpec, name=_TEXT, description=st.none() | _TEXT,
                  parameters=st.dictionaries(_TEXT, _JSON, max_size=3), strict=st.booleans()),
        max_size=3,
    ).map(tuple),
    tool_choice=st.sampled_from(["auto", "none", "required"]) | st.builds(NamedToolChoice, name=_TEXT),
    parallel_tool_calls=st.booleans(),
)


@given(conversation=_CONVERSATIONS, dumps=st.sampled_from([cloudpickle.dumps, pickle.dumps]))
def test_a_conversation_crosses_to_the_preprocessor_unchanged(conversation, dumps):
    sent = GenerationRequest(request_id="req_1", model="m", conversation=conversation)
    received = pickle.loads(dumps(sent))
    assert received == sent
    for got, want in zip(received.conversation.turns, conversation.turns):
        assert [type(b) for b in got.blocks] == [type(b) for b in want.blocks]


def test_a_conversation_travels_as_plain_data():
    conversation = Conversation(turns=(Turn(role="user", blocks=(TextBlock(text="hi"),)),))
    rebuild, (data,) = conversation.__reduce__()
    assert data == {"turns": ({"role": "user", "blocks": ({"type": "text", "text": "hi"},)},), "tools": (),
                    "tool_choice": "auto", "parallel_tool_calls": True}
    assert rebuild(data) == conversation

"""The Responses store as a noisy tenant and a failing database see it: `metadata` is bounded as OpenAI bounds it,
and a store write that fails after generating answers the reply (reported as not stored), never a 500."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st
from pydantic import ValidationError

from agentserve.apis.responses.schema import ResponsesRequest
from agentserve.ingress.handlers.responses import ResponseReply, ResponsesHandler


def _request(metadata):
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", "metadata": metadata})


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=80), st.text(max_size=600), max_size=20))
def test_metadata_is_bounded_as_openai_bounds_it(metadata):
    """16 pairs, keys up to 64 characters, values up to 512: anything past that is refused, anything within kept."""
    fits = len(metadata) <= 16 and all(len(k) <= 64 and len(v) <= 512 for k, v in metadata.items())
    if fits:
        assert _request(metadata).metadata == metadata
    else:
        with pytest.raises(ValidationError, match="metadata"):
            _request(metadata)


def test_a_huge_metadata_is_a_400_not_a_stored_amplifier():
    with pytest.raises(ValidationError, match="at most 16"):
        _request({f"k{i}": "v" * 512 for i in range(1000)})


class _FailingStore:
    def put(self, response_id, entry):
        raise OSError("database is down")


def _prep(store=None):
    encoder = SimpleNamespace(
        id="resp_1", status="completed", error=None,
        response=lambda events: {"id": "resp_1", "object": "response", "status": "completed", "store": True},
        response_body=lambda: {"id": "resp_1"},
    )
    return SimpleNamespace(body=SimpleNamespace(store=store), encoder=encoder, owner="alice", history=lambda: [])


def _handler(store) -> ResponsesHandler:
    handler = ResponsesHandler.__new__(ResponsesHandler)
    handler._store = store
    return handler


def test_a_failed_store_write_after_generating_answers_the_reply_as_not_stored(caplog):
    """Non-streamed: the driver makes the body, then stores it. A store that fails now leaves the body out with
    `store: false` (before, the exception became a 500 after the whole turn was generated)."""
    reply = ResponseReply(_handler(_FailingStore()), _prep())
    body = reply.body([])

    async def end():
        await reply.before_end()

    with caplog.at_level("WARNING", logger="ray.serve"):
        asyncio.run(end())
    assert body["store"] is False and body["status"] == "completed"
    assert "resp_1 was answered but could not be stored" in caplog.text  # a streamed reply's loss is not silent


def test_a_stored_reply_stays_stored():
    class Ok:
        def put(self, response_id, entry):
            return True

    reply = ResponseReply(_handler(Ok()), _prep())
    body = reply.body([])
    asyncio.run(reply.before_end())
    assert body["store"] is True

"""A PreprocessedRequest arrives at the Ingress and the Engine exactly as the Preprocessor made it.

Serve pickles handle-call arguments and results (cloudpickle out, pickle in); the request packs its token ids for
the trip, so what is checked here is that the trip changes nothing a replica can see.
"""

from __future__ import annotations

import pickle

from hypothesis import given, strategies as st
from ray import cloudpickle

from agentserve.protocol import AgentHints, PreprocessedRequest, SamplingParams

_UINT32 = st.integers(min_value=0, max_value=2**32 - 1)


def _request(token_ids: list[int], **extra) -> PreprocessedRequest:
    return PreprocessedRequest(
        request_id="req_1",
        model="m",
        token_ids=token_ids,
        block_hashes=[2**63 - 1, -5, 0],
        sampling=SamplingParams(temperature=0.3, stop=["\n\n"]),
        max_tokens=64,
        hints=AgentHints(session_id="s"),
        replay_outcomes=(("spliced", 2),),
        **extra,
    )


@given(token_ids=st.lists(_UINT32, max_size=3000), dumps=st.sampled_from([cloudpickle.dumps, pickle.dumps]))
def test_a_request_crosses_a_replica_boundary_unchanged(token_ids, dumps):
    sent = _request(token_ids, session_key="k", reasoning_started=True)
    received = pickle.loads(dumps(sent))
    assert received == sent
    assert type(received.token_ids) is list and all(type(t) is int for t in received.token_ids)
    assert received.prompt_tokens == len(token_ids)
    assert received.route_request() == sent.route_request()


@given(token_ids=st.lists(st.integers(), min_size=1, max_size=200))
def test_ids_outside_uint32_still_travel(token_ids):
    sent = _request(token_ids)
    assert pickle.loads(cloudpickle.dumps(sent)).token_ids == token_ids


def test_the_ids_travel_packed():
    sent = _request(list(range(50_000)))
    state = sent.__getstate__()
    assert not isinstance(state["__dict__"]["token_ids"], list)
    assert sent.token_ids == list(range(50_000))  # packing for the trip leaves the sender's request alone

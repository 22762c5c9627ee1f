"""Agent hints from nvext and x-agentserve-* headers."""

from __future__ import annotations

import pytest

from agentserve.protocol import AgentHints
from agentserve.protocol.errors import RequestError
from agentserve.ingress.hints import extract_hints


def test_body_beats_headers_beats_decoded():
    body = {"nvext": {"agent_hints": {"priority": 5, "osl": 300, "speculative_prefill": True},
                      "session_control": {"session_id": "sess-1"}}}
    headers = {"x-agentserve-priority": "1", "x-agentserve-latency-sensitivity": "2.5"}
    h = extract_hints(headers, body, AgentHints(session_id="user-7"))
    assert h == AgentHints(priority=5, osl=300, speculative_prefill=True, latency_sensitivity=2.5,
                           session_id="sess-1")


def test_headers_alone_and_nothing():
    h = extract_hints({"x-agentserve-speculative-prefill": "true", "x-agentserve-session-id": "s"}, None)
    assert h.speculative_prefill and h.session_id is None  # the session header is lineage's (test_lineage.py)
    base = AgentHints(session_id="u")
    assert extract_hints({}, {"model": "m"}, base) is base


def test_bad_values_are_400s():
    with pytest.raises(RequestError) as e:
        extract_hints({"x-agentserve-priority": "high"}, None)
    assert e.value.kind == "invalid_request"
    with pytest.raises(RequestError):
        extract_hints({}, {"nvext": {"agent_hints": {"osl": -1}}})


def test_priority_is_clamped_unless_the_callers_key_may_raise_it():
    import hashlib

    from agentserve.config import ServeArgs
    from agentserve.protocol import Conversation, GenerationRequest
    from agentserve.ingress.middleware import auth
    from agentserve.ingress.hints import authorize_hints, with_hints

    trusted = hashlib.sha256(b"ops-key").hexdigest()
    plain = GenerationRequest(request_id="r", model="m", conversation=Conversation(turns=()))
    gen = with_hints(plain, {"x-agentserve-priority": "5", "x-agentserve-latency-sensitivity": "2.5",
                             "x-agentserve-osl": "64"}, None)

    def as_caller(key: str | None, allowed: tuple[str, ...]):
        token = auth._IDENTITY.set(auth.identity_of(key))
        try:
            return authorize_hints(gen, allowed).hints
        finally:
            auth._IDENTITY.reset(token)

    assert as_caller("ops-key", (trusted,)).priority == 5
    anyone = as_caller("someone", (trusted,))
    assert (anyone.priority, anyone.latency_sensitivity, anyone.osl) == (0, None, 64)  # only scheduling is clamped
    assert as_caller(None, ()).priority == 0
    assert as_caller("someone", ("*",)).latency_sensitivity == 2.5
    with pytest.raises(ValueError, match="priority_keys"):
        ServeArgs.model_validate({"router": {"priority_keys": ["plain-key"]}})

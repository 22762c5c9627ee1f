"""Agent hints from nvext and x-agentserve-* headers."""

from __future__ import annotations

import pytest

from agentserve.protocol import AgentHints
from agentserve.protocol.errors import RequestError
from agentserve.serve.hints import extract_hints


def test_body_beats_headers_beats_decoded():
    body = {"nvext": {"agent_hints": {"priority": 5, "osl": 300, "speculative_prefill": True},
                      "session_control": {"session_id": "sess-1"}}}
    headers = {"x-agentserve-priority": "1", "x-agentserve-latency-sensitivity": "2.5"}
    h = extract_hints(headers, body, AgentHints(session_id="user-7"))
    assert h == AgentHints(priority=5, osl=300, speculative_prefill=True, latency_sensitivity=2.5,
                           session_id="sess-1")


def test_headers_alone_and_nothing():
    h = extract_hints({"x-agentserve-speculative-prefill": "true", "x-agentserve-session-id": "s"}, None)
    assert h.speculative_prefill and h.session_id == "s"
    base = AgentHints(session_id="u")
    assert extract_hints({}, {"model": "m"}, base) is base


def test_bad_values_are_400s():
    with pytest.raises(RequestError) as e:
        extract_hints({"x-agentserve-priority": "high"}, None)
    assert e.value.kind == "invalid_request"
    with pytest.raises(RequestError):
        extract_hints({}, {"nvext": {"agent_hints": {"osl": -1}}})

"""Token-exact replay through the real graph, per wire API (issue 17): the model's non-canonical output comes back
as the tokens it generated, so every follow-up turn reuses the whole previous prompt + output (reuse 1.0000)."""

from __future__ import annotations

import pytest

from tests.integration.replay_clients import loop

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_non_canonical_output_is_replayed_token_exact(graph_url, api):
    headers = loop(api, graph_url, turns=3)
    assert headers[0] is None  # a session's first turn has nothing to compare with
    for h in headers[1:]:
        assert h is not None and h.startswith("reuse=1.0000") and "cause=" not in h, headers

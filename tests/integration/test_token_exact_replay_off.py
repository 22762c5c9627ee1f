"""With token-exact replay switched off (kept_turns.enabled: false), the same loops as
api/test_token_exact_replay.py part from the engine's cache inside the previous output: the template's
re-rendering is not what the model wrote, and the doctor names it `output_rerendered`."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.support.graph import running_graph
from tests.integration.conftest import GRAPH_ARGS
from tests.integration.replay_clients import loop, reuse

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def graph_url(model_path) -> Iterator[str]:
    with running_graph({**GRAPH_ARGS, "kept_turns": {"enabled": False}}) as url:
        yield url


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_without_kept_turns_the_divergence_shows(graph_url, api):
    headers = loop(api, graph_url, turns=3)
    for h in headers[1:]:
        assert h is not None and reuse(h) < 1.0 and h.endswith("cause=output_rerendered"), headers

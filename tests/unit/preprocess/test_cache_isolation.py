"""Per-key prefix-cache isolation: the Preprocessor salts the engine request and the router's block hashes alike."""

from __future__ import annotations

import pytest

from agentserve.config import ModelSpec
from agentserve.kv_events.block_hash import block_hashes, cache_salt
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import Conversation, GenerationRequest, TextBlock, Turn


@pytest.fixture(scope="module")
def pres(model_path):
    return {mode: Preprocessor(ModelSpec(), str(model_path), 16, cache_isolation=mode) for mode in ("per_key", "shared")}


def _req() -> GenerationRequest:
    text = "A long shared system prompt for every tenant. " * 20
    conv = Conversation(turns=(Turn(role="user", blocks=(TextBlock(text=text),)),))
    return GenerationRequest(request_id="r1", model=ModelSpec().id, conversation=conv)


def test_per_key_salts_the_engine_and_the_router_hashes_the_same_way(pres):
    a, a2, b = (pres["per_key"].preprocess(_req(), scope) for scope in ("key-a", "key-a", "key-b"))
    assert a.engine.cache_salt == cache_salt("key-a") and b.engine.cache_salt == cache_salt("key-b")
    assert a.route.block_hashes == a2.route.block_hashes  # one key's sessions share
    assert not set(a.route.block_hashes) & set(b.route.block_hashes)  # two keys share no block
    # What the engine keys its cache by (tokens + salt) is what the router was handed.
    assert a.route.block_hashes == block_hashes(a.engine.token_ids, 16, None, a.engine.cache_salt)


def test_shared_cache_isolation_keeps_one_partition(pres):
    a, b = (pres["shared"].preprocess(_req(), scope) for scope in ("key-a", "key-b"))
    assert a.engine.cache_salt is None and a.route.block_hashes == b.route.block_hashes


def test_router_affinity_is_scoped_by_caller(pres):
    """Two keys naming the same session id (a guessable one) are two sessions to the router: one cannot pull the
    other's session to a replica of its choosing."""
    req = _req().model_copy(update={"hints": _req().hints.model_copy(update={"session_id": "session-1"})})
    a, a2, b = (pres["per_key"].preprocess(req, scope) for scope in ("key-a", "key-a", "key-b"))
    assert a.route.session_key == a2.route.session_key != b.route.session_key
    assert "session-1" not in a.route.session_key

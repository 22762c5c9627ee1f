"""State that outlives a process, on the embedded default (SQLite under a data directory, no configured key):
a stored response and its `previous_response_id` chain survive a restart of the Ingress replica (which opens the store), a redeploy and a full
restart; signed thinking survives a redeploy with the configured key, a full restart with the generated key kept
in the data directory, and a key rotation. Clients are the official SDKs."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Iterator

import anthropic
import pytest

from tests.support.keys import signing_key
from tests.integration.durable_graph import (
    RestartableGraph, assert_chain_survived, graph_args, oai, replica_actors, start_chain,
)

pytestmark = [pytest.mark.integration, pytest.mark.restarts_cluster]  # run last: a full restart stops Ray

MODEL = "claude-smollm2"
THINKING = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("agentserve-data")


@pytest.fixture(scope="module")
def graph(model_path, data_dir, monkeypatch_module) -> Iterator[RestartableGraph]:
    # No state section and no key, like the shipped serve_config.yaml: SQLite and a generated key in the data dir.
    monkeypatch_module.setenv("AGENTSERVE_DATA_DIR", str(data_dir))
    g = RestartableGraph(graph_args())
    g.start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AGENTSERVE_SECRET_KEY", "AGENTSERVE_PREVIOUS_SECRET_KEYS", "KUBERNETES_SERVICE_HOST"):
            mp.delenv(name, raising=False)
        yield mp


def claude(graph: RestartableGraph) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=graph.url, api_key="key-a", max_retries=0)


def signed_turn(graph: RestartableGraph) -> tuple[list[dict], anthropic.types.Message]:
    first = [{"role": "user", "content": "DUR_THINK: plan the migration"}]
    msg = claude(graph).messages.create(model=MODEL, max_tokens=2048, thinking=THINKING, messages=first)
    assert [b.type for b in msg.content] == ["thinking", "text"] and msg.content[0].signature
    return first, msg


def next_turn(graph: RestartableGraph, first: list[dict], msg) -> anthropic.types.Message:
    """The next turn of the session, sending the signed thinking back unmodified."""
    return claude(graph).messages.create(
        model=MODEL,
        max_tokens=2048,
        thinking=THINKING,
        messages=[
            *first,
            {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
            {"role": "user", "content": "DUR_NEXT: go on"},
        ],
    )


def test_chain_survives_an_ingress_replica_restart(graph):
    turn1, turn2 = start_chain(graph)
    graph.restart_ingress_replica()
    assert_chain_survived(graph, turn1, turn2)


def test_chain_survives_a_redeploy(graph):
    turn1, turn2 = start_chain(graph)
    graph.redeploy()
    assert_chain_survived(graph, turn1, turn2)


def test_chain_and_generated_key_survive_a_full_restart(graph, data_dir):
    turn1, turn2 = start_chain(graph)
    first, msg = signed_turn(graph)
    assert (data_dir / "state.sqlite3").exists()
    assert stat.S_IMODE((data_dir / "secret_key").stat().st_mode) == 0o600
    graph.full_restart()  # Ray itself goes away: nothing survives but the data directory
    assert_chain_survived(graph, turn1, turn2)
    # The key generated at the first start was kept: the live session's next turn is accepted.
    assert next_turn(graph, first, msg).content[-1].text == "Continuing where we left off."


def session_turn(graph: RestartableGraph, session: str, key: str = "key-a", first=None) -> anthropic.types.Message:
    """Turn 1 of a Claude Code-like session (its own system prompt, many cache blocks), or turn 2 after `first`."""
    client = anthropic.Anthropic(base_url=graph.url, api_key=key, max_retries=0,
                                 default_headers={"x-claude-code-session-id": session})  # fmt: skip
    messages = [{"role": "user", "content": f"DUR_NEXT: start {session}"}]
    if first is not None:
        messages += [{"role": "assistant", "content": first.content[-1].text},
                     {"role": "user", "content": "DUR_NEXT: and then?"}]  # fmt: skip
    system = f"Session {session}. " + "Follow the plan, step by step, and report. " * 40
    return client.messages.create(model=MODEL, max_tokens=64, system=system, messages=messages)


def test_a_redeploy_warms_the_latest_sessions_in_their_own_cache_partition(graph):
    """The new engine replica prefills the most recent session (warm_start.max_sessions 1 here) before it takes
    traffic: its next turn finds its whole history cached; an older session's next turn, and the same
    conversation sent by another API key, find nothing (a warm start fills only the session's own partition)."""
    older = session_turn(graph, "warm-older")
    newer = session_turn(graph, "warm-newer")
    engines = {a["name"] for a in replica_actors("Engine")}
    graph.redeploy(graph_args(warm_start={"max_sessions": 1}))
    assert engines.isdisjoint(a["name"] for a in replica_actors("Engine"))  # a new engine, an empty cache
    newer_next = session_turn(graph, "warm-newer", first=newer)
    older_next = session_turn(graph, "warm-older", first=older)
    other_key = session_turn(graph, "warm-newer", key="key-b", first=newer)
    prompt = newer.usage.input_tokens + (newer.usage.cache_read_input_tokens or 0)
    assert newer_next.usage.cache_read_input_tokens >= prompt + newer.usage.output_tokens - 16  # all but a block
    assert older_next.usage.cache_read_input_tokens == 0
    assert other_key.usage.cache_read_input_tokens == 0


def test_signed_thinking_survives_a_redeploy_and_a_key_rotation(graph):
    graph.redeploy(graph_args(secret_key=signing_key("configured 1")))
    first, msg = signed_turn(graph)
    # Responses (Codex, store: false): the sealed reasoning comes back as encrypted_content.
    codex = dict(model="smollm2", store=False, include=["reasoning.encrypted_content"])
    sealed = oai(graph).responses.create(**codex, input="rsp-reason-text: what is 2+2?")
    reasoning = next(i for i in sealed.output if i.type == "reasoning")
    assert reasoning.encrypted_content
    replay = [
        {"role": "user", "content": "rsp-reason-text: what is 2+2?"},
        {"type": "reasoning", "summary": [], "encrypted_content": reasoning.encrypted_content},
        {"role": "user", "content": "rsp-hello: and 3+3?"},
    ]

    # A redeploy that rotates the key: a new key signs; the old one, listed as previous, still verifies what it
    # signed (a redeploy that keeps the configured key is the same upgrade with nothing rotated).
    graph.redeploy(graph_args(secret_key=signing_key("configured 2"), previous_secret_keys=[signing_key("configured 1")]))
    assert next_turn(graph, first, msg).content[-1].text == "Continuing where we left off."
    assert oai(graph).responses.create(**codex, input=replay).output_text == "Hello from responses."

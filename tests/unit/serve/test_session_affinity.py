"""The Preprocessor's request router: a session's calls go to one replica, the same from every Ingress replica,
and only the sessions a replica wins or held move when the replicas change."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.protocol import SessionAffinity, caller_session
from agentserve.serve.deployments.session_affinity import SessionAffinityRouter


def _replica(uid: str) -> Any:
    return SimpleNamespace(replica_id=SimpleNamespace(unique_id=uid))


def _router() -> SessionAffinityRouter:
    return SessionAffinityRouter.__new__(SessionAffinityRouter)  # Serve builds it per handle; only the policy is tested


def _pending(*args: Any, **kwargs: Any) -> Any:
    return SimpleNamespace(args=args, kwargs=kwargs, routing_context=SimpleNamespace(should_backoff=False))


def _ranks(router: SessionAffinityRouter, replicas: list[Any], pending: Any) -> list[list[str]]:
    got = asyncio.run(router.choose_replicas(replicas, pending))
    return [[r.replica_id.unique_id for r in rank] for rank in got]


def _home(router: SessionAffinityRouter, replicas: list[Any], key: str) -> str:
    return _ranks(router, replicas, _pending("request", "scope", affinity=SessionAffinity(key=key)))[0][0]


ids = st.lists(st.text("abcdef0123456789", min_size=4, max_size=12), min_size=2, max_size=8, unique=True)


@settings(max_examples=60, deadline=None)
@given(ids, st.text(min_size=1, max_size=20), st.randoms())
def test_every_router_sends_a_session_to_the_same_replica_and_only_a_change_that_concerns_it_moves_it(uids, session, rnd):
    key = caller_session("alice", session)
    replicas = [_replica(u) for u in uids]
    shuffled = replicas[:]
    rnd.shuffle(shuffled)
    home = _home(_router(), replicas, key)
    assert _home(_router(), shuffled, key) == home  # another Ingress replica's router, its own replica order
    others = [r for r in replicas if r.replica_id.unique_id != home]
    assert _home(_router(), [*others[1:], next(r for r in replicas if r.replica_id.unique_id == home)], key) == home
    grown = _home(_router(), [*replicas, _replica("new-replica")], key)
    assert grown in (home, "new-replica")  # a scale-up moves a session only to the new replica
    assert _home(_router(), others, key) != home  # its replica gone: another takes it


def test_sessions_spread_over_the_replicas_and_a_full_home_falls_back_to_two_others_by_load():
    replicas = [_replica(f"replica-{i}") for i in range(4)]
    router = _router()
    homes = Counter(_home(router, replicas, caller_session("alice", f"session-{n}")) for n in range(2000))
    assert set(homes) == {f"replica-{i}" for i in range(4)} and all(350 < n < 650 for n in homes.values()), homes
    ranks = _ranks(router, replicas, _pending("request", affinity=SessionAffinity(key="k")))
    assert len(ranks) == 2 and len(ranks[0]) == 1 and len(ranks[1]) == 2 and ranks[0][0] not in ranks[1]


def test_calls_without_a_session_are_routed_as_by_serves_default():
    """Power of two choices: two replicas at random (every replica some of the time), the less loaded picked."""
    replicas = [_replica(f"replica-{i}") for i in range(3)]
    picks = [_ranks(_router(), replicas, _pending("request", "scope")) for _ in range(200)]
    assert all(len(p) == 1 and len(p[0]) == 2 and len(set(p[0])) == 2 for p in picks)
    assert {r for p in picks for r in p[0]} == {f"replica-{i}" for i in range(3)}
    assert len(_ranks(_router(), replicas, None)[0]) == 2
    assert _ranks(_router(), replicas[:1], _pending(affinity=SessionAffinity(key="k"))) == [["replica-0"]]

"""Calls to a Router deployment of several replicas: an engine's signals reach every replica, a session's route
calls one (the same from every caller, another when it is gone), a release the replica that leased."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agentserve.protocol import SessionAffinity, caller_session
from agentserve.protocol.cluster import RouterTarget
from agentserve.serve.deployments import router_calls
from agentserve.serve.deployments.router_calls import RouterCallRouter, RouterCalls
from tests.unit.fake_handles import Method


def _replica(uid: str) -> Any:
    return SimpleNamespace(replica_id=SimpleNamespace(unique_id=uid))


def _router(app: str = "app", name: str = "Router") -> RouterCallRouter:
    router = RouterCallRouter.__new__(RouterCallRouter)  # Serve builds it per handle: the policy and the registry
    router._deployment_id = SimpleNamespace(app_name=app, name=name)
    router._replicas = {}
    return router


def _ranks(router: RouterCallRouter, replicas: list[Any], *args: Any) -> list[list[str]]:
    pending = SimpleNamespace(args=args, kwargs={}, routing_context=SimpleNamespace(should_backoff=False))
    got = asyncio.run(router.choose_replicas(replicas, pending))
    # Each ranking is the last word: Serve backs off before asking again (a pinned replica that is full is not
    # asked again at once, in a loop of the caller's event loop).
    assert pending.routing_context.should_backoff
    return [[r.replica_id.unique_id for r in rank] for rank in got]


def test_a_targeted_call_reaches_its_replica_and_a_gone_one_any():
    replicas = [_replica(u) for u in ("r-a", "r-b", "r-c")]
    router = _router()
    assert _ranks(router, replicas, "engine-1", [], RouterTarget("r-b")) == [["r-b"]]
    assert _ranks(router, replicas, "engine-1", [], RouterTarget("r-gone")) == [["r-a", "r-b", "r-c"]]


def test_a_sessions_route_calls_go_to_one_replica_from_every_caller_and_move_only_when_it_goes():
    replicas = [_replica(f"router-{i}") for i in range(3)]
    keys = [caller_session("alice", f"s{i}") for i in range(60)]
    homes = {k: _ranks(_router(), replicas, "req", SessionAffinity(key=k))[0] for k in keys}
    assert all(len(h) == 1 for h in homes.values())
    assert len({h[0] for h in homes.values()}) == 3  # sessions spread over the Routers
    reversed_order = {k: _ranks(_router(), replicas[::-1], "req", SessionAffinity(key=k))[0] for k in keys}
    assert reversed_order == homes  # another Ingress replica's router agrees
    survivors = [r for r in replicas if r.replica_id.unique_id != "router-0"]
    for k, home in homes.items():
        after = _ranks(_router(), survivors, "req", SessionAffinity(key=k))[0][0]
        assert after == home[0] or home[0] == "router-0"  # only the dead Router's sessions move
    assert len(_ranks(_router(), replicas, "req")[0]) == 2  # no session: by load, as Serve's default


def test_the_replicas_serve_updates_become_the_callers_members_and_signals_reach_each():
    router = _router(app="app-m", name="Router")
    router._replicas = {"id-b": _replica("r-b"), "id-a": _replica("r-a")}  # what Serve's update_replicas keeps
    router._publish()
    async def knows(replica: str, running: list[str], target: RouterTarget | None = None) -> bool:
        return target is None or target.replica_id != "r-b"

    heartbeat = Method(knows)
    handle = SimpleNamespace(app_name="app-m", deployment_name="Router", heartbeat=heartbeat)
    calls = RouterCalls(handle)
    assert calls.members() == ("r-a", "r-b") and calls.primary() == RouterTarget("r-a")
    answers = asyncio.run(calls.each("heartbeat", "engine-1", ["q1"]))
    assert answers == {"r-a": True, "r-b": False}  # r-b does not know the engine: it registers there
    assert sorted(c[2].replica_id for c in heartbeat.calls) == ["r-a", "r-b"]
    del router._replicas["id-a"]  # the primary died: the next in id order is primary
    router._publish()
    assert calls.members() == ("r-b",) and calls.primary() == RouterTarget("r-b")


def test_before_the_handle_knows_the_replicas_one_call_goes_to_any():
    async def register(*args: Any) -> None:
        return None

    handle = SimpleNamespace(app_name="app-none", deployment_name="Router", register=Method(register))
    answers = asyncio.run(RouterCalls(handle).each("register", "engine-1", "info"))
    assert list(answers) == [None] and handle.register.calls == [("engine-1", "info")]
    router_calls._MEMBERS.pop(("app-m", "Router"), None)


def test_each_signal_from_inside_a_request_is_a_call_of_its_own_to_serves_request_router():
    """Serve's request router keys pending calls by the internal id a call inherits from its request: the same
    signal to two Router replicas under one id froze every handle call of the Ingress (a GPU pod's death with two
    Routers). Each call gets its own internal id and keeps the request id the logs are searched by."""
    import dataclasses

    from ray.serve import context

    seen: list[tuple[str, str]] = []

    def record(*args: Any) -> None:
        current = context._get_serve_request_context()
        seen.append((current.request_id, current._internal_request_id))

    router = _router(app="app-ids", name="Router")
    router._replicas = {"a": _replica("r-a"), "b": _replica("r-b")}
    router._publish()
    handle = SimpleNamespace(app_name="app-ids", deployment_name="Router", replica_failed=Method(record))
    calls = RouterCalls(handle)

    async def inside_a_request() -> None:
        current = context._get_serve_request_context()
        context._serve_request_context.set(
            dataclasses.replace(current, request_id="req-1", _internal_request_id="internal-1"))
        calls.each_nowait("replica_failed", "engine-1")
        calls.to("r-a", "replica_failed", "engine-1")
        assert context._get_serve_request_context()._internal_request_id == "internal-1"  # the request's own: kept

    asyncio.run(inside_a_request())
    assert [request for request, _ in seen] == ["req-1"] * 3
    internal = [i for _, i in seen]
    assert len(set(internal)) == 3 and "internal-1" not in internal
    router_calls._MEMBERS.pop(("app-ids", "Router"), None)

from agentserve.protocol import RouteRequest
from agentserve.routing import LeastLoadedPolicy


def _req(i: int) -> RouteRequest:
    return RouteRequest(request_id=f"r{i}", model="m", block_hashes=[], prompt_tokens=2, max_tokens=4)


def test_no_replica_means_no_pin():
    assert LeastLoadedPolicy().route(_req(0)).replica_id is None


def test_spreads_load_and_releases():
    p = LeastLoadedPolicy()
    p.heartbeat("a")
    p.heartbeat("b")
    picks = [p.route(_req(i)).replica_id for i in range(4)]
    assert sorted(picks) == ["a", "a", "b", "b"]
    p.release("r0")
    p.release("r2")
    assert sum(p.replicas().values()) == 2
    p.release("r0")  # releasing twice is harmless
    assert sum(p.replicas().values()) == 2


def test_least_loaded_wins():
    p = LeastLoadedPolicy()
    p.heartbeat("a")
    p.heartbeat("b")
    for i in range(3):
        p.route(_req(i))
    busy = max(p.replicas(), key=p.replicas().get)
    idle = min(p.replicas(), key=p.replicas().get)
    assert busy != idle
    assert p.route(_req(9)).replica_id == idle


def test_silent_replica_expires():
    now = [0.0]
    p = LeastLoadedPolicy(expire_after_s=10, clock=lambda: now[0])
    p.heartbeat("a")
    p.heartbeat("b")
    now[0] = 5
    p.heartbeat("b")
    now[0] = 12
    assert set(p.replicas()) == {"b"}
    assert p.route(_req(0)).replica_id == "b"

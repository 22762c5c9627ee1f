"""SessionTable: a session's home replica and the sessions each replica carries (agentserve/routing/sessions.py)."""

from agentserve.routing.sessions import SessionTable


def test_a_session_counts_once_on_the_replica_of_its_last_turn_until_resident_s_passes():
    t = SessionTable(resident_s=30, max_sessions=10)
    t.touch("s1", "a", 0)
    t.touch("s2", "a", 5)
    t.touch("s1", "b", 10)  # moved: counted on b only
    assert dict(t.resident(10)) == {"a": 1, "b": 1}
    assert t.replica_of("s1") == "b"
    assert dict(t.resident(36)) == {"a": 0, "b": 1}  # s2 idle past 30 s
    assert t.replica_of("s2") == "a"  # still its home for affinity
    assert dict(t.resident(41)) == {"a": 0, "b": 0}


def test_the_oldest_sessions_are_forgotten_past_max_sessions():
    t = SessionTable(resident_s=30, max_sessions=2)
    for i, s in enumerate(["s1", "s2", "s3"]):
        t.touch(s, "a", i)
    assert len(t) == 2 and t.replica_of("s1") is None and t.replica_of("s3") == "a"
    assert t.resident(3)["a"] == 3  # the carried count is by time, not by the affinity map's bound


def test_a_replica_that_leaves_takes_its_sessions_with_it():
    t = SessionTable(resident_s=30, max_sessions=10)
    t.touch("s1", "a", 0)
    t.touch("s2", "b", 0)
    t.forget_replica("a")
    assert t.replica_of("s1") is None and t.replica_of("s2") == "b"
    assert t.resident(1)["a"] == 0 and t.resident(1)["b"] == 1
    t.touch("s1", "b", 2)
    assert t.resident(2)["b"] == 2

"""KV events over real ZMQ sockets: late join is replayed, a lost range without replay resets."""

from __future__ import annotations

import time

from agentserve.kv_events.format import AllBlocksCleared, BlockRemoved
from agentserve.kv_events.publisher import KvEventPublisher
from agentserve.routing.kv_subscriber import Events, KvEventSubscriber, Reset, _Sub


def collect(sub: KvEventSubscriber, n: int, timeout: float = 10.0) -> list:
    got, end = [], time.time() + timeout
    while len(got) < n and time.time() < end:
        got += sub.drain()
        time.sleep(0.02)
    return got


def test_late_subscriber_replays_from_zero_in_order():
    pub = KvEventPublisher(host="127.0.0.1")
    sub = KvEventSubscriber()
    try:
        for i in range(3):  # published before anyone listens: lost on PUB, kept for replay
            pub.publish([BlockRemoved(block_hashes=[i], medium=None)])
        time.sleep(0.2)
        sub.add("a", f"tcp://127.0.0.1:{pub.port}", f"tcp://127.0.0.1:{pub.replay_port}")
        time.sleep(0.5)  # let SUB connect
        pub.publish([AllBlocksCleared()])
        got = collect(sub, 4)
        assert [type(u) for u in got] == [Events] * 4
        assert [u.events[0].block_hashes for u in got[:3]] == [[0], [1], [2]]
        assert sub.stats["replays"] == 1 and sub.stats["resets"] == 0
    finally:
        sub.close()
        pub.close()


def test_gap_without_replay_and_restart_reset_the_replica():
    sub = KvEventSubscriber()
    try:
        s = _Sub("a", "tcp://unused", None, socket=None)  # type: ignore[arg-type]
        from agentserve.kv_events.format import EventBatch, encode_batch

        payload = encode_batch(EventBatch(ts=0.0, events=[AllBlocksCleared()]))
        sub._on_batch(s, 0, payload)
        sub._on_batch(s, 5, payload)  # 1..4 lost, no replay endpoint
        sub._on_batch(s, 0, payload)  # publisher restarted
        got = sub.drain()
        assert [type(u) for u in got] == [Events, Reset, Events, Reset, Events]
    finally:
        sub.close()


def test_subscriber_sleeps_until_its_first_replica():
    """Before any engine registers (its whole start-up) the subscriber thread must sleep, not spin a core."""
    import time

    from agentserve.routing.kv_subscriber import KvEventSubscriber

    sub = KvEventSubscriber()
    try:
        started = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - started < 0.2  # a spinning poll over no sockets burns ~1 s here
    finally:
        sub.close()

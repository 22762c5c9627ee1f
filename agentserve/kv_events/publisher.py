"""A KV event publisher in vLLM's wire format, for engines that are not vLLM (the scripted engine).

Like vLLM's ZmqEventPublisher: a PUB socket for live batches and a ROUTER socket that replays
buffered batches from a requested sequence number. One daemon thread owns both sockets (ZMQ
sockets are not thread-safe); `publish` only enqueues.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

import zmq

from agentserve.kv_events.format import END_SEQ, EventBatch, KvEvent, encode_batch, seq_bytes, seq_value


class KvEventPublisher:
    def __init__(self, *, host: str = "*", topic: str = "", buffer_steps: int = 10_000) -> None:
        self._ctx = zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(100_000)
        self._replay = self._ctx.socket(zmq.ROUTER)
        self.port = self._pub.bind_to_random_port(f"tcp://{host}")
        self.replay_port = self._replay.bind_to_random_port(f"tcp://{host}")
        self._topic = topic.encode()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._queue: queue.SimpleQueue[EventBatch | None] = queue.SimpleQueue()
        self._seq = 0
        self._thread = threading.Thread(target=self._run, name="kv-event-publisher", daemon=True)
        self._thread.start()

    def publish(self, events: list[KvEvent]) -> None:
        if events:
            self._queue.put(EventBatch(ts=time.time(), events=list(events), data_parallel_rank=0))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=2)

    def _run(self) -> None:
        try:
            while True:
                if self._replay.poll(0):
                    self._serve_replay()
                try:
                    batch = self._queue.get(timeout=0.05)
                except queue.Empty:
                    continue
                if batch is None:
                    return
                payload = encode_batch(batch)
                self._pub.send_multipart((self._topic, seq_bytes(self._seq), payload))
                self._buffer.append((self._seq, payload))
                self._seq += 1
        finally:
            self._pub.close(linger=0)
            self._replay.close(linger=0)

    def _serve_replay(self) -> None:
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start = frames
        first = seq_value(start)
        for seq, payload in list(self._buffer):
            if seq >= first:
                self._replay.send_multipart((client, b"", self._topic, seq_bytes(seq), payload))
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))

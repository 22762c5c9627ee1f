"""Subscribes to every engine replica's KV event publisher, with sequence-gap detection and replay.

One thread polls all SUB sockets. Per replica it expects consecutive sequence numbers:
* first batch with seq > 0 (we joined late): replay from 0;
* a gap: replay the missing range from the replica's ROUTER socket;
* a replay that cannot cover the gap, or a sequence that goes backwards (the publisher restarted):
  report a reset, and the router forgets that replica's index (forgetting is safe, guessing is not).
Decoded batches go to a thread-safe queue that the router drains in its own loop, so the index is
only ever touched from one thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Union

import msgspec
import zmq

from agentserve.kv_events.format import END_SEQ, KvEvent, decode_batch, seq_bytes, seq_value

logger = logging.getLogger(__name__)

POLL_MS = 250


@dataclass(frozen=True, slots=True)
class Events:
    replica: str
    events: list[KvEvent]


@dataclass(frozen=True, slots=True)
class Reset:
    replica: str
    why: str


Update = Union[Events, Reset]


@dataclass
class _Sub:
    replica: str
    endpoint: str
    replay_endpoint: str | None
    socket: zmq.Socket
    expected: int | None = None


class KvEventSubscriber:
    def __init__(self, *, replay_timeout_s: float = 2.0, on_update: Callable[[], None] | None = None) -> None:
        """`on_update` is called from the subscriber thread after updates were queued (wake the consumer)."""
        self._ctx = zmq.Context.instance()
        self._on_update = on_update
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._out: queue.SimpleQueue[Update] = queue.SimpleQueue()
        self._timeout_ms = int(replay_timeout_s * 1000)
        self._stop = threading.Event()
        self.stats = {"batches": 0, "replays": 0, "resets": 0, "bad": 0}
        self._thread = threading.Thread(target=self._run, name="kv-event-subscriber", daemon=True)
        self._thread.start()

    def add(self, replica: str, endpoint: str, replay_endpoint: str | None) -> None:
        self._commands.put(("add", replica, endpoint, replay_endpoint))

    def remove(self, replica: str) -> None:
        self._commands.put(("remove", replica, None, None))

    def drain(self) -> list[Update]:
        out = []
        while True:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    # -- the thread ------------------------------------------------------------
    def _run(self) -> None:
        subs: dict[str, _Sub] = {}
        poller = zmq.Poller()
        try:
            while not self._stop.is_set():
                if not subs:
                    # zmq_poll over no sockets returns at once: sleep on the command queue instead, or this thread
                    # spins a whole core until the first engine registers (the engine's own start-up, on 2 cores).
                    try:
                        self._apply(subs, poller, *self._commands.get(timeout=POLL_MS / 1000))
                    except queue.Empty:
                        pass
                    continue
                self._apply_commands(subs, poller)
                # Commands (add/remove) are rare; a long poll keeps an idle subscriber asleep.
                for sock, _ in poller.poll(POLL_MS):
                    sub = next((s for s in subs.values() if s.socket is sock), None)
                    if sub is None:
                        continue
                    while True:
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        if len(frames) == 3:
                            self._on_batch(sub, seq_value(frames[1]), frames[2])
                    if self._on_update is not None:
                        self._on_update()
        finally:
            for s in subs.values():
                s.socket.close(linger=0)

    def _apply_commands(self, subs: dict[str, _Sub], poller: zmq.Poller) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            self._apply(subs, poller, *command)

    def _apply(
        self, subs: dict[str, _Sub], poller: zmq.Poller, op: str, replica: str, endpoint: str | None, replay: str | None
    ) -> None:
        old = subs.pop(replica, None)
        if old is not None:
            poller.unregister(old.socket)
            old.socket.close(linger=0)
        if op == "add":
            sock = self._ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.SUBSCRIBE, b"")
            sock.connect(endpoint)
            poller.register(sock, zmq.POLLIN)
            subs[replica] = _Sub(replica, endpoint, replay, sock)

    def _on_batch(self, sub: _Sub, seq: int, payload: bytes) -> None:
        if sub.expected is None and seq > 0:
            self._catch_up(sub, 0, seq, "joined late")
        elif sub.expected is not None and seq > sub.expected:
            self._catch_up(sub, sub.expected, seq, f"gap {sub.expected}..{seq - 1}")
        elif sub.expected is not None and seq < sub.expected:
            self._reset(sub, f"sequence went back from {sub.expected} to {seq} (publisher restarted)")
        self._emit(sub, payload)
        sub.expected = seq + 1

    def _catch_up(self, sub: _Sub, start: int, until: int, why: str) -> None:
        got = self._replay(sub, start) if sub.replay_endpoint else None
        self.stats["replays"] += 1
        if not got or got[0][0] != start:
            self._reset(sub, f"{why}: replay unavailable")
            return
        for seq, payload in got:
            if seq >= until:
                break
            self._emit(sub, payload)

    def _replay(self, sub: _Sub, start: int) -> list[tuple[int, bytes]] | None:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.RCVTIMEO, self._timeout_ms)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(sub.replay_endpoint)
            sock.send_multipart((b"", seq_bytes(start)))
            out = []
            while True:
                frames = sock.recv_multipart()
                if len(frames) != 4 or frames[2] == END_SEQ:
                    return out
                out.append((seq_value(frames[2]), frames[3]))
        except zmq.Again:
            logger.warning("KV event replay from %s timed out", sub.replay_endpoint)
            return None
        finally:
            sock.close()

    def _reset(self, sub: _Sub, why: str) -> None:
        self.stats["resets"] += 1
        logger.info("KV index for %s reset: %s", sub.replica, why)
        self._out.put(Reset(sub.replica, why))

    def _emit(self, sub: _Sub, payload: bytes) -> None:
        try:
            batch = decode_batch(payload)
        except msgspec.MsgspecError:
            self.stats["bad"] += 1
            self._reset(sub, "undecodable batch")
            return
        self.stats["batches"] += 1
        self._out.put(Events(sub.replica, batch.events))

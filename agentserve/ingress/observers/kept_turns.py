"""Token-exact replay's writer: keep each finished turn's generated tokens under its content key.

The batch is written on the store's thread; the end of the stream waits for it at most `commit_wait_s`, so a
follow-up sent the moment the client sees the end finds it. Turns cut short (length, stop string, error) or whose
tool call did not parse are not kept: their tokens do not decode to what the client was sent (TurnEnded.keepable).
"""

from __future__ import annotations

import asyncio

from agentserve import metrics
from agentserve.ingress.observers import TurnEnded
from agentserve.preprocess.turn_digest import key_after
from agentserve.state.kept_turns import KeptTurnStore


class KeptTurnWriter:
    def __init__(self, store: KeptTurnStore, commit_wait_s: float) -> None:
        self._store = store
        self._wait = commit_wait_s

    def turn_ended(self, ended: TurnEnded):
        if not ended.keepable:
            return None
        assert ended.prepared is not None and ended.state is not None and ended.state.turn is not None
        report = ended.prepared.report
        done = self._store.put(
            key_after(report.replay_prefix, ended.state.turn),
            ended.prepared.engine.token_ids,
            list(ended.state.output_ids),
            base=report.replay_base,
            tail_from=report.replay_tail_from,
        )
        return self._committed(done, ended.model)

    def close(self) -> None:
        """The replica stops: the turns still queued go to the database before it does (a blocking wait)."""
        self._store.close()

    async def _committed(self, done, model: str) -> None:
        try:
            wait = self._wait
            stored = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(done)), wait) if wait > 0 else None
        except asyncio.TimeoutError:
            stored = None
        metrics.KEPT_TURNS.labels(model, {True: "kept", False: "refused", None: "pending"}[stored]).inc()

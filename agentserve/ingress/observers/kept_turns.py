"""Token-exact replay's writer: keep each finished turn's generated tokens under its content key.

The batch is written on the store's thread; the end of the stream waits for it at most `commit_wait_s`, so a
follow-up sent the moment the client sees the end finds it. Turns cut short (length, stop string, error) or whose
tool call did not parse are not kept: their tokens do not decode to what the client was sent (TurnEnded.keepable).

Each session thread's latest turn is also its head (state/kept_turns.py `SessionHead`), what a new engine replica
prefills (serve/warm_start.py): a kept turn's prompt and output; for a turn that is not kept, its prompt alone (kept
as a turn with no output under a key of its own), since that is what the session's next request extends. A thread
is the session and the start of its prompt: a harness's side requests and subagents, under the same session id with
prompts of their own, do not overwrite the main thread's head.
"""

from __future__ import annotations

import asyncio

from agentserve import metrics
from agentserve.ingress.observers import TurnEnded
from agentserve.preprocess.turn_digest import key_after
from agentserve.state.kept_turns import KeptTurnStore, SessionHead, token_digest

THREAD_PREFIX = 256  # tokens of the prompt that tell a session's threads apart (system prompt and tools)


class KeptTurnWriter:
    def __init__(self, store: KeptTurnStore, commit_wait_s: float) -> None:
        self._store = store
        self._wait = commit_wait_s

    def turn_ended(self, ended: TurnEnded):
        if ended.warm_only or not ended.metered or ended.prepared is None or ended.state is None:
            return None
        report = ended.prepared.report
        prompt = ended.prepared.engine.token_ids
        if not ended.keepable:
            if ended.session:  # its prompt alone is the thread's head
                key = "prompt:" + token_digest(prompt).hex()
                linked = report.replay_tail_from is not None  # else the whole prompt is its tail
                self._store.put(key, prompt, (), base=report.replay_base if linked else "",
                                tail_from=report.replay_tail_from if linked else 0)  # fmt: skip
                self._head(ended, key, len(prompt))
            return None
        assert ended.state.turn is not None
        key = key_after(report.replay_prefix, ended.state.turn)
        output = list(ended.state.output_ids)
        done = self._store.put(key, prompt, output, base=report.replay_base, tail_from=report.replay_tail_from)
        if ended.session:
            self._head(ended, key, len(prompt) + len(output))
        return self._committed(done, ended.model)

    def _head(self, ended: TurnEnded, key: str, tokens: int) -> None:
        engine = ended.prepared.engine  # type: ignore[union-attr]
        thread = f"{ended.session}/{token_digest(engine.token_ids[:THREAD_PREFIX]).hex()}"
        self._store.put_head(thread, ended.model, SessionHead(key, engine.cache_salt, engine.adapter, tokens))

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

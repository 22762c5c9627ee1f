"""Speculative prefill: after a turn, prefill the prefix the next turn will start with, on the same replica.

Dynamo replays only the text content; an agent turn is mostly reasoning and tool calls, so here the
assistant turn is rebuilt from the streamed events (reasoning, text and tool calls, in order, with the
ids the client saw) and rendered through the same template and replay policy as the next request
will be. The next request then finds that prefix warm. When the turn was kept for token-exact replay
(preprocess/splice.py), the next request starts with this turn's prompt and generated tokens exactly: those are
prefilled, with no rendering (the engine has most of them already; the rest is its last partial block).

It is optional work: it runs only on an unsaturated replica (the router refuses it otherwise) and at most
`max_in_flight` at a time per ingress replica; beyond that a turn is simply not speculated on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

from agentserve.preprocess.block_hash import block_hashes
from agentserve.protocol import (
    AgentHints,
    Conversation,
    PreprocessedRequest,
    ReasoningBlock,
    SamplingParams,
    TextBlock,
    ToolCallBlock,
    Turn,
)
from agentserve.protocol.events import ReasoningDelta, TextDelta, ToolCallEnd, ToolCallStart

logger = logging.getLogger("ray.serve")


class TurnCollector:
    """Rebuilds the assistant turn from StreamEvents as they pass."""

    def __init__(self) -> None:
        self._blocks: list[Any] = []
        self._calls: dict[int, tuple[str, str]] = {}

    def feed(self, events: Iterable[Any]) -> None:
        for ev in events:
            if isinstance(ev, ReasoningDelta):
                self._append(ReasoningBlock, ev.text)
            elif isinstance(ev, TextDelta):
                self._append(TextBlock, ev.text)
            elif isinstance(ev, ToolCallStart):
                self._calls[ev.index] = (ev.id, ev.name)
            elif isinstance(ev, ToolCallEnd) and ev.index in self._calls:
                cid, name = self._calls.pop(ev.index)
                self._blocks.append(ToolCallBlock(id=cid, name=name, arguments=ev.arguments))

    def _append(self, kind: type, text: str) -> None:
        if self._blocks and type(self._blocks[-1]) is kind:
            self._blocks[-1] = kind(text=self._blocks[-1].text + text)
        elif text:
            self._blocks.append(kind(text=text))

    def turn(self) -> Turn | None:
        return Turn(role="assistant", blocks=tuple(self._blocks)) if self._blocks else None


def next_turn_prefix(conversation: Conversation, assistant: Turn) -> Conversation:
    return conversation.model_copy(update={"turns": (*conversation.turns, assistant)})


def prefill_request(
    request_id: str, model: str, token_ids: list[int], block_size: int, hints: AgentHints, adapter: str | None = None
) -> PreprocessedRequest:
    """A one-token request whose only job is to leave `token_ids` in the replica's prefix cache (under `adapter`)."""
    return PreprocessedRequest(
        request_id=f"{request_id}-spec",
        model=model,
        adapter=adapter,
        token_ids=token_ids,
        block_hashes=block_hashes(token_ids, block_size, adapter),
        sampling=SamplingParams(max_tokens=1, temperature=0.0),
        hints=hints.model_copy(update={"speculative_prefill": False, "osl": 1}),
        max_tokens=1,
    )


class SpeculativePrefill:
    """Runs speculative prefills after finished turns, bounded in number, never past a saturated replica."""

    def __init__(
        self,
        *,
        preprocessor: Any,
        router: Any,
        engine: Any,
        block_size: int | dict[str, int],
        enabled: bool,
        max_in_flight: int,
    ) -> None:
        self._pre = preprocessor
        self._router = router
        # Streaming handles: one (every request's model), or per catalog model id, with each model's block size.
        self._engine = engine
        self._block_size = block_size
        self.enabled = enabled and max_in_flight > 0
        self._max = max_in_flight
        self._tasks: set[asyncio.Task] = set()
        self.skipped = 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def after(
        self,
        request: Any,
        pre: PreprocessedRequest,
        route: Any,
        collector: TurnCollector,
        generated: list[int] | None = None,  # prompt + output tokens, when the turn was kept for token-exact replay
    ) -> None:
        turn = collector.turn()
        if turn is None or route is None or route.replica_id is None:
            return
        if len(self._tasks) >= self._max:
            self.skipped += 1
            return
        task = asyncio.get_running_loop().create_task(self._prefill(request, pre, route.replica_id, turn, generated))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prefill(
        self, request: Any, pre: PreprocessedRequest, replica: str, turn: Turn, generated: list[int] | None
    ) -> None:
        spec = None
        try:
            if generated is not None:
                ids = generated
            else:
                conv = next_turn_prefix(request.conversation, turn)
                ids = await self._pre.render_tokens.remote(conv, dict(request.template_kwargs), False, None, pre.model)
            bs = self._block_size[pre.model] if isinstance(self._block_size, dict) else self._block_size
            spec = prefill_request(pre.request_id, pre.model, ids, bs, pre.hints, pre.adapter)
            route = await self._router.route_to.remote(spec.route_request(), replica)
            if route is None:  # the replica is saturated (or gone): real requests come first
                return
            engine = self._engine[pre.model] if isinstance(self._engine, dict) else self._engine
            async for _ in engine.generate.remote(spec, route):
                pass
        except Exception:
            logger.warning("speculative prefill after %s failed", pre.request_id, exc_info=True)
            if spec is not None:
                self._router.release.remote(spec.request_id)

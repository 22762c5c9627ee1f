"""Speculative prefill: after a turn, prefill the prefix the next turn will start with, on the same replica.

Dynamo replays only the text content; an agent turn is mostly reasoning and tool calls, so here the
assistant turn is rebuilt from the streamed events (reasoning, text and tool calls, in order, with the
ids the client saw) and rendered through the same template and replay policy as the next request
will be. The next request then finds that prefix warm. When the turn was kept for token-exact replay
(preprocess/splice.py), the next request starts with this turn's prompt and generated tokens exactly: those are
prefilled, with no rendering (the engine has most of them already; the rest is its last partial block).

The prefill is a request like any other: it goes through the same lifecycle (ingress/lifecycle.py), pinned to the
turn's replica, so its lease, stream and release follow the same rules. It is optional work: it runs only on an unsaturated replica (the router refuses it otherwise) and at most
`max_in_flight` at a time per ingress replica; beyond that a turn is simply not speculated on.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from typing import TYPE_CHECKING, Any, Sequence

from agentserve.ingress.observers import TurnEnded
from agentserve.kv_events.block_hash import block_hashes
from agentserve.protocol import (
    AgentHints,
    Conversation,
    EngineRequest,
    Preprocessed,
    RouteRequest,
    SamplingParams,
    Turn,
)
from agentserve.protocol.token_ids import TYPECODE

if TYPE_CHECKING:
    from agentserve.ingress.lifecycle import RequestPath

logger = logging.getLogger("ray.serve")


def next_turn_prefix(conversation: Conversation, assistant: Turn) -> Conversation:
    return conversation.model_copy(update={"turns": (*conversation.turns, assistant)})


def prefill_request(
    request_id: str,
    model: str,
    token_ids: Sequence[int],
    block_size: int,
    hints: AgentHints,
    adapter: str | None = None,
    cache_salt: str | None = None,
    images: tuple[bytes, ...] = (),
) -> Preprocessed:
    """A one-token request whose only job is to leave `token_ids` in the replica's prefix cache (under `adapter`,
    in the turn's cache partition `cache_salt`: the next turn is looked up there). `images`: the turn's (a vision
    model's), which the next turn's prompt starts with too: vLLM keys the blocks after each image by it."""
    rid = f"{request_id}-spec"
    hints = hints.model_copy(update={"speculative_prefill": False, "osl": 1})
    return Preprocessed(
        engine=EngineRequest(
            request_id=rid, model=model, adapter=adapter, cache_salt=cache_salt, token_ids=token_ids,
            sampling=SamplingParams(max_tokens=1, temperature=0.0), max_tokens=1, images=images,
        ),
        route=RouteRequest(
            request_id=rid, model=model, block_hashes=block_hashes(token_ids, block_size, adapter, cache_salt),
            prompt_tokens=len(token_ids), max_tokens=1, hints=hints,
        ),
    )


class SpeculativePrefill:
    """Runs speculative prefills after finished turns, bounded in number, never past a saturated replica."""

    def __init__(self, *, block_size: dict[str, int], enabled: bool, max_in_flight: int, token_exact: bool) -> None:
        self._block_size = block_size  # per catalog model
        self.enabled = enabled and max_in_flight > 0
        self._max = max_in_flight
        self._token_exact = token_exact  # kept turns are on: a kept turn's next prompt starts with its tokens
        self._path: RequestPath | None = None
        self._tasks: set[asyncio.Task] = set()
        self.skipped = 0

    def attach(self, path: "RequestPath") -> None:
        self._path = path

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def turn_ended(self, ended: TurnEnded) -> None:
        request = ended.request
        if not (self.enabled and request.hints.speculative_prefill and ended.finished) or ended.warm_only:
            return
        assert ended.state is not None and ended.prepared is not None
        turn = ended.state.turn
        if turn is None or ended.route is None or ended.route.replica_id is None or self._path is None:
            return
        if len(self._tasks) >= self._max:
            self.skipped += 1
            return
        generated = None
        if self._token_exact and ended.keepable:  # this turn's prompt and output, copied in C
            generated = array(TYPECODE, ended.prepared.engine.token_ids)
            generated.extend(ended.state.output_ids)
        task = asyncio.get_running_loop().create_task(
            self._prefill(ended, ended.route.replica_id, turn, generated)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prefill(self, ended: TurnEnded, replica: str, turn: Turn, generated: array | None) -> None:
        assert self._path is not None and ended.prepared is not None
        request, engine = ended.request, ended.prepared.engine
        try:
            if generated is not None:
                ids = generated
            else:
                conv = next_turn_prefix(request.conversation, turn)
                ids = await self._path.preprocessor.render_tokens.remote(
                    conv, dict(request.template_kwargs), False, None, engine.model
                )
            spec = prefill_request(
                engine.request_id, engine.model, ids, self._block_size[ended.model], request.hints, engine.adapter,
                engine.cache_salt, engine.images,
            )
            await self._path.prefill(request, ended.model, spec, replica)
        except Exception:
            logger.warning("speculative prefill after %s failed", engine.request_id, exc_info=True)

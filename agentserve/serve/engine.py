"""Engine replica deployment: one engine per replica, tokens streamed back in one Ray hop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator

from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle

from agentserve.config import ServeArgs
from agentserve.engines import make_engine
from agentserve.protocol import EngineDelta, PreprocessedRequest, RouteDecision

logger = logging.getLogger("ray.serve")

HEARTBEAT_S = 2.0


def merge(deltas: list[EngineDelta]) -> EngineDelta:
    """Coalesce deltas that queued up while the previous chunk was in flight."""
    if len(deltas) == 1:
        return deltas[0]
    first, last = deltas[0], deltas[-1]
    return EngineDelta(
        token_ids=[t for d in deltas for t in d.token_ids],
        finish_reason=last.finish_reason,
        num_cached_tokens=first.num_cached_tokens,
        prompt_tokens=first.prompt_tokens,
        error=last.error,
    )


@serve.deployment(
    name="Engine",
    max_ongoing_requests=1024,  # the engine's scheduler is the real queue
    request_router_config=RequestRouterConfig(
        request_router_class="agentserve.serve.replica_router:PinnedReplicaRouter"
    ),
    health_check_period_s=10,
    graceful_shutdown_timeout_s=30,
)
class EngineReplica:
    async def __init__(self, args: dict[str, Any], router: DeploymentHandle) -> None:
        self._args = ServeArgs.from_any(args)
        self._engine = make_engine(self._args, self._args.model.resolve_path())
        await self._engine.start()
        self._replica_id = serve.get_replica_context().replica_id.unique_id
        self._router = router
        await self._router.heartbeat.remote(self._replica_id)
        self._heartbeat = asyncio.create_task(self._report_forever())
        logger.info("engine replica %s ready (%s)", self._replica_id, self._args.engine.kind)

    async def _report_forever(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self._router.heartbeat.remote(self._replica_id)
            except Exception:  # the router restarting must not kill the engine
                logger.warning("router heartbeat failed", exc_info=True)

    async def generate(
        self, request: PreprocessedRequest, route: RouteDecision | None = None
    ) -> AsyncIterator[EngineDelta]:
        queue: asyncio.Queue[EngineDelta | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for delta in self._engine.generate(request):
                    queue.put_nowait(delta)
            except Exception as exc:
                logger.exception("engine failed on %s", request.request_id)
                queue.put_nowait(EngineDelta(token_ids=[], finish_reason="error", error=str(exc)))
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(pump())
        try:
            ended = False
            while not ended:
                item = await queue.get()
                if item is None:
                    return
                batch = [item]
                while self._args.coalesce_stream and not queue.empty():
                    nxt = queue.get_nowait()
                    if nxt is None:
                        ended = True
                        break
                    batch.append(nxt)
                yield merge(batch)
                ended = ended or batch[-1].finish_reason is not None
        finally:
            task.cancel()  # the consumer went away: cancelling the engine stream aborts it

    def replica_id(self) -> str:
        return self._replica_id

    def stats(self) -> dict[str, Any]:
        s = self._engine.stats()
        return {
            "replica_id": self._replica_id,
            "active": s.active,
            "started": s.started,
            "aborted": s.aborted,
            "cached_blocks": s.cached_blocks,
        }

    async def __del__(self) -> None:
        self._heartbeat.cancel()
        await self._engine.shutdown()

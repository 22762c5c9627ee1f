"""Warm start: a new engine replica prefills the sessions that were live before it, then takes traffic.

A restart, a redeploy or a scale-up begins with an empty prefix cache, so the next turn of every live session would
re-prefill its whole history. The state backend already holds each session's turns as the engine generated them
(state/kept_turns.py) and, per session, its latest one (`SessionHead`): the prompt that turn followed, rebuilt from
its links, plus its output is exactly the prefix the session's next turn extends. The replica prefills those, the
most recent sessions first, each in its own cache partition (`cache_salt`) and under its own adapter, so nothing one
caller sent becomes reachable by another; within a share of its KV cache and a time bound (ServeArgs.warm_start),
and before it registers with the Router (the Router replays the replica's KV events from the start when it joins,
so it learns the warmed blocks). During a rolling upgrade the old replicas serve meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from array import array
from dataclasses import dataclass
from typing import Collection

from agentserve import metrics
from agentserve.config import WarmStartSpec
from agentserve.engines.base import Engine
from agentserve.preprocess.incremental import rebuild
from agentserve.protocol import EngineRequest, SamplingParams
from agentserve.state.kept_turns import KeptTurn, KeptTurnStore, SessionHead

logger = logging.getLogger("ray.serve")


@dataclass(frozen=True, slots=True)
class WarmPrompt:
    token_ids: array  # the session's latest prompt and output
    cache_salt: str | None
    adapter: str | None


@dataclass(frozen=True, slots=True)
class WarmReport:
    sessions: int  # heads the plan found and rebuilt within the bounds
    warmed: int  # prompts prefilled to the end
    tokens: int  # prompt tokens sent (warmed ones)
    cached: int  # of those, already cached when sent (shared prefixes, e.g. one harness's system prompt)
    seconds: float
    cut: bool  # the time bound ended it with prompts left


def choose(
    heads: list[SessionHead], *, token_budget: int | None, context_window: int, adapters: Collection[str]
) -> list[SessionHead]:
    """The heads to warm, in order: those that fit the window and an adapter this replica serves, while their
    tokens (counted whole, shared prefixes too) stay within the budget."""
    chosen, used = [], 0
    for h in heads:
        if h.tokens >= context_window or (h.adapter is not None and h.adapter not in adapters):
            continue
        if token_budget is not None and used + h.tokens > token_budget:
            continue
        chosen.append(h)
        used += h.tokens
    return chosen


def prompts_of(store: KeptTurnStore, heads: list[SessionHead]) -> list[WarmPrompt]:
    """Each head's prompt and output, rebuilt from its kept turns' links; one read per link depth for all heads
    together. A head whose chain is incomplete (a turn evicted, the database unreachable) is left out. Blocking."""
    links: dict[str, KeptTurn] = {}
    want = {h.turn for h in heads}
    while want:
        got = store.get_many(sorted(want))
        links.update(got)
        want = {k.base for k in got.values() if k.base and k.base not in links}
    out = []
    for h in heads:
        last = links.get(h.turn)
        ids = rebuild(last, links) if last is not None else None
        if ids is None:
            continue
        ids.extend(last.output_ids)  # type: ignore[union-attr]
        out.append(WarmPrompt(ids, h.cache_salt, h.adapter))
    return out


async def prefill(engine: Engine, model: str, prompts: list[WarmPrompt], max_seconds: float) -> WarmReport:
    """Prefill `prompts` one after the other (the hottest first) until the time bound; one output token each.
    The prompt running at the bound is aborted: the blocks it computed stay in the engine's cache."""
    t0 = time.perf_counter()
    warmed = tokens = cached = 0
    cut = False
    for p in prompts:
        left = max_seconds - (time.perf_counter() - t0)
        if left <= 0:
            cut = True
            break
        request = EngineRequest.model_construct(
            request_id=f"warm-{uuid.uuid4().hex}", model=model, token_ids=p.token_ids,
            sampling=SamplingParams(temperature=0.0, max_tokens=1), max_tokens=1, adapter=p.adapter,
            cache_salt=p.cache_salt, priority=0, reasoning_started=False, structural_tag=None, match_text="",
        )  # fmt: skip
        seen = 0
        error = None
        try:
            async with asyncio.timeout(left):
                async for delta in engine.generate(request):
                    seen = max(seen, delta.num_cached_tokens or 0)
                    error = error or delta.error
        except TimeoutError:
            cut = True
            break
        if error is not None:
            logger.warning("warm start: a prompt of %d tokens failed: %s", len(p.token_ids), error)
            continue
        warmed += 1
        tokens += len(p.token_ids)
        cached += seen
    report = WarmReport(len(prompts), warmed, tokens, cached, time.perf_counter() - t0, cut)
    metrics.WARM_START_TOKENS.labels(model, "prefilled").inc(tokens - cached)
    metrics.WARM_START_TOKENS.labels(model, "cached").inc(cached)
    metrics.WARM_START_SESSIONS.labels(model, "warmed").inc(warmed)
    metrics.WARM_START_SESSIONS.labels(model, "left").inc(len(prompts) - warmed)
    return report


async def warm_start(
    engine: Engine, model: str, spec: WarmStartSpec, store: KeptTurnStore, *, context_window: int,
    adapters: Collection[str],
) -> WarmReport:
    """Plan from the state backend (on a thread: blocking reads) and prefill."""
    capacity = engine.kv_capacity_tokens()
    budget = None if capacity is None else int(capacity * spec.max_kv_share)

    def plan() -> list[WarmPrompt]:
        heads = store.heads(model, spec.max_sessions)
        return prompts_of(store, choose(heads, token_budget=budget, context_window=context_window, adapters=adapters))

    t0 = time.perf_counter()
    prompts = await asyncio.to_thread(plan)
    planned_s = time.perf_counter() - t0
    report = await prefill(engine, model, prompts, max(0.0, spec.max_seconds - planned_s))
    logger.info(
        "warm start of %s: %d of %d sessions prefilled (%d tokens, %d of them already cached) in %.1f s after "
        "%.2f s planning%s", model, report.warmed, report.sessions, report.tokens, report.cached, report.seconds,
        planned_s, "; the time bound cut it" if report.cut else "",
    )  # fmt: skip
    return report

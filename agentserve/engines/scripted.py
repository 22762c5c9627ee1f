"""A deterministic engine for protocol tests and scale benchmarks.

It replays scripted raw model output through the real tokenizer, token by token, and models a
block prefix cache (LRU over chained block hashes, prefill cost per uncached token) so that
`num_cached_tokens` behaves as vLLM reports it. It stands in for the engine only.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from pathlib import Path
from typing import AsyncIterator

from agentserve.config import EngineSpec, ScriptedCache, ScriptRule
from agentserve.engines.base import EngineStats
from agentserve.kv_events.format import BlockRemoved, BlockStored
from agentserve.kv_events.publisher import KvEventPublisher
from agentserve.protocol import EngineDelta, PreprocessedRequest


def load_rules(spec: EngineSpec) -> tuple[ScriptRule, ...]:
    if spec.rules:
        return spec.rules
    assert spec.script is not None
    raw = json.loads(Path(spec.script).expanduser().read_text())
    return tuple(ScriptRule.model_validate(r) for r in raw)


class BlockCache:
    """LRU set of prefix blocks, keyed by chained block hash."""

    def __init__(self, capacity_blocks: int) -> None:
        self._capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def hit_blocks(self, block_hashes: list[int], usable: int) -> int:
        hits = 0
        for h in block_hashes[:usable]:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            hits += 1
        return hits

    def store(self, block_hashes: list[int]) -> tuple[list[int], list[int]]:
        """Store a prompt's blocks; returns (positions newly stored, hashes evicted).

        Blocks are touched tail-first so the head of a prefix stays most recent: like vLLM, which
        frees a finished request's blocks in reverse, eviction takes a prompt's tail before its head.
        """
        new: list[int] = []
        for i in range(len(block_hashes) - 1, -1, -1):
            h = block_hashes[i]
            if h not in self._blocks:
                new.append(i)
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        evicted = []
        while len(self._blocks) > self._capacity:
            evicted.append(self._blocks.popitem(last=False)[0])
        return sorted(new), evicted


class ScriptedEngine:
    def __init__(
        self,
        rules: tuple[ScriptRule, ...],
        encode,
        eos_token_id: int | None,
        block_size: int,
        cache: ScriptedCache,
        publisher: "KvEventPublisher | None" = None,
    ) -> None:
        self._rules = rules
        self._encode = encode
        self._eos = eos_token_id
        self._block_size = block_size
        self._cache_spec = cache
        self._cache = BlockCache(cache.capacity_blocks)
        self._active = 0
        self._started = 0
        self._aborted = 0
        self._replies: dict[str, list[int]] = {}
        self._publisher = publisher  # KV events in vLLM's wire format, for the router's prefix index

    @classmethod
    def from_spec(cls, spec: EngineSpec, model_path: Path) -> "ScriptedEngine":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_path))
        return cls(
            load_rules(spec),
            lambda text: tok.encode(text, add_special_tokens=False),
            tok.eos_token_id,
            spec.block_size,
            spec.cache,
            KvEventPublisher() if spec.kv_events else None,
        )

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def kv_event_ports(self) -> tuple[int, int] | None:
        """(publish port, replay port) bound on all interfaces, or None without KV events."""
        p = self._publisher
        return (p.port, p.replay_port) if p is not None else None

    def _publish_store(self, request: PreprocessedRequest) -> None:
        new, evicted = self._cache.store(request.block_hashes)
        if self._publisher is None:
            return
        events: list = []
        if evicted:
            events.append(BlockRemoved(block_hashes=evicted, medium="GPU"))
        hashes, bs = request.block_hashes, self._block_size
        run: list[int] = []
        for i in new + [-1]:  # contiguous runs of new blocks, each chained to its parent
            if run and (i != run[-1] + 1):
                a, b = run[0], run[-1] + 1
                events.append(
                    BlockStored(
                        block_hashes=hashes[a:b],
                        parent_block_hash=hashes[a - 1] if a > 0 else None,
                        token_ids=request.token_ids[a * bs : b * bs],
                        block_size=bs,
                        lora_id=None,
                        medium="GPU",
                        lora_name=None,
                    )
                )
                run = []
            if i >= 0:
                run.append(i)
        self._publisher.publish(events)

    def stats(self) -> EngineStats:
        return EngineStats(self._active, self._started, self._aborted, len(self._cache))

    def _reply_tokens(self, match_text: str) -> tuple[list[int], float]:
        for rule in self._rules:
            if rule.match in match_text:
                ids = self._replies.get(rule.reply)
                if ids is None:
                    ids = self._encode(rule.reply)
                    self._replies[rule.reply] = ids
                return ids, rule.itl_ms
        return [], 0.0

    async def generate(self, request: PreprocessedRequest) -> AsyncIterator[EngineDelta]:
        self._active += 1
        self._started += 1
        finished = False
        try:
            # vLLM always recomputes at least the last prompt token.
            usable = max(0, (request.prompt_tokens - 1) // self._block_size)
            cached_blocks = self._cache.hit_blocks(request.block_hashes, usable)
            cached = cached_blocks * self._block_size
            prefill_ms = (request.prompt_tokens - cached) * self._cache_spec.prefill_ms_per_token
            if prefill_ms > 0:
                await asyncio.sleep(prefill_ms / 1000)
            self._publish_store(request)

            reply, itl_ms = self._reply_tokens(request.match_text)
            ids = list(reply)
            if self._eos is not None and not request.sampling.ignore_eos:
                ids.append(self._eos)
            limit = request.max_tokens
            first = True
            for i, tok in enumerate(ids[:limit]):
                if not first and itl_ms > 0:
                    await asyncio.sleep(itl_ms / 1000)
                last = i == min(len(ids), limit) - 1
                reason = None
                if last:
                    reason = "stop" if i == len(ids) - 1 else "length"
                yield EngineDelta(
                    token_ids=[tok],
                    finish_reason=reason,
                    num_cached_tokens=cached if first else None,
                    prompt_tokens=request.prompt_tokens if first else None,
                )
                first = False
            if first:  # max_tokens == 0 or an empty script
                yield EngineDelta(
                    token_ids=[],
                    finish_reason="length" if ids else "stop",
                    num_cached_tokens=cached,
                    prompt_tokens=request.prompt_tokens,
                )
            finished = True
        finally:
            self._active -= 1
            if not finished:
                self._aborted += 1

"""The scripted engine's model of vLLM's prefix cache: what is cached, when, and the KV events saying so.

What it copies from vLLM v1 (`vllm/v1/core/kv_cache_manager.py`, `block_pool.py`, 0.32):

* A new request's cache hit is its leading full blocks, looked up over at most `prompt_len - 1` tokens:
  the last prompt token is always recomputed for its logits. `num_cached_tokens` is that hit.
* Every step caches the full blocks its computed tokens fill, prompt and generated tokens alike
  (`cache_blocks(request, num_computed + num_new)`), and reports them as one `BlockStored` chained to
  the block before. The last sampled token is never fed back, so a finished request has cached the
  full blocks of `prompt + output[:-1]`: an agent's next turn, which replays the output, hits them.
* A finished or aborted request frees its blocks tail-first, so eviction takes a sequence's tail
  before its head.

Block hashes are the preprocessor's chain (`kv_events/block_hash.py`), so a later prompt's
`block_hashes` find the blocks a generation stored. Under a LoRA adapter the chain starts at the adapter's root, as
vLLM keys blocks by their LoRA, and the KV events carry the adapter as vLLM's do (`lora_name`, `lora_id`, and the
name as each block's extra key): a prefix cached under one adapter is never a hit for another or the base model.
A request's `cache_salt` keys its first block, as vLLM's does (`generate_block_hash_extra_keys`: the salt only where
the block starts at token 0), so every block chained from it differs: here the chain starts at the salt's root, and
the first block's extra keys carry the salt after the LoRA name, as vLLM publishes them (`to_event_extra_keys`).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import Callable, Sequence

from agentserve.protocol.token_ids import packed

from agentserve.kv_events.format import BlockRemoved, BlockStored, KvEvent
from agentserve.kv_events.block_hash import chain_digests, digest_value, root

Publish = Callable[[list[KvEvent]], None]


class BlockCache:
    """LRU of full blocks: block hash -> its chain digest (what the next block's hash continues from)."""

    def __init__(self, capacity_blocks: int) -> None:
        self._capacity = capacity_blocks
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def hit_blocks(self, block_hashes: Sequence[int], usable: int) -> int:
        hits = 0
        for h in block_hashes[:usable]:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            hits += 1
        return hits

    def digest(self, block_hash: int) -> bytes:
        return self._blocks[block_hash]

    def store(self, block_hashes: Sequence[int], digests: Sequence[bytes]) -> tuple[list[int], list[int]]:
        """Store blocks, touched tail-first; returns (positions newly stored, hashes evicted)."""
        new: list[int] = []
        for i in range(len(block_hashes) - 1, -1, -1):
            h = block_hashes[i]
            if h not in self._blocks:
                new.append(i)
                self._blocks[h] = digests[i]
            self._blocks.move_to_end(h)
        evicted = []
        while len(self._blocks) > self._capacity:
            evicted.append(self._blocks.popitem(last=False)[0])
        new.reverse()
        return new, evicted

    def touch_tail_first(self, block_hashes: Sequence[int]) -> None:
        for h in reversed(block_hashes):
            if h in self._blocks:
                self._blocks.move_to_end(h)


class PrefixCache:
    """The engine-wide cache; `admit` starts one request's life in it."""

    def __init__(self, capacity_blocks: int, block_size: int, publish: Publish | None = None) -> None:
        self.blocks = BlockCache(capacity_blocks)
        self.block_size = block_size
        self._publish = publish

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def publishing(self) -> bool:
        return self._publish is not None

    def admit(
        self,
        prompt: Sequence[int],
        prompt_hashes: Sequence[int],
        output: list[int],
        lora: tuple[str, int] | None = None,
        salt: str | None = None,
    ) -> "CachedRequest":
        """Look the prompt up (full blocks, at most prompt_len - 1 tokens). `output` is what the request
        will generate (a scripted engine knows it up front); its blocks enter the cache as they are computed.
        `lora`: (adapter id, its int id) when a LoRA adapter serves the request; `salt`: its cache partition;
        `prompt_hashes` are then seeded by both (the preprocessor's `block_hashes(..., adapter, salt)`)."""
        usable = max(0, (len(prompt) - 1) // self.block_size)
        hit = self.blocks.hit_blocks(prompt_hashes, usable)
        parent = self.blocks.digest(prompt_hashes[hit - 1]) if hit else root(lora[0] if lora else None, salt)
        return CachedRequest(self, packed(prompt), output, list(prompt_hashes[:hit]), parent, lora, salt or None)

    def emit(self, events: list[KvEvent]) -> None:
        if self._publish is not None and events:
            self._publish(events)


class CachedRequest:
    """One request's token sequence as the KV cache sees it: full blocks cached once computed."""

    def __init__(
        self,
        cache: PrefixCache,
        prompt: array,
        output: list[int],
        hit: list[int],
        parent: bytes,
        lora: tuple[str, int] | None = None,
        salt: str | None = None,
    ) -> None:
        self._cache = cache
        self._lora = lora
        self._salt = salt
        self._prompt = prompt
        self._output = output
        self._hashes = hit  # chained hashes of the full blocks computed so far
        self._last = parent  # chain digest of the last of them
        self.cached_tokens = len(hit) * cache.block_size  # vLLM's num_cached_tokens

    def _tokens(self, start: int, end: int) -> list[int]:
        p = len(self._prompt)
        return self._prompt[start : min(end, p)].tolist() + self._output[max(0, start - p) : max(0, end - p)]

    def compute(self, num_tokens: int) -> None:
        """The first `num_tokens` of prompt + output now have KV: cache and publish the blocks they fill.

        Call with the prompt length after prefill, then with `prompt_len + i` in the step that
        samples output token i (that step computes token i - 1)."""
        bs = self._cache.block_size
        start, end = len(self._hashes), min(num_tokens, len(self._prompt) + len(self._output)) // bs
        if end <= start:
            return
        digests = chain_digests(self._tokens(start * bs, end * bs), bs, self._last)
        hashes = [digest_value(d) for d in digests]
        self._hashes.extend(hashes)
        self._last = digests[-1]
        new, evicted = self._cache.blocks.store(hashes, digests)
        if not self._cache.publishing:
            return
        events: list[KvEvent] = []
        if evicted:
            events.append(BlockRemoved(block_hashes=evicted, medium="GPU"))
        events.extend(self._stored_runs([start + i for i in new]))
        self._cache.emit(events)

    def _stored_runs(self, positions: list[int]) -> list[KvEvent]:
        """One BlockStored per contiguous run of new blocks, chained to the block before it."""
        bs, out = self._cache.block_size, []
        run: list[int] = []
        for i in [*positions, -1]:
            if run and i != run[-1] + 1:
                a, b = run[0], run[-1] + 1
                name, lora_id = self._lora if self._lora else (None, None)
                out.append(
                    BlockStored(
                        block_hashes=self._hashes[a:b],
                        parent_block_hash=self._hashes[a - 1] if a > 0 else None,
                        token_ids=self._tokens(a * bs, b * bs),
                        block_size=bs,
                        lora_id=lora_id,
                        medium="GPU",
                        lora_name=name,
                        extra_keys=self._extra_keys(a, b),
                    )
                )
                run = []
            if i >= 0:
                run.append(i)
        return out

    def _extra_keys(self, a: int, b: int) -> list | None:
        """Blocks a..b-1's extra keys as vLLM publishes them: the LoRA name on each, the salt on block 0 only."""
        name = self._lora[0] if self._lora else None
        keys = [[*([name] if name is not None else []), *([self._salt] if i == 0 and self._salt else [])] for i in range(a, b)]
        return [k or None for k in keys] if any(keys) else None

    def free(self) -> None:
        """The request ended (finished or aborted): its blocks stay cached, the tail first in line for eviction."""
        self._cache.blocks.touch_tail_first(self._hashes)


class PromptHashes:
    """A prompt's block hashes, those of a recent prompt it extends not computed again.

    A real engine's block hashing is its own cost; this double's stands for none, and an agent session's next prompt
    is its previous prompt plus a little: the hashes of the longest recent prompt (same adapter and salt) that the
    new one starts with, checked by comparing the ids themselves (a memcmp-speed array comparison, ~0.07 ms at 187K
    ids, where a digest of them cost ~0.7), are kept, and only the blocks after it are hashed.
    """

    def __init__(self, block_size: int, max_blocks: int = 256 * 1024, tries: int = 2) -> None:
        self._bs = block_size
        self._max = max_blocks  # ~160 bytes a block held (ids, digest, hash value, list slots): ~40 MiB
        self._tries = tries
        # (adapter, salt, n) -> a recent prompt: its ids, its blocks' chain digests and hashes
        self._recent: OrderedDict[tuple[str | None, str | None, int], tuple[array, list[bytes], list[int]]] = (
            OrderedDict()
        )
        self._n = 0
        self._held = 0  # blocks held over all entries

    def hashes(self, ids: Sequence[int], adapter: str | None, salt: str | None) -> list[int]:
        prompt = packed(ids)
        blocks: list[bytes] = []
        values: list[int] = []
        tried = 0
        for key in reversed(self._recent):
            if key[:2] != (adapter, salt):
                continue
            known_ids, known, known_values = self._recent[key]
            if len(known_ids) > len(prompt) or not known:
                continue
            tried += 1
            if prompt[: len(known_ids)] == known_ids:
                blocks, values = list(known), list(known_values)
                break
            if tried >= self._tries:
                break
        start = len(blocks) * self._bs
        rest = chain_digests(prompt[start:], self._bs, blocks[-1] if blocks else root(adapter, salt))
        blocks += rest
        values += [digest_value(d) for d in rest]
        self._n += 1
        if len(blocks) <= self._max:
            self._recent[(adapter, salt, self._n)] = (prompt, blocks, values)  # packed ids are never mutated
            self._held += len(blocks)
        while self._held > self._max:
            _, (_, dropped, _) = self._recent.popitem(last=False)
            self._held -= len(dropped)
        return values

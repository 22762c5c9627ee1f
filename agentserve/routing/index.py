"""Which replica holds which prefix blocks, keyed by the preprocessor's chained block hashes.

One global map `block hash -> bitmask of replicas` answers "how many leading blocks of this prompt
does each replica hold" in one walk over the prompt's blocks, whatever the replica count (the same
idea as Dynamo's positional indexer). Engines report their own block hashes (vLLM: sha256 of its own
chain); `EventIndex` re-keys them by recomputing our hash from the tokens each event carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentserve.kv_events.format import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent
from agentserve.kv_events.block_hash import chain_digests, digest_value, root


class PrefixIndex:
    """Per-replica sets of block hashes with a shared bitmask map for fast prefix matching."""

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self._holders: dict[int, int] = {}  # block hash -> bitmask of replica slots
        self._blocks: dict[str, dict[int, int]] = {}  # replica -> block hash -> refcount

    def replicas(self) -> list[str]:
        return list(self._slot)

    def add_replica(self, replica: str) -> None:
        if replica in self._slot:
            return
        self._slot[replica] = self._free.pop() if self._free else len(self._slot)
        self._blocks[replica] = {}

    def remove_replica(self, replica: str) -> None:
        if replica not in self._slot:
            return
        self.clear(replica)
        self._free.append(self._slot.pop(replica))
        del self._blocks[replica]

    def clear(self, replica: str) -> None:
        bit = 1 << self._slot[replica]
        for h in self._blocks[replica]:
            self._drop_bit(h, bit)
        self._blocks[replica] = {}

    def size(self, replica: str) -> int:
        return len(self._blocks.get(replica, ()))

    def add(self, replica: str, hashes: list[int]) -> None:
        if replica not in self._slot:
            return
        bit, mine = 1 << self._slot[replica], self._blocks[replica]
        for h in hashes:
            n = mine.get(h, 0)
            mine[h] = n + 1
            if n == 0:
                self._holders[h] = self._holders.get(h, 0) | bit

    def remove(self, replica: str, hashes: list[int]) -> None:
        mine = self._blocks.get(replica)
        if mine is None:
            return
        bit = 1 << self._slot[replica]
        for h in hashes:
            n = mine.get(h, 0)
            if n > 1:
                mine[h] = n - 1
            elif n == 1:
                del mine[h]
                self._drop_bit(h, bit)

    def _drop_bit(self, h: int, bit: int) -> None:
        rest = self._holders.get(h, 0) & ~bit
        if rest:
            self._holders[h] = rest
        else:
            self._holders.pop(h, None)

    def overlaps(self, hashes: list[int]) -> dict[str, int]:
        """Leading blocks of `hashes` each replica holds (replicas with none are left out)."""
        depth: dict[int, int] = {}
        alive = 0
        for s in self._slot.values():
            alive |= 1 << s
        mask = alive
        for i, h in enumerate(hashes):
            nxt = mask & self._holders.get(h, 0)
            gone = mask & ~nxt
            while gone:
                low = gone & -gone
                depth[low.bit_length() - 1] = i
                gone ^= low
            mask = nxt
            if not mask:
                break
        while mask:
            low = mask & -mask
            depth[low.bit_length() - 1] = len(hashes)
            mask ^= low
        by_slot = {s: r for r, s in self._slot.items()}
        return {by_slot[s]: d for s, d in depth.items() if d > 0}


@dataclass
class _Mapping:
    """Engine hash -> (our hash, our chain digest) for one replica."""

    blocks: dict[object, tuple[int, bytes]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApplyStats:
    stored: int = 0
    removed: int = 0
    skipped: int = 0  # blocks we could not key (unknown parent, partial block, extra keys, other group)


class EventIndex:
    """A PrefixIndex fed by engine KV events.

    Why re-key instead of sharing vLLM's hash: vLLM's hash depends on its algorithm, seed and version;
    the tokens in each `BlockStored` do not. A LoRA name (every block's extra key) and a cache salt (the
    first block's, after the LoRA name) seed the chain's root as the preprocessor's do. Blocks with other
    extra keys (multimodal) or outside KV group 0, partial blocks, and blocks whose parent we never saw are
    not indexed: the index may miss a block but never claims one a replica cannot reuse for a text prompt.
    """

    def __init__(self, block_size: int, index: PrefixIndex | None = None) -> None:
        self.block_size = block_size
        self.index = index or PrefixIndex()
        self._maps: dict[str, _Mapping] = {}

    def add_replica(self, replica: str) -> None:
        self.index.add_replica(replica)
        self._maps.setdefault(replica, _Mapping())

    def remove_replica(self, replica: str) -> None:
        self.index.remove_replica(replica)
        self._maps.pop(replica, None)

    def clear(self, replica: str) -> None:
        if replica in self._maps:
            self.index.clear(replica)
            self._maps[replica] = _Mapping()

    def apply(self, replica: str, events: list[KvEvent]) -> ApplyStats:
        m = self._maps.get(replica)
        if m is None:
            return ApplyStats()
        stored = removed = skipped = 0
        for ev in events:
            if isinstance(ev, BlockStored):
                n, s = self._stored(replica, m, ev)
                stored, skipped = stored + n, skipped + s
            elif isinstance(ev, BlockRemoved):
                gone = [m.blocks.pop(h)[0] for h in ev.block_hashes if h in m.blocks]
                self.index.remove(replica, gone)
                removed += len(gone)
            elif isinstance(ev, AllBlocksCleared):
                self.clear(replica)
                m = self._maps[replica]
        return ApplyStats(stored, removed, skipped)

    def _stored(self, replica: str, m: _Mapping, ev: BlockStored) -> tuple[int, int]:
        """Re-key a stored run by its tokens (chained from its parent); runs with extra keys other than their
        LoRA's name and a first block's cache salt (multimodal inputs) have no preprocessor hash and are skipped."""
        bs = self.block_size
        n = len(ev.block_hashes)
        salt, rest = _first_block_salt(ev.extra_keys, ev.lora_name) if ev.parent_block_hash is None else (None, ev.extra_keys)
        usable = (
            ev.block_size == bs
            and len(ev.token_ids) == n * bs
            and (ev.group_idx or 0) == 0
            and salt is not _UNKEYED
            and _only_lora_keys(rest, ev.lora_name)
        )
        if not usable:
            return 0, n
        if ev.parent_block_hash is None:
            # A LoRA adapter's or a salted prompt's blocks chain from their own root, as the preprocessor's do.
            parent = root(ev.lora_name, salt)  # type: ignore[arg-type]
        elif ev.parent_block_hash in m.blocks:
            parent = m.blocks[ev.parent_block_hash][1]
        else:
            usable = False
        if not usable:
            return 0, n
        digests = chain_digests(ev.token_ids, bs, parent)
        new: list[int] = []
        for ext, d in zip(ev.block_hashes, digests):
            if ext not in m.blocks:  # vLLM re-reports cache hits as stores; count each block once
                ours = digest_value(d)
                m.blocks[ext] = (ours, d)
                new.append(ours)
        self.index.add(replica, new)
        return len(new), 0


_UNKEYED = object()  # a first block whose extra keys name something the preprocessor does not hash by


def _first_block_salt(extra_keys: list | None, lora_name: str | None) -> tuple[object, list | None]:
    """(the cache salt among the first block's extra keys, or None; the other blocks' keys). vLLM publishes a
    block's keys untagged, in order: the LoRA name, multimodal pairs, the salt (on block 0 only)."""
    if not extra_keys:
        return None, extra_keys
    first = list(extra_keys[0] or ())
    if lora_name is not None and first[:1] == [lora_name]:
        first = first[1:]
    if not first:
        return None, extra_keys[1:]
    if len(first) == 1 and isinstance(first[0], str):
        return first[0], extra_keys[1:]
    return _UNKEYED, extra_keys[1:]


def _only_lora_keys(extra_keys: list | None, lora_name: str | None) -> bool:
    """Each block's extra keys are none, or only the LoRA's name (what vLLM publishes for a LoRA request)."""
    allowed = ((), (lora_name,)) if lora_name is not None else ((),)
    return all(tuple(k or ()) in allowed for k in extra_keys or ())

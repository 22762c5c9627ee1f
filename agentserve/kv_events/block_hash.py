"""Chained hashes of full prefix blocks: the key the router and prefix caches agree on."""

from __future__ import annotations

import hashlib
from array import array

_SEED = b"agentserve-block-v1"
ROOT = hashlib.blake2b(_SEED, digest_size=8).digest()


def root(adapter: str | None = None) -> bytes:
    """Where a prompt's chain starts: the base model's ROOT, or a root seeded by the LoRA adapter's id.

    vLLM keys a block by its LoRA as well as its tokens (a block's KV differs per adapter), so the same
    tokens under two adapters must never share a hash here either.
    """
    if adapter is None:
        return ROOT
    return hashlib.blake2b(_SEED + b"\x00lora\x00" + adapter.encode(), digest_size=8).digest()


def chain_digests(token_ids: list[int], block_size: int, parent: bytes = ROOT) -> list[bytes]:
    """Digests of the full blocks of `token_ids`, continuing the chain after `parent`.

    The router re-keys an engine's KV events with it: an event carries its blocks' tokens and its
    parent, so any engine hash algorithm maps onto the preprocessor's hashes.
    """
    out: list[bytes] = []
    full = len(token_ids) - len(token_ids) % block_size
    for start in range(0, full, block_size):
        block = array("I", token_ids[start : start + block_size]).tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=8).digest()
        out.append(parent)
    return out


def digest_value(digest: bytes) -> int:
    return int.from_bytes(digest, "big", signed=False) >> 1  # fits int64


def block_hashes(token_ids: list[int], block_size: int, adapter: str | None = None) -> list[int]:
    """Hash of block i covers tokens [0, (i+1)*block_size) under `adapter` (None: the base model): equal hashes
    mean equal prefixes under the same weights."""
    return [digest_value(d) for d in chain_digests(token_ids, block_size, root(adapter))]

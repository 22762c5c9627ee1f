"""Chained hashes of full prefix blocks: the key the router and prefix caches agree on."""

from __future__ import annotations

import hashlib
from typing import Sequence

from agentserve.protocol.token_ids import packed

_SEED = b"agentserve-block-v1"
ROOT = hashlib.blake2b(_SEED, digest_size=8).digest()


def root(adapter: str | None = None, salt: str | None = None) -> bytes:
    """Where a prompt's chain starts: the base model's ROOT, or a root seeded by the LoRA adapter's id and/or the
    request's cache salt.

    vLLM keys a block by its LoRA as well as its tokens (a block's KV differs per adapter), and keys a prompt's
    first block by its `cache_salt` (so every later block, chained from it, differs too): the same tokens under
    two adapters or two salts must never share a hash here either. Seeding the root is the same partition.
    """
    if adapter is None and not salt:
        return ROOT
    seed = _SEED
    if adapter is not None:
        seed += b"\x00lora\x00" + adapter.encode()
    if salt:
        seed += b"\x00salt\x00" + salt.encode()
    return hashlib.blake2b(seed, digest_size=8).digest()


def chain_digests(token_ids: Sequence[int], block_size: int, parent: bytes = ROOT) -> list[bytes]:
    """Digests of the full blocks of `token_ids`, continuing the chain after `parent`.

    The router re-keys an engine's KV events with it: an event carries its blocks' tokens and its
    parent, so any engine hash algorithm maps onto the preprocessor's hashes.
    """
    out: list[bytes] = []
    full = len(token_ids) - len(token_ids) % block_size
    for start in range(0, full, block_size):
        block = packed(token_ids[start : start + block_size]).tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=8).digest()
        out.append(parent)
    return out


def digest_value(digest: bytes) -> int:
    return int.from_bytes(digest, "big", signed=False) >> 1  # fits int64


def block_hashes(
    token_ids: Sequence[int], block_size: int, adapter: str | None = None, salt: str | None = None
) -> list[int]:
    """Hash of block i covers tokens [0, (i+1)*block_size) under `adapter` (None: the base model) and `salt` (None:
    the shared cache): equal hashes mean equal prefixes under the same weights and the same cache partition."""
    return [digest_value(d) for d in chain_digests(token_ids, block_size, root(adapter, salt))]


def cache_salt(scope: str) -> str:
    """A caller's prefix-cache partition, from its identity (`scope`, its API key's digest): a digest of it, never
    the identity itself, since vLLM publishes salts in its KV events. Hex: within vLLM's 128 characters and free of
    the characters it refuses in a salt."""
    return hashlib.blake2b(scope.encode(), digest_size=16, person=b"agentserve-salt").hexdigest()

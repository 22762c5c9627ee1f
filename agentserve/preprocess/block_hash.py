"""Chained hashes of full prefix blocks: the key the router and prefix caches agree on."""

from __future__ import annotations

import hashlib
from array import array

_SEED = b"agentserve-block-v1"


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """Hash of block i covers tokens [0, (i+1)*block_size): equal hashes mean equal prefixes."""
    out: list[int] = []
    parent = hashlib.blake2b(_SEED, digest_size=8).digest()
    full = len(token_ids) - len(token_ids) % block_size
    for start in range(0, full, block_size):
        block = array("I", token_ids[start : start + block_size]).tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=8).digest()
        out.append(int.from_bytes(parent, "big", signed=False) >> 1)  # fits int64
    return out

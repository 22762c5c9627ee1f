"""Salted chained block hashes for request traces (traces/record.py `input_blocks` / `output_blocks`).

A record must show which blocks a request shares with earlier ones (what a replay needs to reproduce prefix
reuse) without letting anyone who reads it test a guess of the content: each block's hash is keyed by a trace salt,
and chained (a block's hash covers every token before it, as the engines' prefix-cache hashes do), so equal
hashes mean an equal prefix up to that block.

The salt is derived from the server's secret key (HMAC-SHA256 of a fixed label), so every Ingress replica of one
deployment hashes alike and traces from several replicas (or restarts) join; a deployment with another key (or a
rotated one) writes hashes that match nothing earlier. The chain's root covers the catalog model, the adapter and
the engine's cache partition (`cache_salt`), so equal hashes also mean a block the engine could share.

Token ids are hashed as the 4-byte ints of protocol/token_ids.py in the host's byte order (every supported host is
little-endian).
"""

from __future__ import annotations

import hashlib
import hmac
from array import array
from typing import Sequence

from agentserve.protocol.token_ids import TYPECODE, packed

SALT_LABEL = b"agentserve request trace block salt v1"
MASK_63 = (1 << 63) - 1
_ITEM = array(TYPECODE).itemsize


def trace_salt(secret_key: str) -> bytes:
    """The trace salt of a deployment whose secret key is `secret_key` (32 bytes)."""
    return hmac.new(secret_key.encode(), SALT_LABEL, hashlib.sha256).digest()


class BlockHasher:
    """Chained 63-bit block hashes under one salt."""

    def __init__(self, salt: bytes) -> None:
        if not salt:
            raise ValueError("a trace salt is required")
        self._key = hashlib.blake2b(salt, digest_size=32).digest()  # blake2b keys are at most 64 bytes

    def _h(self, data: bytes | memoryview) -> bytes:
        return hashlib.blake2b(data, digest_size=8, key=self._key).digest()

    def root(self, model: str, adapter: str | None, cache_salt: str | None) -> int:
        """The chain's start for a prompt of `model` under `adapter` in the engine's `cache_salt` partition."""
        label = "\x00".join((model, adapter or "", cache_salt or "")).encode()
        return int.from_bytes(self._h(b"root\x00" + label), "little") & MASK_63

    def chain(self, token_ids: Sequence[int], block_size: int, root: int, *, start: int = 0) -> list[int]:
        """The hashes of every full `block_size` block of `token_ids`, each chained on the one before (the first on
        `root`); those of blocks before index `start` are computed but not returned."""
        ids = packed(token_ids)
        view = memoryview(ids).cast("B")
        step = block_size * _ITEM
        prev = root
        out: list[int] = []
        for i in range(len(ids) // block_size):
            digest = self._h(prev.to_bytes(8, "little") + view[i * step : (i + 1) * step].tobytes())
            prev = int.from_bytes(digest, "little") & MASK_63
            if i >= start:
                out.append(prev)
        return out

    def request_blocks(
        self,
        prompt: Sequence[int],
        output: Sequence[int],
        block_size: int,
        *,
        model: str,
        adapter: str | None = None,
        cache_salt: str | None = None,
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(input_blocks, output_blocks) of one request: the prompt's full blocks, then the chain continued over
        prompt + output for the full blocks past the prompt's last full block (the block the prompt ends in is
        the first of them, once the output fills it), so a next prompt that extends prompt + output token for
        token starts with input_blocks + output_blocks."""
        root = self.root(model, adapter, cache_salt)
        n_in = len(prompt) // block_size
        if not output:
            return tuple(self.chain(prompt, block_size, root)), ()
        whole = array(TYPECODE, packed(prompt))
        whole.extend(packed(output))
        hashes = self.chain(whole, block_size, root)
        return tuple(hashes[:n_in]), tuple(hashes[n_in:])

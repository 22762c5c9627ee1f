"""The state backend interface: what the Responses store and per-key limits need from a shared database.

Every method is synchronous and blocking (callers on an event loop use a thread) and takes the caller's clock
reading `now` (seconds since the epoch), so expiry and refill are testable and the same in every backend.
Implementations are thread-safe: Ray runs sync deployment methods in a thread pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True, slots=True)
class StoreBounds:
    """Caps of a store: entry count, total body bytes, lifetime since last use; and per owner (None: the store's)."""

    max_entries: int
    max_bytes: int
    ttl_s: float
    max_entries_per_owner: int | None = None
    max_bytes_per_owner: int | None = None


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    granted: bool
    held: int  # live leases in the scope: after the grant, or the ones that caused the refusal


@dataclass(frozen=True, slots=True)
class TokenGrant:
    granted: bool
    retry_after_s: float  # 0 when granted; else until the bucket holds one token


class StateBackend(Protocol):
    # -- Responses store: opaque bodies scoped to an owner -----------------------------------------------
    def put_response(self, response_id: str, owner: str, body: bytes, now: float, bounds: StoreBounds) -> bool:
        """Store (or replace) a body; evict expired entries, then the owner's least recently used past its own
        quota, then past the store's caps the least recently used of the owner holding the most bytes.
        False when the body alone is larger than max_bytes (or the owner's byte quota)."""
        ...

    def get_response(self, response_id: str, owner: str, now: float, ttl_s: float) -> bytes | None:
        """The body if it exists, is unexpired and belongs to owner; reading refreshes recency and lifetime."""
        ...

    def delete_response(self, response_id: str, owner: str, now: float) -> bool: ...

    def response_stats(self, now: float) -> tuple[int, int]:
        """(live entries, their total bytes)."""
        ...

    # -- kept turns: a finished turn's generated token ids under its content key (preprocess/turn_digest.py) ---
    def put_kept_turns(self, rows: Sequence[tuple[str, bytes]], now: float, bounds: StoreBounds) -> int:
        """Store (or replace) a batch in one transaction, then evict expired entries and, past a bound, least
        recently used ones down to 90% of the bounds; rows larger than max_bytes are skipped. Returns rows stored."""
        ...

    def get_kept_turns(self, keys: Sequence[str], now: float) -> dict[str, bytes]:
        """The unexpired bodies of those keys that exist (a read: recency is refreshed by touch_kept_turns)."""
        ...

    def touch_kept_turns(self, keys: Sequence[str], now: float, ttl_s: float) -> None:
        """Mark keys as just used (recency and lifetime), in one transaction."""
        ...

    def kept_turn_stats(self, now: float) -> tuple[int, int]:
        """(live kept turns, their total bytes)."""
        ...

    # -- session heads: each session's latest kept turn, by model (serve/warm_start.py) ---------------------
    def put_session_heads(
        self, rows: Sequence[tuple[str, str, bytes]], now: float, max_entries: int, ttl_s: float
    ) -> None:
        """Store (or replace) (session, model, head) rows as the most recent, in one transaction; then drop expired
        rows and, past max_entries, the least recently written."""
        ...

    def session_heads(self, model: str, limit: int, now: float) -> list[bytes]:
        """The model's unexpired heads, the most recently written first."""
        ...

    # -- concurrency leases ------------------------------------------------------------------------------
    def acquire_lease(self, scope: str, lease_id: str, limit: int, now: float, ttl_s: float) -> LeaseGrant:
        """Atomically: drop the scope's expired leases, grant one more if fewer than limit are live."""
        ...

    def renew_leases(self, lease_ids: Sequence[str], now: float, ttl_s: float) -> None: ...

    def release_lease(self, lease_id: str) -> None: ...

    def count_leases(self, scope: str, now: float) -> int: ...

    # -- token buckets -----------------------------------------------------------------------------------
    def take_token(self, key: str, now: float, rate_per_s: float, burst: float) -> TokenGrant:
        """Atomically refill the key's bucket up to `burst` at `rate_per_s` and take one token if there is one."""
        ...

    # -- upkeep --------------------------------------------------------------------------------------------
    def recount_totals(self) -> dict[str, tuple[int, int]]:
        """Set each store's running entry count and bytes from its rows; how far off the drifted ones were."""
        ...

    def prune(self, now: float, buckets_idle_s: float) -> None:
        """Drop expired leases, responses, kept turns and session heads, and buckets untouched for buckets_idle_s (full again)."""
        ...

    def close(self) -> None: ...

"""Background upkeep of the state backend: what keeps it right without a request waiting on it.

Each store's running entry count and bytes (the totals row, state/sql.py) are re-counted from its rows every
`interval_s` (StateSpec.totals_recount_interval_s, an hour by default) on a daemon thread of the Ingress replica: one
scan per store, rare, never on a request path (a write checks its bounds against the row, so a scan there is what
the row exists to avoid). A drifted row is corrected and logged: something wrote the store without keeping its
totals (a replica of an earlier version during an upgrade, a hand edit). The first run comes at a random point of
the first interval, so the replicas of a deployment do not all scan at once.
"""

from __future__ import annotations

import logging
import random
import threading

from agentserve.state.backend import StateBackend

logger = logging.getLogger("ray.serve")


class TotalsRecount:
    """Re-counts the backend's totals every `interval_s` until `close()`; owns the backend handle it is given."""

    def __init__(self, backend: StateBackend, interval_s: float, *, first_after_s: float | None = None) -> None:
        self._backend = backend
        self._interval = interval_s
        self._first = random.uniform(0.0, interval_s) if first_after_s is None else first_after_s
        self._stop = threading.Event()
        self.runs = 0  # recounts that completed
        self.failed = 0  # recounts the database refused (the next interval tries again)
        self._thread = threading.Thread(target=self._run, name="state-upkeep", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self._first
        while not self._stop.wait(wait):
            self.run_once()
            wait = self._interval

    def run_once(self) -> dict[str, tuple[int, int]]:
        """One recount; the drift it corrected per store ({} when none, or when the database failed)."""
        try:
            drift = self._backend.recount_totals()
        except Exception:  # noqa: BLE001 - the database is down or busy: the totals stay as they are until next time
            self.failed += 1
            if self.failed & (self.failed - 1) == 0:  # the 1st, 2nd, 4th ... failure: no log flood
                logger.warning("state upkeep: a totals recount failed (%d so far)", self.failed, exc_info=True)
            return {}
        for store, (entries, nbytes) in drift.items():
            logger.warning("state upkeep: %s's totals were off by %+d entries and %+d bytes; re-counted from its rows",
                           store, entries, nbytes)  # fmt: skip
        self.runs += 1
        return drift

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop (a recount under way finishes first, within `timeout_s`) and close the backend handle. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        self._backend.close()

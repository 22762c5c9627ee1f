"""The prefix doctor on the serving path: checks that never stall the ingress event loop.

Per check, the loop does a dictionary lookup and, when the prompt extends the whole previous turn
(the common, healthy case), one C-level compare (~0.4 ms at 100K tokens); on a divergence, a chunked
C-level compare for where it starts (so the counts are exact at once). Only naming its cause needs
decoding, windows of both histories around the divergence (a few ms at any length): that runs on one worker thread, with a decode that
releases the GIL, so other streams keep flowing meanwhile, within a deadline (`DIAGNOSIS_DEADLINE_S`) and
behind at most `MAX_BACKLOG` others. A request never waits on it: `start` answers at once, and
`PrefixCheck.report(wait_s)` takes the cause only if it is ready within `wait_s` (the ingress waits only
while its routing call is out, plus `REPORT_WAIT_S`); otherwise the cause is `undiagnosed`. Records copy
the turn into the byte-bounded memory (C-level) and hand the trace line to a background writer.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from agentserve.doctor.decode import releasing_decode
from agentserve.doctor.report import Decode, PrefixReport, common_prefix_ids, diagnose
from agentserve.doctor.sessions import LastTurn, SessionMemory
from agentserve.doctor.trace import BackgroundTraceWriter, TraceTurn
from agentserve.doctor.tracker import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    from agentserve.config import ServeArgs

# One diagnosis's wall clock on the worker (the linear scans take a few ms below 100K tokens).
DIAGNOSIS_DEADLINE_S = 0.5
# Diagnoses queued or running at most; past it a divergence is reported `undiagnosed` at once.
MAX_BACKLOG = 16
# How long a request's admission waits for its cause once routing has answered.
REPORT_WAIT_S = 0.05


class PrefixCheck:
    """One prompt's check: the counts at once, the cause when the worker has named it."""

    def __init__(self, report: PrefixReport, diagnosis: "asyncio.Future[PrefixReport] | None" = None) -> None:
        self._report = report
        self._diagnosis = diagnosis

    async def report(self, wait_s: float | None = None) -> PrefixReport:
        """The diagnosed report if it is ready within `wait_s` (None: however long it takes), else the counts
        with cause `undiagnosed`."""
        if self._diagnosis is None:
            return self._report
        if wait_s is not None and not self._diagnosis.done():
            await asyncio.wait((self._diagnosis,), timeout=wait_s)
            if not self._diagnosis.done():
                return self._report
        return await asyncio.shield(self._diagnosis)

    def cancel(self) -> None:
        if self._diagnosis is not None:
            self._diagnosis.cancel()


@dataclass(frozen=True, slots=True)
class DoctorStats:
    sessions: int
    bytes: int
    max_bytes: int
    trace_written: int
    trace_dropped: int


def header_shown(args: "ServeArgs") -> bool:
    """Whether `x-agentserve-prefix` goes back to callers: "always", "never", or with "keys" only when API keys
    are configured. Without keys every caller that presents no key (or the same one) is one identity, and reuse
    counts against "its" last turn let one caller read another's prompt and output token by token. (build_app puts
    the keys of AGENTSERVE_API_KEYS into args.api_keys.)"""
    mode = args.doctor.header
    return mode == "always" or (mode == "keys" and bool(args.api_keys))


class PrefixDoctor:
    """How much of a session's previous turn each prompt reuses, and why not all (`x-agentserve-prefix`).

    Session keys are opaque strings. The caller must scope them to the authenticated caller (e.g.
    `<api-key identity>/<session id>`): a report tells how much of the previous turn under that key
    matches, so a key two callers could share would leak one caller's prompt to the other. Hence `header`:
    a report goes back to the caller only where the config says callers are told apart (DoctorSpec.header).

    Call `check` and `record` from one event loop (the memory is not thread-safe by design: only the
    loop touches it; the worker thread reads immutable snapshots).
    """

    def __init__(
        self,
        decode: Decode,
        special_ids: frozenset[int] = frozenset(),
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        enabled: bool = True,
        trace: BackgroundTraceWriter | None = None,
        show_header: bool = True,
    ) -> None:
        self.show_header = show_header  # whether reports go back to callers (`header`), or only into metrics
        self._decode = decode
        self._special = special_ids
        self._enabled = enabled
        self._memory = SessionMemory(max_bytes)
        self._trace = trace
        # One thread: attribution uses at most one core, and divergences are diagnosed in arrival order.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefix-doctor")
        self._backlog = 0

    @classmethod
    def from_args(cls, args: "ServeArgs", tokenizer: Any) -> "PrefixDoctor":
        """The ingress's doctor: `args.doctor` bounds and switches it, `args.trace_path` adds a trace."""
        trace = BackgroundTraceWriter(args.trace_path) if args.trace_path else None
        return cls(
            releasing_decode(tokenizer),
            frozenset(tokenizer.all_special_ids),
            max_bytes=args.doctor.max_bytes,
            enabled=args.doctor.enabled,
            trace=trace,
            show_header=header_shown(args),
        )

    def header(self, report: PrefixReport | None) -> str | None:
        """The `x-agentserve-prefix` value for the caller, or None where callers are not told apart."""
        return report.header() if report is not None and self.show_header else None

    async def check(
        self, session_key: str, prompt_ids: Sequence[int], output_rerendered: bool = False
    ) -> PrefixReport | None:
        """The report for this prompt against the session's last recorded turn, diagnosed however long that
        takes (within the diagnosis deadline); None for a first turn, an empty key, or a disabled doctor."""
        started = self.start(session_key, prompt_ids, output_rerendered)
        return None if started is None else await started.report()

    def start(self, session_key: str, prompt_ids: Sequence[int], output_rerendered: bool = False) -> PrefixCheck | None:
        """The check of this prompt, begun on the loop: the counts now, the cause on the worker. None for a first
        turn, an empty key, or a disabled doctor. `prompt_ids` is read, not copied: do not mutate it meanwhile.
        `output_rerendered`: the preprocessor re-rendered the previous output (names `output_rerendered`)."""
        if not self._enabled or not session_key:
            return None
        last = self._memory.get(session_key)
        if last is None:
            return None
        expected = len(last.tokens)
        if last.extended_by(prompt_ids):
            return PrefixCheck(PrefixReport(expected, expected, None))
        at = common_prefix_ids(last.tokens, array("I", prompt_ids[: expected]))
        counts = PrefixReport(expected, at, "undiagnosed")
        if self._backlog >= MAX_BACKLOG:
            return PrefixCheck(counts)
        self._backlog += 1
        future = asyncio.get_running_loop().run_in_executor(
            self._worker, self._diagnose, last, prompt_ids, output_rerendered, at
        )
        future.add_done_callback(self._diagnosed)
        return PrefixCheck(counts, future)

    def _diagnosed(self, _: Any) -> None:
        self._backlog -= 1

    def _diagnose(self, last: LastTurn, prompt: Sequence[int], output_rerendered: bool, at: int) -> PrefixReport:
        """On the worker, within DIAGNOSIS_DEADLINE_S from when it starts (the backlog is bounded apart)."""
        return diagnose(
            last.tokens, last.prompt_len, prompt, self._decode, self._special, output_rerendered,
            at=at, deadline=time.monotonic() + DIAGNOSIS_DEADLINE_S,
        )

    def record(self, session_key: str, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> None:
        """Remember a finished turn for the session's next check, and queue its trace line. Never blocks:
        a C-level copy into the memory; the trace keeps the lists until written (do not mutate them)."""
        if self._enabled and session_key:
            self._memory.put(session_key, prompt_ids, output_ids)
        if self._trace is not None:
            self._trace.write(TraceTurn(session_key, prompt_ids, output_ids))

    def forget(self, session_key: str) -> None:
        """The session starts a new prefix (a compaction replaced its history): its next turn is not checked
        against the turns before."""
        self._memory.forget(session_key)

    def stats(self) -> DoctorStats:
        t = self._trace
        return DoctorStats(
            len(self._memory), self._memory.nbytes, self._memory.max_bytes,
            t.written if t else 0, t.dropped if t else 0,
        )

    def close(self) -> None:
        """Stop the worker (a running diagnosis finishes) and write out the queued trace lines."""
        self._worker.shutdown(wait=False, cancel_futures=True)
        if self._trace is not None:
            self._trace.close()

"""A session's timeline from request trace records, as Chrome trace-event JSON (open in Perfetto or
chrome://tracing): `agentserve trace timeline TRACE.jsonl [--session S] -o out.json`.

One process per top-level session (a session and the subagents it spawned, found through `parent_session`), one
track per session in it (the top-level session first, each subagent its own track; requests of one session that
overlap go to extra tracks of that session). Each request is a slice named by its kind, holding nested slices
for its phases: queue (arrival -> the Router's lease), prefill (-> first token), decode (-> response end); the
time since the session's previous response ended (`gap_s`, the tool gap) is a slice of its own before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from agentserve.traces.record import TraceRecord

US = 1_000_000
NO_SESSION = "(no session)"


def _root(session: str, parents: dict[str, str | None]) -> str:
    """The top-level session of `session` (cycles and unknown parents stop the walk)."""
    seen = {session}
    while (parent := parents.get(session)) and parent not in seen:
        seen.add(parent)
        session = parent
    return session


def _tree(session: str, parents: dict[str, str | None]) -> set[str]:
    """`session` and every session spawned under it, at any depth."""
    return {s for s in parents if s == session or _root_through(s, session, parents)}


def _root_through(s: str, ancestor: str, parents: dict[str, str | None]) -> bool:
    seen = {s}
    while (parent := parents.get(s)) and parent not in seen:
        if parent == ancestor:
            return True
        seen.add(parent)
        s = parent
    return False


@dataclass
class _Track:
    tid: int
    name: str
    busy_until: float = float("-inf")  # seconds: the end of its last slice


@dataclass
class _Process:
    pid: int
    name: str
    tracks: dict[str, list[_Track]] = field(default_factory=dict)  # session -> its tracks (more when overlapping)


def timeline(records: Iterable[TraceRecord], session: str | None = None) -> dict[str, Any]:
    """The trace-event JSON object for `records` (those of `session` and its subagents, when given)."""
    recs = sorted(records, key=lambda r: r.t)
    parents: dict[str, str | None] = {}
    for r in recs:
        s = r.session or NO_SESSION
        if r.parent_session and r.parent_session != s:
            parents[s] = r.parent_session
        else:
            parents.setdefault(s, None)
    if session is not None:
        keep = _tree(session, parents)
        recs = [r for r in recs if (r.session or NO_SESSION) in keep]
    origin = recs[0].t if recs else 0.0
    processes: dict[str, _Process] = {}
    meta: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    next_tid = 1

    def track_for(s: str, start: float, end: float) -> tuple[int, int, float]:
        """(pid, tid, the end of that track's previous slice) for a request of session `s`."""
        nonlocal next_tid
        root = _root(s, parents)
        proc = processes.get(root)
        if proc is None:
            proc = processes[root] = _Process(len(processes) + 1, root)
            meta.append({"ph": "M", "name": "process_name", "pid": proc.pid, "args": {"name": f"session {root}"}})
            meta.append({"ph": "M", "name": "process_sort_index", "pid": proc.pid, "args": {"sort_index": proc.pid}})
        tracks = proc.tracks.setdefault(s, [])
        for track in tracks:
            if track.busy_until <= start:
                break
        else:
            name = s if s == root else f"subagent {s}"
            track = _Track(next_tid, name if not tracks else f"{name} ({len(tracks) + 1})")
            next_tid += 1
            tracks.append(track)
            meta.append({"ph": "M", "name": "thread_name", "pid": proc.pid, "tid": track.tid,
                         "args": {"name": track.name}})
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": proc.pid, "tid": track.tid,
                         "args": {"sort_index": 0 if s == root else track.tid}})
        previous, track.busy_until = track.busy_until, end
        return proc.pid, track.tid, previous

    def x(name: str, cat: str, pid: int, tid: int, start: float, end: float, args: dict | None = None) -> None:
        ev: dict[str, Any] = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                              "ts": round((start - origin) * US, 3), "dur": round(max(0.0, end - start) * US, 3)}
        if args:
            ev["args"] = args
        events.append(ev)

    for r in recs:
        s = r.session or NO_SESSION
        start, end = r.t, r.t + r.duration_s
        pid, tid, previous = track_for(s, start, end)
        if r.gap_s:  # never over the track's previous slice (rounding, or a gap measured to another track's end)
            x("tool gap" if r.kind == "tool_result" else "gap", "gap", pid, tid, max(start - r.gap_s, previous),
              start, {"gap_s": r.gap_s})
        x(r.kind, "request", pid, tid, start, end, {
            "request_id": r.request_id, "model": r.model, "adapter": r.adapter, "replica": r.replica,
            "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens, "output_tokens": r.output_tokens,
            "finish_reason": r.finish_reason, "tool_calls": list(r.tool_calls), "status": r.status,
        })
        routed = start + r.queue_s if r.queue_s is not None else None
        first = start + r.ttft_s if r.ttft_s is not None else None
        if routed is not None:
            x("queue", "phase", pid, tid, start, min(routed, end))
        if first is not None:
            x("prefill", "phase", pid, tid, min(routed if routed is not None else start, first), min(first, end),
              {"uncached_tokens": r.prompt_tokens - r.cached_tokens})
            x("decode", "phase", pid, tid, min(first, end), end, {"output_tokens": r.output_tokens})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"source": "agentserve request traces", "session": session}}

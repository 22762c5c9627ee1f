"""A trace (traces/record.py) as the router simulator's sessions, and its load as a share of capacity.

What a replay keeps from the records: each request's prompt and output sizes and block hashes, its kind, the order
of a session's requests, the tool gap before each, and the session tree. What it recomputes: every time but the
gaps. Dependencies are inferred from the recorded timeline:

* a subagent session was spawned by the last request of its parent that ended at or before the subagent's first
  arrival; it starts that long after the spawning request ends in the simulation;
* a parent request waited for (joins) the subagents spawned by the request just before it whose last response
  ended at or before its arrival; it arrives its residual gap (arrival minus the last of those ends) after the
  last of them ends in the simulation. Subagents left running in the background are not waited for.

Blocks may be coarsened (a replay block of k trace blocks): a chained hash names its whole prefix, so the k-th,
2k-th, ... hashes are the coarse chain.

Load: 100% is the lower of two session rates (`capacity`): the replicas prefilling all the time with one shared
unbounded cache (every reusable block a hit), and their KV blocks just holding every live session's context
through its tool gaps. `load_factor` says how much to speed the trace's session arrivals up or slow them down for a
target share. Neither bound counts queueing or imperfect placement, so real routers saturate below 100%.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Iterable

from agentserve.offline.router_sim import ReplicaModel, Session, Turn
from agentserve.traces.record import TraceRecord

EPS_S = 1e-6  # recorded times are floats: an end and an arrival equal to this are the same instant


def coarsen(blocks: tuple[int, ...] | list[int], k: int) -> list[int]:
    """The chain of blocks k times larger: every k-th hash (each names its whole prefix)."""
    return list(blocks) if k == 1 else list(blocks[k - 1 :: k])


def block_size_of(records: list[TraceRecord]) -> int:
    sizes = {r.block_size for r in records}
    if len(sizes) != 1:
        raise ValueError(f"a trace replays at one block size; this one has {sorted(sizes)}")
    return sizes.pop()


def sessions_from_trace(records: Iterable[TraceRecord], block_size: int | None = None) -> list[Session]:
    """The simulator's sessions of a trace, at `block_size` (a multiple of the trace's; default the trace's).
    Records without a session are sessions of one request; shed (non-2xx) records are left out."""
    recs = [r for r in records if 200 <= r.status < 300]
    if not recs:
        return []
    trace_bs = block_size_of(recs)
    bs = block_size or trace_bs
    if bs % trace_bs:
        raise ValueError(f"replay block size {bs} is not a multiple of the trace's {trace_bs}")
    k = bs // trace_bs
    by: dict[str, list[TraceRecord]] = defaultdict(list)
    for r in recs:
        by[r.session if r.session is not None else f"\0{r.request_id}"].append(r)
    names = sorted(by, key=lambda n: min(r.t for r in by[n]))
    for n in names:
        by[n].sort(key=lambda r: r.t)
    sid = {n: i for i, n in enumerate(names)}
    ends = {n: max(r.t + r.duration_s for r in by[n]) for n in names}

    spawned_by: dict[str, tuple[str, int, float]] = {}  # child -> (parent, spawning request index, offset)
    for n in names:
        parent = by[n][0].parent_session
        if parent is None or parent not in by or parent == n:
            continue
        t0 = by[n][0].t
        before = [i for i, r in enumerate(by[parent]) if r.t + r.duration_s <= t0 + EPS_S]
        if before:
            i = before[-1]
            p = by[parent][i]
            spawned_by[n] = (parent, i, t0 - (p.t + p.duration_s))

    spawns: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for child, (parent, i, _) in spawned_by.items():
        spawns[parent][i].append(sid[child])

    out = []
    for n in names:
        rs = by[n]
        joins: dict[int, tuple[list[int], float]] = {}
        turns = []
        for j, r in enumerate(rs):
            gap = 0.0
            if j + 1 < len(rs):
                nxt = rs[j + 1]
                awaited = [c for c in spawns[n].get(j, ()) if ends[names[c]] <= nxt.t + EPS_S]
                if awaited:
                    joins[j + 1] = (awaited, max(0.0, nxt.t - max(ends[names[c]] for c in awaited)))
                gap = nxt.gap_s if nxt.gap_s is not None else nxt.t - (r.t + r.duration_s)
            turns.append(Turn(
                r.prompt_tokens, r.output_tokens, max(0.0, gap),
                blocks=coarsen(r.input_blocks, k), written=coarsen(r.input_blocks + r.output_blocks, k), kind=r.kind,
            ))
        child = spawned_by.get(n)
        out.append(Session(
            sid[n], child[2] if child else rs[0].t, [], turns,
            parent=sid[child[0]] if child else None,
            spawns={i: list(cs) for i, cs in spawns[n].items()}, joins=joins, key=rs[0].key,
        ))
    return out


def top_level(sessions: list[Session]) -> list[Session]:
    return [s for s in sessions if s.parent is None]


def rescale(sessions: list[Session], factor: float) -> list[Session]:
    """The same sessions with top-level arrivals `factor` times as frequent (gaps and subagent offsets kept)."""
    if factor <= 0:
        raise ValueError("factor must be > 0")
    t0 = min((s.start_s for s in top_level(sessions)), default=0.0)
    return [s if s.parent is not None else dataclasses.replace(s, start_s=t0 + (s.start_s - t0) / factor)
            for s in sessions]


def _hits(sessions: list[Session], block_size: int) -> dict[tuple[int, int], int]:
    """Each request's leading blocks one shared unbounded cache holds (sessions taken in arrival order: near
    enough, a session's blocks are reused by its own later turns)."""
    seen: set[int] = set()
    out = {}
    for s in sorted(sessions, key=lambda s: (s.parent is not None, s.start_s)):
        for k, t in enumerate(s.turns):
            blocks = t.blocks or []
            hit = 0
            for h in blocks[: max(0, (t.prompt_tokens - 1) // block_size)]:
                if h not in seen:
                    break
                hit += 1
            seen.update(t.written or blocks)
            out[(s.sid, k)] = hit
    return out


def prefill_work_s(sessions: list[Session], m: ReplicaModel, block_size: int) -> float:
    """Prefill seconds the whole trace needs with one shared unbounded cache."""
    hits = _hits(sessions, block_size)
    return sum(
        (m.prefill_overhead_ms + (t.prompt_tokens - hits[(s.sid, k)] * block_size) * m.prefill_ms_per_token) / 1000
        for s in sessions for k, t in enumerate(s.turns)
    )


def kv_token_seconds(sessions: list[Session], m: ReplicaModel, block_size: int) -> float:
    """Token-seconds of KV the whole trace holds on an unloaded server that keeps every session's context through
    its gaps (each request's prompt + output from its arrival to the next request's; a parent's through the
    subagents it waits for). Blocks shared between sessions count once per session: an overestimate by about
    the system prompt's share."""
    hits = _hits(sessions, block_size)
    by = {s.sid: s for s in sessions}
    memo: dict[int, tuple[float, float]] = {}

    def run(s: Session) -> tuple[float, float]:  # (duration, token-seconds) of a session and its subagents
        if s.sid in memo:
            return memo[s.sid]
        dur = held = 0.0
        for k, t in enumerate(s.turns):
            uncached = t.prompt_tokens - hits[(s.sid, k)] * block_size
            d = (m.prefill_overhead_ms + uncached * m.prefill_ms_per_token + t.output_tokens * m.itl_ms) / 1000
            joined = s.joins.get(k + 1)
            if joined:
                wait = max(by[c].start_s + run(by[c])[0] for c in joined[0]) + joined[1]
            else:
                wait = t.gap_s if k + 1 < len(s.turns) else 0.0
            dur += d + wait
            held += (t.prompt_tokens + t.output_tokens) * (d + wait)
        held += sum(run(by[c])[1] for cs in s.spawns.values() for c in cs if c in by)
        memo[s.sid] = (dur, held)
        return memo[s.sid]

    return sum(run(s)[1] for s in top_level(sessions))


def session_rate(sessions: list[Session]) -> float:
    """Top-level session arrivals per second in the trace as it stands."""
    starts = sorted(s.start_s for s in top_level(sessions))
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return float("inf")
    return (len(starts) - 1) / (starts[-1] - starts[0])


def capacity(sessions: list[Session], m: ReplicaModel, block_size: int, replicas: int) -> dict[str, float]:
    """Top-level sessions per second the replicas carry, by each bound: prefill compute with one shared unbounded
    cache, and KV memory holding every live session's context through its gaps (Little's law); the lower binds."""
    programs = max(1, len(top_level(sessions)))
    prefill = replicas * programs / max(prefill_work_s(sessions, m, block_size), 1e-9)
    kv = replicas * m.kv_blocks * block_size * programs / max(kv_token_seconds(sessions, m, block_size), 1e-9)
    return {"prefill_bound": prefill, "kv_bound": kv, "sessions_per_s": min(prefill, kv)}


def load_factor(sessions: list[Session], m: ReplicaModel, block_size: int, replicas: int, load: float) -> float:
    """How much faster than recorded the top-level sessions must arrive for `load` (1.0 = 100%) of capacity."""
    return load * capacity(sessions, m, block_size, replicas)["sessions_per_s"] / session_rate(sessions)

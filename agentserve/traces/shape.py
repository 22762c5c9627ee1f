"""What shape a trace has, in the terms the published agent-workload figures use (docs/TRACES.md): turns per
session, context by turn 30, input tokens per output token, tool gaps, subagent share, compactions, and the prefix
hit rate one shared unbounded cache would reach."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any, Iterable

from agentserve.traces.record import TraceRecord


def describe(records: Iterable[TraceRecord]) -> dict[str, Any]:
    recs = list(records)
    by: dict[str, list[TraceRecord]] = defaultdict(list)
    for r in recs:
        by[r.session or r.request_id].append(r)
    for rs in by.values():
        rs.sort(key=lambda r: r.t)
    top = [rs for rs in by.values() if rs[0].parent_session is None]
    turns = sorted(len(rs) for rs in top)
    at30 = [rs[29].prompt_tokens for rs in top if len(rs) >= 30]
    gaps = [r.gap_s for r in recs if r.kind == "tool_result" and r.gap_s is not None]
    parents = {rs[0].parent_session for rs in by.values() if rs[0].parent_session is not None}
    seen: set[int] = set()
    hit = total = 0
    for r in sorted(recs, key=lambda r: r.t):
        n = 0
        for h in r.input_blocks[: max(0, (r.prompt_tokens - 1) // r.block_size)]:
            if h not in seen:
                break
            n += 1
        hit, total = hit + n * r.block_size, total + r.prompt_tokens
        seen.update(r.input_blocks + r.output_blocks)
    q = lambda xs, n: [round(x) for x in statistics.quantiles(xs, n=n)] if len(xs) > 1 else xs  # noqa: E731
    return {
        "requests": len(recs),
        "sessions": len(top),
        "subagent_sessions": len(by) - len(top),
        "sessions_with_subagents": round(len(parents & {rs[0].session for rs in top}) / max(1, len(top)), 3),
        "turns_median": statistics.median(turns) if turns else 0,
        "turns_p10_p90": [q(turns, 10)[0], q(turns, 10)[-1]] if len(turns) > 1 else turns,
        "context_at_turn_30_p10_p50_p90": [q(at30, 10)[0], round(statistics.median(at30)), q(at30, 10)[-1]]
        if len(at30) > 1 else at30,
        "input_per_output_token": round(sum(r.prompt_tokens for r in recs) / max(1, sum(r.output_tokens for r in recs)), 1),
        "tool_gap_s_p50_p90": [round(statistics.median(gaps), 2), round(statistics.quantiles(gaps, n=10)[-1], 2)]
        if len(gaps) > 1 else gaps,
        "sessions_compacting": len({r.session for r in recs if r.kind == "compaction"}),
        "shared_cache_hit_rate": round(hit / max(1, total), 4),
    }

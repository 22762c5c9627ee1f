"""Session-aware scheduling ablated on the router simulator: each switch of router.scheduling on its own and all
together, against FCFS with today's KV routing and round-robin, on the same generated agent trace at each load.

    agentserve bench router-scheduling [--trace T.jsonl.gz | --programs 200] [--replicas 4]
        [--loads 0.5,0.8,1.2,1.5] [--kv-blocks 4096] [--jobs 2] [--max-retries 10] [--old-engine]
        [--out docs/benchmarks/router_scheduling.json]

Without --trace a trace is generated (agentserve/traces/synthetic.py, its published shapes, seed 0). Load: 1.0 =
the replicas prefilling all the time with one shared unbounded cache (offline/trace_workload.py). The variants
with a router queue hold requests in the Router once a replica has QUEUE_AT_PREFILL_TOKENS of pending prefill
(offline/router_sim.Ours); the baselines place every request at once into its replica's FIFO, as today. The
ordering switches run twice: ranking every waiter on arrival (rank_after_wait_s 0, as first measured) and, in the
"ranked after" rows, only those that waited the default rank_after_wait_s. Figures per row:
bench/trace_report.summarize. A shed request is retried (offline/session_flow.RetryPolicy, `--max-retries`);
`--old-engine` is the simulator's engine before running requests held KV (nothing preempted).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from agentserve.bench import conditions, results, trace_report
from agentserve.offline import router_sim as sim
from agentserve.offline import trace_workload as tw
from agentserve.offline.session_flow import RetryPolicy, SessionFlow
from agentserve.routing.scheduling import SchedulingConfig

BLOCK_SIZE = 256
QUEUE = {"wait_for_cache": True}  # the router queue's base: wait for the replica holding the session's KV
FAIR = {"session_fairness": True}
# The ordering switches' rows as first measured rank every waiter on arrival (rank_after_wait_s 0); the "ranked
# after" rows order by rank only those that waited the default rank_after_wait_s, the rest FCFS.
AT_ONCE = {"rank_after_wait_s": 0.0}
RANKED_AFTER = SchedulingConfig().rank_after_wait_s
AFTER = {"rank_after_wait_s": RANKED_AFTER}
ALL = QUEUE | FAIR | {"interactive_first": True, "kv_pressure": True}
# name -> scheduling switches (None: placed at once, today's path); "round-robin" is the simulator's own.
VARIANTS: dict[str, dict[str, Any] | None] = {
    "round-robin": None,
    "FCFS + KV routing (today)": None,
    "router queue (FCFS)": QUEUE,
    "+ session fairness": QUEUE | FAIR | AT_ONCE,
    f"+ session fairness (ranked after {RANKED_AFTER:g}s)": QUEUE | FAIR | AFTER,
    "+ interactive first": QUEUE | {"interactive_first": True} | AT_ONCE,
    "+ KV pressure": QUEUE | {"kv_pressure": True},
    "+ key shares": QUEUE | {"key_shares": True} | AT_ONCE,
    f"+ key shares (ranked after {RANKED_AFTER:g}s)": QUEUE | {"key_shares": True} | AFTER,
    "all switches": ALL | AT_ONCE,
    f"all switches (ranked after {RANKED_AFTER:g}s)": ALL | AFTER,
}
BASELINE = "FCFS + KV routing (today)"
NO_WAIT = "router queue, no wait_for_cache"  # the queue alone, sessions free to leave their KV (--no-wait-row)

_SESSIONS: list[sim.Session] = []  # the trace's sessions, shared with forked workers


def _router(name: str) -> sim.SimRouter:
    if name == "round-robin":
        return sim.RoundRobin()
    if name == NO_WAIT:
        r = sim.Ours(BLOCK_SIZE, "kv", SchedulingConfig())
    else:
        sched = VARIANTS[name]
        r = sim.Ours(BLOCK_SIZE, "kv", SchedulingConfig(**sched)) if sched is not None else sim.Ours(BLOCK_SIZE, "kv")
    r.name = name
    return r


def _one(job: tuple[int, float, float, str, int, bool, int]) -> dict[str, Any]:
    n, load, factor, name, kv_blocks, pin, retries = job
    m = sim.ReplicaModel(kv_blocks=kv_blocks, pin_running=pin)
    scaled = tw.rescale(_SESSIONS, factor)
    flow = SessionFlow(scaled, BLOCK_SIZE, RetryPolicy(max_retries=retries))
    t0 = time.perf_counter()
    res = sim.simulate(_router(name), n, scaled, sim.Workload(block_size=BLOCK_SIZE), m, flow=flow)
    row = {"replicas": n, "load": load, "policy": name, "arrival_speedup": factor, "util_mean": res.util_mean,
           **trace_report.summarize(flow.requests, flow.programs()), "key_shares": key_shares(flow.requests),
           "wall_s": time.perf_counter() - t0}
    t = trace_report.ttft_of(row)
    print(f"N={n} load {load:4.0%} {name:34s} ttft p50 {t['p50']:6.2f} p99 {t.get('p99', float('nan')):6.2f} s"
          f"  out {row['output_tokens_per_s']:6.0f} (sustained {row['sustained_output_tokens_per_s'] or 0:6.0f}) tok/s"
          f"  cached {row['cached_share']:5.1%}  preempt {row['preemptions']}  529 {row['shed_rate']:5.2%}"
          f"  retries {row['retries']}  cut {row['programs_incomplete']}  [{row['wall_s']:.0f}s]", flush=True)
    return row


def key_shares(requests: Sequence[Any]) -> dict[str, dict[str, float]]:
    """Per API key of the trace: its share of the requests offered and of the service served (uncached prompt
    plus output tokens), and its TTFT p50 (s)."""
    key_of = {s.sid: s.key or "-" for s in _SESSIONS}
    offered: dict[str, int] = {}
    served: dict[str, float] = {}
    ttft: dict[str, list[float]] = {}
    for r in requests:
        k = key_of.get(r.session, "-")
        offered[k] = offered.get(k, 0) + 1
        if not r.shed:
            served[k] = served.get(k, 0.0) + r.prompt_tokens - r.cached_tokens + r.output_tokens
            ttft.setdefault(k, []).append(r.ttft - r.arrival)
    total_o, total_s = sum(offered.values()) or 1, sum(served.values()) or 1.0
    return {k: {"offered": offered[k] / total_o, "served": served.get(k, 0.0) / total_s,
                "ttft_p50_s": sorted(ttft[k])[len(ttft[k]) // 2] if ttft.get(k) else None}
            for k in sorted(offered)}


def _short_p50(r: dict[str, Any]) -> float:
    return r["completion_s"][trace_report.BUCKETS[0][0]].get("p50", float("nan"))


def versus_baseline(rows: list[dict[str, Any]]) -> str:
    """Markdown: each variant against FCFS + KV routing at the same load, as the issue's targets put it."""
    out = ["| load | variant | TTFT p50 | TTFT p99 (target at 120%: >= 2.5x) | short programs p50 (>= 3x) "
           "| output tok/s, sustained window (>= +10%) | output tok/s, whole replay | cached share | re-prefilled "
           "| preemptions | recomputed tokens | 529 rate | retries | programs cut |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, load in sorted({(r["replicas"], r["load"]) for r in rows}):
        at = [r for r in rows if r["replicas"] == n and r["load"] == load]
        base = next((r for r in at if r["policy"] == BASELINE), None)
        if base is None:
            continue
        for r in at:
            if r is base:
                continue
            bt, rt = trace_report.ttft_of(base), trace_report.ttft_of(r)
            p50 = bt["p50"] / max(rt["p50"], 1e-9)
            p99 = bt.get("p99", float("nan")) / max(rt.get("p99", float("nan")), 1e-9)
            short = _short_p50(base) / max(_short_p50(r), 1e-9)
            thr = r["output_tokens_per_s"] / max(base["output_tokens_per_s"], 1e-9) - 1
            sus = (r["sustained_output_tokens_per_s"] or 0) / max(base["sustained_output_tokens_per_s"] or 0, 1e-9) - 1
            re = r["reprefilled_tokens"] / max(base["reprefilled_tokens"], 1)
            out.append(f"| {load:.0%} | {r['policy']} | {p50:.2f}x | {p99:.2f}x | {short:.2f}x | {sus:+.1%} | {thr:+.1%} "
                       f"| {r['cached_share']:.1%} (today {base['cached_share']:.1%}) | {re:.2f}x today "
                       f"| {r['preemptions']} (today {base['preemptions']}) "
                       f"| {r['recomputed_tokens'] / 1e6:.2f}M (today {base['recomputed_tokens'] / 1e6:.2f}M) "
                       f"| {r['shed_rate']:.2%} (today {base['shed_rate']:.2%}) "
                       f"| {r['retries']} (today {base['retries']}) "
                       f"| {r['programs_incomplete']} (today {base['programs_incomplete']}) |")
    return "\n".join(out)


def key_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: each API key's share of the requests offered and of the service served, and its TTFT p50, today
    and with per-key shares (equal weights), at each load."""
    out = ["| load | variant | per key: offered / served share, TTFT p50 |", "|---:|---|---|"]
    for r in rows:
        if r["policy"] in (BASELINE, "+ key shares", f"+ key shares (ranked after {RANKED_AFTER:g}s)"):
            cells = "; ".join(f"{k}: {v['offered']:.0%} / {v['served']:.0%}, {v['ttft_p50_s'] or float('nan'):.2f} s"
                              for k, v in r["key_shares"].items())
            out.append(f"| {r['load']:.0%} | {r['policy']} | {cells} |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    global _SESSIONS
    ap = argparse.ArgumentParser(prog="agentserve bench router-scheduling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="", help="a trace (JSON lines, .gz ok); default: generate --programs")
    ap.add_argument("--programs", type=int, default=200, help="top-level sessions of the generated trace")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--loads", default="0.5,0.8,1.2,1.5")
    ap.add_argument("--kv-blocks", type=int, default=4096, help=f"KV blocks of {BLOCK_SIZE} tokens per replica")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of: " + ", ".join(VARIANTS))
    ap.add_argument("--no-wait-row", action="store_true", help=f"also '{NO_WAIT}' at every load")
    ap.add_argument("--jobs", type=int, default=2, help="simulations run at once (processes)")
    ap.add_argument("--max-retries", type=int, default=RetryPolicy().max_retries,
                    help="retries of a shed request (529, retry-after 2 s) before its program ends; 0: none")
    ap.add_argument("--old-engine", action="store_true",
                    help="the engine model before: running requests hold no KV, nothing is preempted")
    ap.add_argument("--out", default=str(results.out_path("router_scheduling.json")))
    args = ap.parse_args(argv)
    if args.trace:
        from agentserve.traces.jsonl import read_records

        records = read_records(Path(args.trace))
        trace = {"path": args.trace}
    else:
        from agentserve.traces.synthetic import TraceShape, generate

        records = generate(TraceShape(sessions=args.programs, seed=args.seed))
        trace = {"generated": {"sessions": args.programs, "seed": args.seed}}
    _SESSIONS = tw.sessions_from_trace(records, BLOCK_SIZE)
    trace |= {"records": len(records), "sessions": len(_SESSIONS), "programs": len(tw.top_level(_SESSIONS))}
    names = [v.strip() for v in args.variants.split(",") if v.strip()] + ([NO_WAIT] if args.no_wait_row else [])
    for name in names:
        if name not in VARIANTS and name != NO_WAIT:
            ap.error(f"unknown variant {name!r}")
    m = sim.ReplicaModel(kv_blocks=args.kv_blocks, pin_running=not args.old_engine)
    loads = [float(x) for x in args.loads.split(",")]
    factors = {load: tw.load_factor(_SESSIONS, m, BLOCK_SIZE, args.replicas, load) for load in loads}
    jobs = [(args.replicas, load, factors[load], name, args.kv_blocks, m.pin_running, args.max_retries)
            for load in loads for name in names]
    jobs.sort(key=lambda j: -j[1])  # heaviest loads first: they take longest
    t0 = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            rows = pool.map(_one, jobs, chunksize=1)
    else:
        rows = [_one(j) for j in jobs]
    rows.sort(key=lambda r: (r["load"], names.index(r["policy"])))
    out = Path(args.out)
    meta = {
        "command": results.command("router-scheduling", argv),
        "trace": trace,
        "block_size": BLOCK_SIZE,
        "replica_model": asdict(m),
        "retry": asdict(RetryPolicy(max_retries=args.max_retries)),
        "queue_at_prefill_tokens": sim.QUEUE_AT_PREFILL_TOKENS,
        "variants": {n: VARIANTS.get(n, {}) for n in names},
        "load_definition": "1.0 = replicas prefilling all the time with one shared unbounded cache",
        "wall_s": time.perf_counter() - t0,
        "conditions": conditions.snapshot(git=conditions.git_state()),
    }
    trace_report.write(out, meta, rows,
                       f"Session-aware scheduling, simulator: {trace['programs']} programs, {args.replicas} replicas, "
                       f"{args.kv_blocks * BLOCK_SIZE // 1000}K KV tokens each", versus_baseline(rows), key_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

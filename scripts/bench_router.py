"""Router simulator: multi-turn agent sessions on N replicas, every routing policy on the same trace.

For each replica count the session arrival rate is calibrated so that round-robin's replicas are
busy prefilling `--load` of the time (70% by default), then round-robin, power-of-two choices, a
Ray-style prefix-affinity router, agentserve's router (approximate and KV-event modes) and a
load-blind oracle replay the identical session trace. See agentserve/offline/router_sim.py for the model.

    .venv/bin/python scripts/bench_router.py [--replicas 4,8,16,32,64] [--sessions 1000] [--load 0.7]
        [--out docs/benchmarks/router_sim.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentserve.offline import router_sim as sim  # noqa: E402


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


def run(n: int, w: sim.Workload, m: sim.ReplicaModel, load: float, cost: dict) -> list[dict]:
    rate = calibrate(n, w, m, load)
    sessions = sim.make_sessions(w, rate)
    rows = []
    for make in sim.routers(w.block_size, **cost):
        t0 = time.perf_counter()
        res = sim.simulate(make(), n, sessions, w, m)
        row = asdict(res) | {"session_rate": rate, "wall_s": time.perf_counter() - t0}
        rows.append(row)
        print(
            f"N={n:3d} {res.router:30s} hit {res.hit_rate:6.1%} (ub {res.upper_bound_hit_rate:6.1%})  "
            f"ttft p50 {res.ttft_p50_ms:8.0f} p99 {res.ttft_p99_ms:8.0f} ms  util {res.util_mean:5.2f} "
            f"max/mean {res.util_max_over_mean:4.2f}  rejected {res.rejected:5d}/{res.requests}  "
            f"[{row['wall_s']:.1f}s]",
            flush=True,
        )
    return rows


def table(rows: list[dict]) -> str:
    out = [
        "| replicas | router | prefix hit rate | TTFT p50 (ms) | TTFT p99 (ms) | p50 vs RR | prefill util (mean) "
        "| util max/mean | served max/mean | rejected |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sorted({r["replicas"] for r in rows}):
        group = [r for r in rows if r["replicas"] == n]
        rr = next(r for r in group if r["router"] == "round-robin")
        out.append(f"| {n} | oracle: one shared unbounded cache | {rr['upper_bound_hit_rate']:.1%} | | | | | | | |")
        for r in group:
            speed = rr["ttft_p50_ms"] / r["ttft_p50_ms"] if r["ttft_p50_ms"] else float("nan")
            out.append(
                f"| {n} | {r['router']} | {r['hit_rate']:.1%} | {r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} "
                f"| {speed:.2f}x | {r['util_mean']:.2f} | {r['util_max_over_mean']:.2f} "
                f"| {r['served_max_over_mean']:.2f} | {r['rejected']}/{r['requests']} |"
            )
    return "\n".join(out)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["router"] for r in rows))
    ns = sorted({r["replicas"] for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name in names:
        pts = [next(r for r in rows if r["router"] == name and r["replicas"] == n) for n in ns]
        axes[0].plot(ns, [p["hit_rate"] * 100 for p in pts], marker="o", label=name)
        axes[1].plot(ns, [p["ttft_p50_ms"] for p in pts], marker="o", label=name)
        axes[2].plot(ns, [p["util_max_over_mean"] for p in pts], marker="o", label=name)
    ub = [next(r for r in rows if r["replicas"] == n)["upper_bound_hit_rate"] * 100 for n in ns]
    axes[0].plot(ns, ub, "k--", label="upper bound (one shared infinite cache)")
    axes[0].set(title="prefix hit rate (%)", xlabel="replicas", xscale="log", xticks=ns, xticklabels=ns)
    axes[1].set(title="TTFT p50 (ms, log)", xlabel="replicas", xscale="log", yscale="log", xticks=ns,
                xticklabels=ns)
    axes[2].axhline(1.25, color="grey", ls=":")
    axes[2].set(title="prefill utilisation max / mean", xlabel="replicas", xscale="log", xticks=ns,
                xticklabels=ns)
    for ax in axes:
        ax.minorticks_off()
    axes[0].legend(fontsize=7)
    fig.suptitle("Router simulator: multi-turn agent sessions, load calibrated to 70% for round-robin")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", default="4,8,16,32,64")
    ap.add_argument("--sessions", type=int, default=1000, help="at least this many; 32 per replica at scale")
    ap.add_argument("--load", type=float, default=0.7)
    ap.add_argument("--kv-blocks", type=int, default=sim.ReplicaModel().kv_blocks)
    ap.add_argument("--overlap-weight", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/router_sim.json"))
    args = ap.parse_args()
    m = sim.ReplicaModel(kv_blocks=args.kv_blocks)
    cost = {"overlap_weight": args.overlap_weight}
    rows: list[dict] = []
    for n in [int(x) for x in args.replicas.split(",")]:
        w = sim.Workload(sessions=max(args.sessions, 32 * n), seed=args.seed)
        rows.extend(run(n, w, m, args.load, cost))
    md = table(rows)
    print(md)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": " ".join(sys.argv),
        "machine": platform.platform(),
        "workload": asdict(sim.Workload()),
        "replica_model": asdict(m),
        "cost": cost,
        "load": args.load,
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    plot(rows, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Three ways into one graph, measured side by side: HAProxy (Serve's HAProxy mode, the shipped front), the Ingress
replica's own port (Serve's direct ingress, no front at all) and Serve's Python proxy actor (HAProxy keeps it as its
backup server; the front with RAY_SERVE_ENABLE_HA_PROXY=0).

    agentserve bench ingress-paths   # docs/benchmarks/ingress_paths.{json,png}
    agentserve bench ingress-paths --quick

One graph with the scripted engine (first token at once), started as the tests start theirs (the shipped Ray/Serve
environment, agentserve/serve/ray_env.py); sequential requests (c=1) per API, rotating over the three paths request
by request, so every path sees the same moments of the machine's load. TTFT = time to the first content event.
Percentiles over raw requests; the first round of each API is warm-up and excluded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any, Sequence

import httpx
import psutil

from agentserve.bench import conditions, results
from agentserve.bench.graph import running_graph
from agentserve.bench.serving_overhead import APIS, ARGS, one
from agentserve.bench.stats import summary


def listening_ports(marker: str) -> list[int]:
    """TCP ports our Ray cluster's processes whose title contains `marker` listen on (children of our raylet)."""
    import ray

    raylet = next(p for p in ray._private.worker.global_worker.node.all_processes["raylet"])
    ports = []
    for proc in psutil.Process(raylet.process.pid).children(recursive=True):
        try:
            if marker in " ".join(proc.cmdline()):
                ports += [c.laddr.port for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            continue
    return sorted(ports)


def speaks_http(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/-/routes", timeout=5, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


async def measure(paths: dict[str, str], rounds: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {api: {name: [] for name in paths} for api in APIS}
    clients = {name: httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) for name, url in paths.items()}
    names = list(paths)
    try:
        n = 0
        for api in APIS:
            for r in range(rounds + 1):
                order = names[r % len(names):] + names[:r % len(names)]  # each path first in turn
                for name in order:
                    n += 1
                    ttft = await one(clients[name], api, n)
                    if r > 0:
                        out[api][name].append(ttft)
    finally:
        for c in clients.values():
            await c.aclose()
    return out


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = results.pyplot()
    fig, axes = plt.subplots(1, len(APIS), figsize=(4 * len(APIS), 3.6), sharey=True)
    for ax, api in zip(axes, APIS):
        names = list(doc["summary"][api])
        for q, marker in (("p50", "o"), ("p90", "s"), ("p99", "^")):
            ys = [doc["summary"][api][n].get(q) for n in names]
            if all(y is not None for y in ys):
                ax.plot(names, ys, marker=marker, label=q)
        ax.set_title(api)
        ax.set_ylabel("TTFT, ms (scripted engine)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("One graph, three ways in (c=1, interleaved)")
    fig.tight_layout()
    results.save_figure(fig, path, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench ingress-paths", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=150, help="requests per path and API (after one warm-up round)")
    ap.add_argument("--quick", action="store_true", help="10 rounds, written to a temporary directory unless --out")
    ap.add_argument("--out", default=None, help="output path without suffix (default docs/benchmarks/ingress_paths)")
    a = ap.parse_args(argv)
    client_scheduling = conditions.prioritize_client()
    rounds = 10 if a.quick else a.rounds
    out = Path(a.out or (results.scratch_path("ingress_paths") if a.quick else results.out_path("ingress_paths")))
    with running_graph(ARGS) as url:
        replica = listening_ports("ServeReplica:agentserve:Ingress")
        proxy = [p for p in listening_ports("ProxyActor") if speaks_http(p)]  # not its gRPC port
        if not replica or not proxy:
            raise SystemExit(f"direct ingress ports not found (replica {replica}, proxy {proxy}): is RAY_SERVE_ENABLE_HA_PROXY=0 set?")
        paths = {"haproxy": url, "direct": f"http://127.0.0.1:{replica[0]}", "python_proxy": f"http://127.0.0.1:{proxy[0]}"}
        load0 = conditions.loadavg(None)
        raw = asyncio.run(measure(paths, rounds))
        load1 = conditions.loadavg(None)
    doc = {
        "benchmark": "ingress paths: HAProxy vs direct ingress vs Serve's Python proxy (scripted engine, c=1)",
        "command": results.command("ingress-paths", argv),
        "conditions": {"client_scheduling": client_scheduling, "git": conditions.git_head(),
                       "loadavg_1_5_15_start": load0, "loadavg_1_5_15_end": load1, "cpus": os.cpu_count(),
                       "warm_up": "first round of each API excluded", "paths": paths,
                       "interleaving": "request by request, rotating which path goes first"},
        "summary": {api: {name: summary(xs) for name, xs in per.items()} for api, per in raw.items()},
        "raw_ttft_ms": raw,
    }
    print(f"{'api':10s} {'path':13s} {'n':>4s} {'p50':>7s} {'p90':>7s} {'p99':>7s}  (TTFT ms)")
    for api, per in doc["summary"].items():
        for name, s in per.items():
            print(f"{api:10s} {name:13s} {s['n']:4d} {s['p50']:7.1f} {s['p90']:7.1f} {s.get('p99', float('nan')):7.1f}")
    results.write_json(out.with_suffix(".json"), doc, indent=1, newline=False)
    plot(doc, out.with_suffix(".png"))
    print(f"wrote {out}.json and .png")


if __name__ == "__main__":
    main()

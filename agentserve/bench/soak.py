"""Soak with faults on the multi-node cluster: the load test's traffic for ten minutes while replicas, a Router
and a node die.

The cluster is the one `tests/integration/test_multi_node.py` runs (agentserve/deploy/local_cluster.py): a head, a
CPU pod and two GPU pods on this machine, the Serve config the KubeRay generator emits with two Router replicas, the
state on a real PostgreSQL, scripted engines (no model compute: the serving stack is what is exercised). The
traffic is agentserve/bench/load_test.py's: the three APIs streaming, a share of clients leaving at every stage
(queued, before the body, during prefill, mid-stream), one Responses session continued by `previous_response_id`
throughout, here at `--load` (80%) of the admission capacity rather than above it. The faults, at fractions of the
run: an Engine replica killed (`ray.kill`, Serve starts another), a Router replica killed, a GPU pod's node killed
(raylet and every process on it) and a replacement pod added, and a second Engine replica killed.

Checked after the load: 0 lost requests (every request ends completed, with its API's error, refused with
`retry-after`, or left by its client), 0 leases held on any Router replica, 0 engine requests left running, the
Responses chain never broken and every stored turn still served, and the resident memory of each replica process
that lived through the run, at the start (after a warm-up) and at the end. Results: docs/benchmarks/soak.json and
.png.

    agentserve bench soak                      # --duration 600 --load 0.8; --duration 60 to try it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import httpx
# Imported before local_cluster exports the replicas' Ray environment into this process: Serve reads its settings
# once, and this driver's synchronous `.result()` calls need Serve's default (the handle router on its own loop).
import ray.serve  # noqa: F401

from agentserve.bench import conditions, load_test, results
from agentserve.bench.graph import wait_for

_REPLICA_TITLE = re.compile(r"ray::ServeReplica:[^:]+:([A-Za-z]+)")  # a Serve replica process's title -> deployment
FAULTS = (("Engine", 0.15), ("Router", 0.35), ("node", 0.55), ("Engine", 0.8))


def replica_memory(cluster: Any) -> dict[int, dict[str, Any]]:
    """This cluster's Serve replica processes: pid -> deployment and resident memory (MiB). A replica is a worker
    its node's raylet started (not a child a replica forked, which inherits its title, nor another cluster's)."""
    import psutil

    raylets = set()
    for node in cluster.nodes:
        for info in node.node.all_processes.get("raylet", ()):
            raylets.add(info.process.pid)
    out = {}
    for p in psutil.process_iter(["cmdline", "memory_info", "ppid"]):
        found = _REPLICA_TITLE.match(" ".join(p.info["cmdline"] or ()))
        if found and p.info["ppid"] in raylets and p.info["memory_info"] is not None:
            out[p.pid] = {"deployment": found.group(1), "rss_mib": round(p.info["memory_info"].rss / 2**20, 1)}
    return out


def router_ids(app: str) -> list[str]:
    """The RUNNING Router replicas' ids."""
    from agentserve.deploy.local_cluster import placement

    return sorted(placement()["Router"])


def leases(app: str) -> dict[str, dict[str, Any]]:
    """Each Router replica's leases and lapsed count (each holds the leases of the requests it placed)."""
    out = {}
    for rid in router_ids(app):
        st = load_test.router_stats(app, rid)
        out[rid] = {"in_flight": st["in_flight"], "waiting": st["waiting"], "lapsed": st["counters"].get("lapsed", 0),
                    "by_replica": {r: v["in_flight"] for r, v in st["replicas"].items()}, "answered_by": st["router_id"]}
    return out


def kill_engine(faults: list[dict[str, Any]], t0: float, app: str) -> None:
    """The busiest Engine replica (`ray.kill`); Serve starts another on a GPU pod with room."""
    import ray

    from agentserve.deploy.local_cluster import placement

    replicas = load_test.router_stats(app)["replicas"]
    victim = max(replicas, key=lambda r: replicas[r]["in_flight"])
    actor = next(x for x in load_test.named_actors("Engine") if victim in x["name"])
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
    fault = {"what": "Engine", "t_s": round(time.monotonic() - t0, 2), "replica": victim,
             "in_flight": replicas[victim]["in_flight"]}
    faults.append(fault)
    print(f"killed engine replica {victim} ({fault['in_flight']} in flight) at t={fault['t_s']}s", flush=True)
    _until(fault, t0, lambda: victim not in placement()["Engine"] and len(placement()["Engine"]) >= len(replicas))


def kill_router(faults: list[dict[str, Any]], t0: float, app: str) -> None:
    """One Router replica (`ray.kill`); Serve starts another, which the engines register with."""
    import ray

    from agentserve.bench.router_failover import router_actors
    from agentserve.deploy.local_cluster import placement

    victim, actor = sorted(router_actors().items())[0]
    want = len(router_ids(app))
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
    fault = {"what": "Router", "t_s": round(time.monotonic() - t0, 2), "replica": victim}
    faults.append(fault)
    print(f"killed Router replica {victim} at t={fault['t_s']}s", flush=True)
    _until(fault, t0, lambda: victim not in placement()["Router"] and len(placement()["Router"]) >= want)


def kill_node(faults: list[dict[str, Any]], t0: float, cluster: Any) -> None:
    """A GPU pod's node (its raylet and every process on it), then a replacement pod; on the main thread (Ray
    starts a node's processes only there)."""
    from agentserve.deploy.local_cluster import placement

    victim_replica, node_id = sorted(placement()["Engine"].items())[0]
    node = next(n for n in cluster.nodes if n.id == node_id)
    cluster.kill(node)
    fault = {"what": "node", "t_s": round(time.monotonic() - t0, 2), "node": node_id[:12], "replica": victim_replica}
    faults.append(fault)
    print(f"killed GPU pod {node_id[:12]} (engine {victim_replica}) at t={fault['t_s']}s", flush=True)
    new = cluster.add_gpu_pod()
    fault["replacement_node"] = new.id[:12]
    _until(fault, t0, lambda: new.id in placement()["Engine"].values(), give_up_s=180)


def _until(fault: dict[str, Any], t0: float, replaced: Any, give_up_s: float = 120) -> None:
    """Record in `fault` how long after it the replacement ran (`replaced()` true), or that it did not."""
    give_up = time.monotonic() + give_up_s
    while time.monotonic() < give_up:
        time.sleep(0.5)
        try:
            if replaced():
                fault["replaced_after_s"] = round(time.monotonic() - t0 - fault["t_s"], 2)
                return
        except Exception:  # noqa: BLE001 - the controller is busy: look again
            continue
    fault["replaced_after_s"] = None


def memory_table(samples: list[tuple[float, dict[int, dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per replica process: resident memory at its first and last sample, at the sample halfway between (growth
    in the second half tells a leak from caches filling to their bounds), and every sample."""
    seen: dict[int, list[tuple[float, float]]] = {}
    names: dict[int, str] = {}
    for t, procs in samples:
        for pid, m in procs.items():
            seen.setdefault(pid, []).append((t, m["rss_mib"]))
            names[pid] = m["deployment"]
    first_t, last_t = samples[0][0], samples[-1][0]
    rows = []
    for pid in sorted(seen, key=lambda p: (names[p], p)):
        series = seen[pid]
        lived = series[0][0] == first_t and series[-1][0] == last_t
        mid = min(series, key=lambda s: abs(s[0] - (first_t + last_t) / 2))
        rows.append({
            "pid": pid, "deployment": names[pid], "lived_through": lived,
            "rss_start_mib": series[0][1], "rss_mid_mib": mid[1], "rss_end_mib": series[-1][1],
            "first_s": series[0][0], "last_s": series[-1][0], "samples": series,
        })
    return rows


def plot(st: load_test.Stats, ch: load_test.Chain, faults: list[dict[str, Any]], memory: list[dict[str, Any]],
         duration: float, out: Path) -> None:
    plt = results.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 4.4), gridspec_kw={"width_ratios": [2.4, 1.3]})
    load_test.plot_outcomes(ax1, st, duration, bin_s=5)
    top = ax1.get_ylim()[1]
    for f in faults:
        ax1.axvline(f["t_s"], color="tab:purple", linestyle="--", linewidth=1)
        ax1.annotate(f"{f['what']} killed", (f["t_s"], top * 0.93), color="tab:purple", fontsize=8)
    broken = [t for t, o in ch.timeline if o in ("broken", "lost")]
    ax1.scatter(broken, [top * 0.03] * len(broken), color="black", marker="X", label=f"chain broken/lost ({len(broken)})")
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("requests ended per 5 s")
    ax1.set_title("outcomes over the soak")
    ax1.legend(fontsize=7, loc="lower right")
    for m in memory:
        ts, rss = zip(*m["samples"])
        ax2.plot(ts, rss, marker="." if len(ts) < 3 else None, linewidth=1.2 if m["lived_through"] else 0.8,
                 linestyle="-" if m["lived_through"] else ":", label=f"{m['deployment']} {m['pid']}")
    for f in faults:
        ax2.axvline(f["t_s"], color="tab:purple", linestyle="--", linewidth=0.8)
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("resident memory (MiB)")
    ax2.set_title("each replica process (dotted: started or ended mid-run)")
    ax2.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    results.save_figure(fig, out, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench soak", description=__doc__.split("\n\n")[0])
    load_test.add_arguments(ap)
    ap.set_defaults(duration=600.0, kill_at=0.0, settle_s=60.0, out=str(results.out_path("soak")))
    ap.add_argument("--load", type=float, default=0.8, help="concurrent clients as a share of admission capacity "
                    "(replicas x max-in-flight); --concurrency overrides")
    ap.add_argument("--warm-up-s", type=float, default=30.0, help="load before the first memory sample")
    ap.add_argument("--routers", type=int, default=2)
    ap.add_argument("--chain-turns", type=int, default=200, help="the Responses session's length; then a new one "
                    "(agent sessions run 30-40 turns: a 600-turn chain would measure one session's growth)")
    ap.add_argument("--memory-every-s", type=float, default=30.0, help="resident memory sampled this often")
    a = ap.parse_args(argv)
    a.stages = [s for s in a.stages.split(",") if s]
    if "--concurrency" not in (argv or sys.argv):
        a.concurrency = max(1, round(a.load * a.replicas * a.max_in_flight))
    random.seed(a.seed)

    from agentserve.deploy.local_cluster import APP, deploy, local_cluster, local_config, local_values, placement
    from agentserve.deploy.local_postgres import postgres_server
    from agentserve.ports import free_port

    values = local_values(router_replicas=a.routers)
    engine = {k: v for k, v in load_test.graph_args(a, "")["engine"].items() if k not in ("kind", "block_size")}
    load_before = conditions.loadavg(None)
    with postgres_server() as dsn, local_cluster(values, gpu_pods=a.replicas) as cluster:
        port = free_port()
        cfg = local_config(values, port=port, dsn=dsn, engine=engine, secret_key=secrets.token_urlsafe(32))
        args = cfg["applications"][0]["args"]
        args["model"] = {**args["model"], "aliases": [*args["model"].get("aliases", []), "claude-smollm2"]}
        args["router"] = {**args.get("router", {}), "max_in_flight_per_replica": a.max_in_flight,
                          "max_waiting": a.max_waiting, "max_wait_s": a.max_wait_s, "retry_after_s": 1.0,
                          "lease_s": a.lease_s}
        args["keepalive_interval_s"] = 2.0
        deploy(cfg)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{url}/health", timeout=5).status_code == 200, 240, 1.0, what="the graph")
        wait_for(lambda: len(router_ids(APP)) == a.routers
                 and all(len(v["by_replica"]) == a.replicas for v in leases(APP).values()), 120, 1.0,
                 what="every Router knows every engine")
        at_start = placement()
        print(f"graph up at {url}: {[(d, len(r)) for d, r in at_start.items()]}; {a.concurrency} clients for "
              f"{a.duration:.0f}s against capacity {a.replicas * a.max_in_flight}", flush=True)

        st, ch = load_test.Stats(), load_test.Chain()
        faults: list[dict[str, Any]] = []
        load_samples: list[tuple[float, float]] = []
        memory_samples: list[tuple[float, dict[int, dict[str, Any]]]] = []

        async def sample_memory(t0: float, deadline: float) -> None:
            await asyncio.sleep(min(a.warm_up_s, a.duration * 0.1))
            while time.monotonic() < deadline:
                sample = await asyncio.to_thread(replica_memory, cluster)
                memory_samples.append((round(time.monotonic() - t0, 1), sample))
                await asyncio.sleep(a.memory_every_s)

        async def load(t0: float) -> None:
            deadline = t0 + a.duration
            tasks = [asyncio.create_task(load_test.worker(n, url, a, st, t0, deadline)) for n in range(a.concurrency)]
            tasks.append(asyncio.create_task(load_test.chain_client(url, a, ch, faults, t0, deadline)))
            tasks.append(asyncio.create_task(load_test.sample_load(load_samples, t0, deadline)))
            tasks.append(asyncio.create_task(sample_memory(t0, deadline)))
            await asyncio.gather(*tasks)

        # The clients on a thread of their own; the faults on this one (a node starts only from the main thread).
        t0 = time.monotonic()
        clients = threading.Thread(target=asyncio.run, args=(load(t0),), name="soak-clients")
        clients.start()
        for what, share in FAULTS:
            time.sleep(max(0.0, t0 + a.duration * share - time.monotonic()))
            {"Engine": lambda: kill_engine(faults, t0, APP), "Router": lambda: kill_router(faults, t0, APP),
             "node": lambda: kill_node(faults, t0, cluster)}[what]()
        clients.join()
        wall = time.monotonic() - t0

        settle_until = time.monotonic() + a.settle_s
        while True:
            held = leases(APP)
            if sum(v["in_flight"] for v in held.values()) == 0 or time.monotonic() > settle_until:
                break
            time.sleep(0.5)
        settled_s = round(a.settle_s - max(0.0, settle_until - time.monotonic()), 1)
        engines = load_test.engine_stats(APP)
        left_running = sum(s["active"] for s in engines.values())
        retrieved = sum(1 for _, rid in ch.ids if httpx.get(f"{url}/v1/responses/{rid}", timeout=30).status_code == 200)
        memory_samples.append((round(time.monotonic() - t0, 1), replica_memory(cluster)))
        memory = memory_table(memory_samples)
        at_end = placement()

    o = st.outcomes
    leaked = sum(v["in_flight"] + sum(v["by_replica"].values()) for v in held.values())
    lived = [m for m in memory if m["lived_through"]]
    result = {
        "conditions": conditions.snapshot(load_avg_before=[round(x, 2) for x in load_before],
                                          load_avg_during_1m=load_samples),
        "config": vars(a),
        "cluster": {"gpu_pods": a.replicas, "router_replicas": a.routers,
                    "replicas_at_start": {d: len(r) for d, r in at_start.items()},
                    "replicas_at_end": {d: len(r) for d, r in at_end.items()}},
        "capacity": a.replicas * a.max_in_flight,
        "concurrency": a.concurrency,
        "wall_s": round(wall, 1),
        "requests": sum(o.values()),
        "outcomes": dict(o),
        "lost": o["lost"],
        "lost_examples": st.lost_examples,
        "disconnected_by_stage": {s: st.left[s] for s in load_test.STAGES},
        "faults": faults,
        "responses_chain": {"turns": dict(ch.turns), "chains_started": ch.chains_started, "stored": len(ch.ids),
                            "stored_retrieved_after": retrieved, "examples": ch.examples},
        "after": {"settled_after_s": settled_s, "leases_by_router": held, "engine_requests_left_running": left_running},
        "leaked_leases": leaked,
        "lapsed_leases": sum(v["lapsed"] for v in held.values()),
        "memory": memory,
        "memory_growth_mib": {f"{m['deployment']}:{m['pid']}": {
            "first_half": round(m["rss_mid_mib"] - m["rss_start_mib"], 1),
            "second_half": round(m["rss_end_mib"] - m["rss_mid_mib"], 1)} for m in lived},
        "latency_ms": {"ttft_p50": load_test.pct(st.ttft, 50), "ttft_p90": load_test.pct(st.ttft, 90),
                       "ttft_p99": load_test.pct(st.ttft, 99), "e2e_p50": load_test.pct(st.duration, 50),
                       "e2e_p90": load_test.pct(st.duration, 90), "e2e_p99": load_test.pct(st.duration, 99)},
        "completed_per_s": round(o["completed"] / a.duration, 2),
    }
    out = Path(a.out)
    results.write_json(out.with_suffix(".json"), result)
    plot(st, ch, faults, memory, a.duration, out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("requests", "outcomes", "lost", "faults", "leaked_leases", "lapsed_leases",
                                            "memory_growth_mib", "latency_ms")}, indent=1))
    print(f"{'process':<24}{'RSS start MiB':>15}{'halfway':>10}{'end':>10}  lived through")
    for m in memory:
        span = "yes" if m["lived_through"] else f"{m['first_s']}-{m['last_s']} s"
        print(f"{m['deployment'] + ':' + str(m['pid']):<24}{m['rss_start_mib']:>15}{m['rss_mid_mib']:>10}"
              f"{m['rss_end_mib']:>10}  {span}")
    ok = (o["lost"] == 0 and ch.turns["lost"] == 0 and ch.turns["broken"] == 0 and left_running == 0 and leaked == 0
          and retrieved == len(ch.ids))
    print("PASS" if ok else "FAIL", f"lost={o['lost']} leaked_leases={leaked} engine_requests_left={left_running} "
          f"chain_broken={ch.turns['broken']} stored_retrieved={retrieved}/{len(ch.ids)}")


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main(sys.argv[1:])

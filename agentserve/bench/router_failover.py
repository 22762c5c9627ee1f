"""A Router replica killed under load: routing quality before, during and after, against one Router that never died.

Two runs of the same workload through the real graph (2 scripted engine replicas with a modelled prefix cache,
KV events, session affinity): `one` with a single Router replica left alone, `two` with two Router replicas, one of
which is killed a third of the way in (Serve starts a replacement). Each run drives `--sessions` multi-turn
sessions at once (a shared system prompt, then turns that append the reply and a tool result, `--gap` seconds of
tool time between turns); every turn is a streamed Chat Completions request. Per run and phase (before the kill, the `--window` seconds after it, after):
TTFT p50/p90 of the turns, the cached share of their prompts, and the requests not answered 200. The same run
records what the second Router costs: each Router replica's CPU seconds over `--rest` idle seconds, and TTFT at
c=1 before the load.

    agentserve bench router-failover [--sessions 8] [--turns 40] [--gap 0.5] [--kill-after 8] [--window 10]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

from agentserve.bench import client as sse
from agentserve.bench import conditions, results
from agentserve.bench.graph import running_graph, wait_for
from agentserve.bench.stats import summary

SYSTEM = "You are a coding agent working in a large repository. Follow the project's conventions. " * 30
RULES = [{"match": "", "reply": "Done. Next step?", "itl_ms": 5}]
PHASES = ("before", "during", "after")
_REPLICA_TITLE = re.compile(r"ray::ServeReplica:[^:]+:([A-Za-z]+)")  # a Serve replica process's title -> deployment


def graph_args(routers: int) -> dict[str, Any]:
    return {
        "engine": {"kind": "scripted", "block_size": 16, "rules": RULES, "num_replicas": 2,
                   "cache": {"capacity_blocks": 8192, "prefill_ms_per_token": 0.2}},
        "router": {"replicas": routers},
        "warm_start": {"enabled": False},  # the other run's sessions must not be prefilled from the state backend
    }


def router_actors() -> dict[str, dict[str, Any]]:
    import ray

    return {a["name"].rsplit("#", 1)[-1]: a for a in ray.util.list_named_actors(all_namespaces=True)
            if "#Router#" in a["name"]}


def cpu_at_rest(seconds: float) -> dict[str, float]:
    """CPU seconds the Router replicas' processes, and all Serve replicas' processes, used over `seconds` of no
    traffic (the engines still heartbeat every Router replica). Found by Ray's process titles."""
    import psutil

    def replicas() -> dict[int, tuple[str, psutil.Process]]:
        out = {}
        for p in psutil.process_iter(["cmdline"]):
            title = " ".join(p.info["cmdline"] or ())
            found = _REPLICA_TITLE.match(title)
            if found:
                out[p.pid] = (found.group(1), p)
        return out

    procs = replicas()
    before = {pid: sum(p.cpu_times()[:2]) for pid, (_, p) in procs.items()}
    time.sleep(seconds)
    used = {pid: sum(p.cpu_times()[:2]) - before[pid] for pid, (_, p) in procs.items() if p.is_running()}
    router = sum(v for pid, v in used.items() if procs[pid][0] == "Router")
    return {"router_cpu_s": round(router, 3), "all_replicas_cpu_s": round(sum(used.values()), 3),
            "router_processes": sum(1 for name, _ in procs.values() if name == "Router")}


async def one_turn(client: httpx.AsyncClient, url: str, session: str, messages: list[dict]) -> sse.StreamResult:
    body = {"model": "smollm2", "messages": messages, "max_tokens": 8, "stream": True,
            "stream_options": {"include_usage": True}, "user": session}
    return await sse.stream(client, "chat", f"{url}/v1/chat/completions", body, raise_on_error=False,
                            raise_on_status=False)


async def session(
    client: httpx.AsyncClient, url: str, name: str, turns: int, gap: float, t0: float
) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{name}: fix the failing test"}]
    out = []
    for turn in range(turns):
        started = time.monotonic() - t0
        r = await one_turn(client, url, name, messages)
        row = {"session": name, "turn": turn, "at_s": round(started, 3), "status": r.status}
        if r.status == 200 and r.error is None:
            row.update(ttft_s=r.ttft(("text", "finish")), prompt_tokens=r.prompt_tokens or 0,
                       cached_tokens=r.cached_tokens or 0)
            messages += [{"role": "assistant", "content": r.text},
                         {"role": "user", "content": f"tool output of step {turn} for {name}: " + "ok line " * 40}]
        else:
            row["error"] = r.error or r.last_data[:200]
        out.append(row)
        await asyncio.sleep(gap)  # the harness runs the tool
    return out


async def drive(
    url: str, sessions: int, turns: int, gap: float, kill_after_s: float | None
) -> tuple[list[dict], list[float]]:
    """All sessions at once; the first Router replica (in id order) killed `kill_after_s` in (None: never). Also
    when it was killed and when its replacement was up (seconds into the load; empty without a kill)."""
    import ray

    t0 = time.monotonic()
    killed: list[float] = []

    async def killer() -> None:
        await asyncio.sleep(kill_after_s)
        before = router_actors()
        victim = before[sorted(before)[0]]
        ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]), no_restart=True)
        killed.append(time.monotonic() - t0)
        while not set(await asyncio.to_thread(router_actors)) - set(before):  # until Serve's replacement is up
            await asyncio.sleep(0.2)
        killed.append(time.monotonic() - t0)

    async with httpx.AsyncClient(timeout=120) as client:
        tag = f"{time.time_ns():x}"  # sessions of their own: nothing from an earlier run is cached
        tasks = [session(client, url, f"s{i}-{tag}", turns, gap, t0) for i in range(sessions)]
        extra = [killer()] if kill_after_s is not None else []
        done = await asyncio.gather(*tasks, *extra)
    rows = [row for rows in done[:sessions] for row in rows]
    return rows, killed


def phase_of(at: float, killed_at: float | None, window: float) -> str:
    if killed_at is None or at < killed_at:
        return "before"
    return "during" if at < killed_at + window else "after"


def summarize(rows: list[dict], killed_at: float | None, window: float, kill_at: float) -> dict[str, Any]:
    """Per phase; for the run without a kill, the phases are cut at the same times as the kill run's."""
    cut = killed_at if killed_at is not None else kill_at
    out = {}
    for phase in PHASES:
        xs = [r for r in rows if phase_of(r["at_s"], cut, window) == phase and r["turn"] > 0]
        ok = [r for r in xs if r["status"] == 200 and "ttft_s" in r]
        prompt = sum(r["prompt_tokens"] for r in ok)
        out[phase] = {"turns": len(xs), "failed": len(xs) - len(ok),
                      "ttft_ms": summary([r["ttft_s"] * 1000 for r in ok]),
                      "cached_share": round(sum(r["cached_tokens"] for r in ok) / prompt, 4) if prompt else None}
    return out


def run(routers: int, ns: argparse.Namespace) -> dict[str, Any]:
    with running_graph(graph_args(routers)) as url:
        wait_for(lambda: len(router_actors()) == routers, 60, 0.5, what="router replicas")
        time.sleep(6)  # every engine registered with every Router (heartbeats every 2 s)
        c1 = asyncio.run(_c1(url, ns.c1))
        rest = cpu_at_rest(ns.rest)
        kill_at = ns.kill_after
        rows, times = asyncio.run(drive(url, ns.sessions, ns.turns, ns.gap, kill_at if routers > 1 else None))
    killed_at = round(times[0], 2) if times else None
    replaced = round(times[1], 2) if len(times) > 1 else None
    return {"routers": routers, "killed_at_s": killed_at, "replacement_up_at_s": replaced,
            "c1_ttft_ms": summary([x * 1000 for x in c1]), "at_rest": rest, "rest_s": ns.rest,
            "phases": summarize(rows, killed_at, ns.window, kill_at), "rows": rows}


async def _c1(url: str, n: int) -> list[float]:
    """TTFT of `n` single requests one after another (new sessions each: the routing path, not the cache)."""
    out = []
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(n + 3):
            r = await one_turn(client, url, f"c1-{i}", [{"role": "user", "content": f"ping {i}"}])
            if i >= 3 and r.status == 200:  # 3 warm-up requests
                out.append(r.ttft(("text", "finish")))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench router-failover", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--gap", type=float, default=0.5, help="seconds between a turn and the next (the tool's time)")
    ap.add_argument("--kill-after", type=float, default=8.0, help="seconds into the load")
    ap.add_argument("--window", type=float, default=10.0, help="seconds after the kill counted as 'during'")
    ap.add_argument("--rest", type=float, default=20.0, help="idle seconds over which Router CPU is measured")
    ap.add_argument("--c1", type=int, default=30, help="single requests for the per-request cost")
    ap.add_argument("--out-dir", type=Path, default=None, help="default docs/benchmarks/")
    ns = ap.parse_args(argv)
    out = ns.out_dir or results.out_dir()
    runs = [run(1, ns), run(2, ns)]
    print(f"{'routers':>7} {'phase':<7} {'turns':>5} {'failed':>6} {'TTFT p50':>9} {'p90':>7} {'cached':>7}")
    for r in runs:
        for phase, p in r["phases"].items():
            share = "-" if p["cached_share"] is None else f"{p['cached_share']:.3f}"
            print(f"{r['routers']:>7} {phase:<7} {p['turns']:>5} {p['failed']:>6} {p['ttft_ms']['p50']:>9.1f} "
                  f"{p['ttft_ms']['p90']:>7.1f} {share:>7}")
    for r in runs:
        print(f"routers={r['routers']}: c=1 TTFT p50 {r['c1_ttft_ms']['p50']:.1f} ms p90 {r['c1_ttft_ms']['p90']:.1f}; "
              f"CPU at rest over {ns.rest:g} s: {r['at_rest']}; killed at {r['killed_at_s']} s, "
              f"replacement up at {r['replacement_up_at_s']} s")
    doc = {"command": results.command("router-failover", argv), "conditions": conditions.snapshot(), "runs": runs}
    results.write_json(out / "router_failover.json", doc)
    plot(runs, out / "router_failover.png")


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    plt = results.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for r, color in zip(runs, ("#4c72b0", "#c44e52")):
        ok = sorted((x for x in r["rows"] if "ttft_s" in x and x["turn"] > 0), key=lambda x: x["at_s"])
        label = "1 Router, never killed" if r["routers"] == 1 else "2 Routers, one killed"
        axes[0].plot([x["at_s"] for x in ok], [x["ttft_s"] * 1000 for x in ok], ".", color=color, label=label,
                     alpha=0.7)
        axes[1].plot([x["at_s"] for x in ok], [x["cached_tokens"] / max(1, x["prompt_tokens"]) for x in ok], ".",
                     color=color, label=label, alpha=0.7)
        if r["killed_at_s"] is not None:
            for ax in axes:
                ax.axvline(r["killed_at_s"], color=color, linestyle="--", linewidth=1)
    axes[0].set_ylabel("TTFT (ms)")
    axes[1].set_ylabel("cached share of the prompt")
    for ax in axes:
        ax.set_xlabel("time into the load (s)")
        ax.legend(fontsize=8)
    fig.suptitle("A Router replica killed under load (dashed: the kill)")
    fig.tight_layout()
    results.save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1:])

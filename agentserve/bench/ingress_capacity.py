"""Ingress capacity: how many output tokens per second one ingress replica carries, parsers on.

    agentserve bench ingress-capacity           # writes docs/benchmarks/ingress_capacity.{json,png}
    agentserve bench ingress-capacity --quick

The scripted engine (itl 0: one token per engine step, no model compute) streams replies of reasoning, text
and a tool call through the real graph; every API runs with its reasoning and tool-call parsers on. For each
(API, concurrent streams, output length) it reports the aggregate output tokens/s the client received and the
CPU the ingress replica's process spent (from /proc), as ms of ingress CPU per 1K tokens and the tokens/s one
fully busy ingress core would carry (`capacity_tok_s` = 1000 / ms-per-1K * 1000). On this 2-core machine the
client, proxy and engine share the cores with the ingress, so the aggregate rate is a floor; the per-token
CPU cost is the figure that carries over to a GPU host.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any, Sequence

import httpx
import psutil

from agentserve.bench import client as sse
from agentserve.bench import conditions, results
from agentserve.bench.graph import running_graph
from agentserve.config import ServeArgs

TOOL = {"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
ANTHROPIC_TOOL = {"name": "read_file", "description": "Read a file",
                  "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
RESPONSES_TOOL = {"type": "function", "name": "read_file", "description": "Read a file",
                  "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
LENGTHS = (1024, 2048, 8192, 32768)


def reply(tokens: int) -> str:
    """About `tokens` tokens: reasoning (40%), text (55%), then one tool call."""
    word = " data"  # one token per word in the embedded tokenizer
    think = word * int(tokens * 0.4)
    text = word * int(tokens * 0.55)
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/main.py"}}\n</tool_call>'
    return f"<think>{think}</think>{text}{call}"


# GPU-paced rows: each stream gets a token every `itl` ms, as from an engine stepping all its sequences at once,
# with the offered load fixed at 20K tokens/s (what one B200 TP=4 replica of a 30B MoE produces at 256 sequences).
PACED = ((256, 12.8), (1024, 51.2))


def graph_args(chunks_per_s: float | None = None) -> dict[str, Any]:
    rules = [{"match": f"len{n} ", "reply": reply(n), "itl_ms": 0} for n in LENGTHS]
    rules += [{"match": f"paced{streams} ", "reply": reply(2048), "itl_ms": itl} for streams, itl in PACED]
    return {
        "engine": {"kind": "scripted", "block_size": 16, "rules": rules,
                   **({"max_chunks_per_s": chunks_per_s} if chunks_per_s else {})},
        "model": {"aliases": ["smollm2", "claude-smollm2"], "context_window": 65536},
        "router": {"max_in_flight_per_replica": 4096},
    }


def request(api: str, n_tokens: int, i: int, prefix: str | None = None) -> tuple[str, dict[str, Any]]:
    text = f"{prefix or f'len{n_tokens}'} stream {i}"
    if api == "anthropic":
        return "/v1/messages", {"model": "claude-smollm2", "max_tokens": 60000, "stream": True, "tools": [ANTHROPIC_TOOL],
                                "messages": [{"role": "user", "content": text}]}
    if api == "responses":
        return "/v1/responses", {"model": "smollm2", "stream": True, "input": text, "store": False, "tools": [RESPONSES_TOOL]}
    return "/v1/chat/completions", {"model": "smollm2", "stream": True, "tools": [TOOL],
                                    "stream_options": {"include_usage": True},
                                    "messages": [{"role": "user", "content": text}]}


async def stream(c: httpx.AsyncClient, api: str, n_tokens: int, i: int, prefix: str | None = None) -> int:
    """One stream read without per-event work (its last bytes kept); its output tokens from the final usage."""
    path, body = request(api, n_tokens, i, prefix)
    return sse.usage_from_tail(api, await sse.stream_tail(c, path, body, api=api))


APP = "ingress-capacity"  # its own app name: the process title tells this graph's ingress from any other


def ingress_process() -> psutil.Process:
    found = [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith(f"ray::ServeReplica:{APP}:Ingress")]
    if len(found) != 1:
        raise RuntimeError(f"expected one ingress replica process of {APP}, found {len(found)}")
    return found[0]


def cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


async def level(url: str, api: str, streams: int, n_tokens: int, prefix: str | None = None) -> dict[str, float]:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as c:
        await asyncio.gather(*(stream(c, api, LENGTHS[0], -i - 1) for i in range(min(streams, 8))))  # warm-up
        ing = ingress_process()
        c0, t0 = cpu_s(ing), time.perf_counter()
        tokens = await asyncio.gather(*(stream(c, api, n_tokens, i, prefix) for i in range(streams)))
        dt, cpu = time.perf_counter() - t0, cpu_s(ing) - c0
    total = sum(tokens)
    ms_per_1k = cpu * 1000 / (total / 1000)
    return {
        "streams": streams,
        "output_tokens": n_tokens,
        "total_tokens": total,
        "wall_s": round(dt, 2),
        "agg_tok_s": round(total / dt, 1),
        "ingress_cpu_s": round(cpu, 2),
        "ingress_ms_per_1k_tokens": round(ms_per_1k, 2),
        "capacity_tok_s": round(1e6 / ms_per_1k, 0),
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench ingress-capacity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--apis", default="chat,anthropic,responses")
    ap.add_argument("--chunks-per-s", type=float, default=None, help="engine.max_chunks_per_s (default: the shipped one)")
    ap.add_argument("--only", choices=("concurrency", "length", "gpu_paced"), default=None)
    ap.add_argument("--out", default=None, help="default docs/benchmarks/ingress_capacity.json (--quick: temporary)")
    a = ap.parse_args(argv)
    a.out = a.out or str((results.scratch_path if a.quick else results.out_path)("ingress_capacity.json"))
    apis = a.apis.split(",")
    conc = (64, 256) if a.quick else (64, 256, 1024)
    sweep = (1024, 2048) if a.quick else LENGTHS
    rows: list[dict[str, Any]] = []
    head = conditions.git_head()

    def save() -> None:  # after every row: a run cut short keeps what it measured
        doc = {
            "command": results.command("ingress-capacity", argv),
            "engine_max_chunks_per_s": a.chunks_per_s or ServeArgs().engine.max_chunks_per_s,
            "conditions": conditions.snapshot(
                git_head=head, note="one ingress replica; client, proxy, engine and ingress share the machine's cores"),
            "rows": rows,
        }
        results.write_json(a.out, doc)
        plot(doc, Path(a.out).with_suffix(".png"))

    plan: list[tuple[dict[str, Any], str, int, int, str | None]] = []  # (row labels, api, streams, tokens, prefix)
    if a.only in (None, "concurrency"):
        plan += [({"api": api, "sweep": "concurrency"}, api, n, 2048, None) for api in apis for n in conc]
    if a.only in (None, "length"):
        plan += [({"api": "chat", "sweep": "length"}, "chat", 16, n, None) for n in sweep]
    if a.only in (None, "gpu_paced"):
        plan += [({"api": api, "sweep": "gpu_paced", "itl_ms": itl}, api, streams, 2048, f"paced{streams}")
                 for streams, itl in (PACED[:1] if a.quick else PACED) for api in apis]
    with running_graph(graph_args(a.chunks_per_s), name=APP) as url:
        for labels, api, streams, n_tokens, prefix in plan:
            try:
                row = {**labels, **asyncio.run(level(url, api, streams, n_tokens, prefix))}
                print(_fmt(row), flush=True)
            except Exception as exc:  # noqa: BLE001 - recorded, not hidden: the row says what failed
                row = {**labels, "streams": streams, "output_tokens": n_tokens, "error": f"{type(exc).__name__}: {exc}"[:300]}
                print(f"{labels} streams={streams}: FAILED {row['error']}", flush=True)
            rows.append(row)
            save()


def _fmt(r: dict[str, Any]) -> str:
    return (f"{r['api']:<10} {r['sweep']:<11} streams={r['streams']:<5} out={r['output_tokens']:<6} "
            f"agg={r['agg_tok_s']:>9.0f} tok/s  ingress={r['ingress_ms_per_1k_tokens']:>6.2f} ms CPU/1K tok  "
            f"capacity={r['capacity_tok_s']:>8.0f} tok/s/core")


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = results.pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    doc = {**doc, "rows": [r for r in doc["rows"] if "error" not in r]}
    for api in sorted({r["api"] for r in doc["rows"] if r["sweep"] == "concurrency"}):
        rs = [r for r in doc["rows"] if r["api"] == api and r["sweep"] == "concurrency"]
        a1.plot([r["streams"] for r in rs], [r["agg_tok_s"] for r in rs], "o-", label=f"{api} received")
        a1.plot([r["streams"] for r in rs], [r["capacity_tok_s"] for r in rs], "x--", label=f"{api} per ingress core")
    for api in sorted({r["api"] for r in doc["rows"] if r["sweep"] == "gpu_paced"}):
        rs = [r for r in doc["rows"] if r["api"] == api and r["sweep"] == "gpu_paced"]
        a1.plot([r["streams"] for r in rs], [r["agg_tok_s"] for r in rs], "s:", label=f"{api} GPU-paced (20K offered)")
    a1.axhline(20000, color="k", lw=0.8, ls=":", label="target 20K tok/s")
    a1.set_xscale("log", base=2)
    a1.set_xlabel("concurrent streams (2K-token outputs)")
    a1.set_ylabel("output tokens/s")
    a1.legend(fontsize=7)
    rs = [r for r in doc["rows"] if r["sweep"] == "length"]
    a2.plot([r["output_tokens"] for r in rs], [r["ingress_ms_per_1k_tokens"] for r in rs], "o-")
    a2.set_xscale("log", base=2)
    a2.set_ylim(bottom=0)
    a2.set_xlabel("output tokens per stream (16 streams, chat)")
    a2.set_ylabel("ingress CPU ms per 1K tokens")
    fig.suptitle("One ingress replica, scripted engine (itl 0), parsers on")
    fig.tight_layout()
    results.save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    main()

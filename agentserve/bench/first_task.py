"""Benchmark: a newcomer's first harness task on `make serve`, stage by stage, then the same after a restart.

    agentserve bench first-task [--harnesses claude-code,codex,openclaw] [--rounds fresh,restart]
                                [--serve-config serve_config.yaml] [--label NAME]

Runs `make serve` itself with an empty data directory (no kept turns, no sessions: a fresh machine's server), waits
until it is ready, then runs each harness CLI, configured as docs/HARNESSES.md says, on one task that needs one tool
call: write `hello.txt` with the shell. Every request passes through a recording proxy (bench/recording_proxy.py,
HTTP and Codex's WebSocket) that notes when it arrived (seconds after the server was ready), its first and last
output as the harness received them, and the prompt / cached / output tokens the response reported. Rounds:
`fresh` starts the server; `again` runs the same tasks in new sessions on the same server (a user's next task);
`restart` stops the server and starts it again on the same data directory (what a redeploy keeps: the state
backend), then runs them again; `restart-cold` the same with the warm start off (serve/warm_start.py). Each harness
works in the same directory every round.

A harness passes when it exits 0 with no API error; whether the small model did the task (hello.txt holds "hi") is
recorded beside it. Writes docs/benchmarks/first_task[_LABEL].json and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx

from agentserve.bench import conditions, harness, results
from agentserve.bench.recording_proxy import Exchange, RecordingProxy

ROOT = results.REPO
BIN = ROOT / ".harness" / "node_modules" / ".bin"
NODE_BIN = ROOT / ".venv" / "bin"
TASK = "Use the Bash tool to run: echo hi > hello.txt"
HARNESS_TIMEOUT_S = 600


@dataclass(frozen=True)
class Run:
    """One harness invocation: the command, its environment, and how its output says it failed."""

    cmd: list[str]
    env: dict[str, str]
    api_error: Callable[[subprocess.CompletedProcess], str | None]


def _claude(url: str, work: Path, home: Path) -> Run:
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    env = harness.claude_env(url, home) | {  # docs/HARNESSES.md, "Against make serve"
        "API_TIMEOUT_MS": "900000",
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "32768",
    }
    cmd = [str(BIN / "claude"), "-p", TASK, "--allowedTools", "Bash", "--max-turns", "3",
           "--output-format", "stream-json", "--verbose"]

    def api_error(proc: subprocess.CompletedProcess) -> str | None:
        lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        result = next((m for m in reversed(lines) if m.get("type") == "result"), None)
        if result is None:
            return f"no result line (exit {proc.returncode})"
        text = json.dumps(lines)
        if result.get("is_error") or "API Error" in text:
            return str(result.get("result") or result.get("subtype"))[:300]
        return None

    return Run(cmd, env, api_error)


def _codex(url: str, work: Path, home: Path) -> Run:
    subprocess.run(
        [str(NODE_BIN / "python"), "-m", "agentserve.cli", "codex-config", "--codex-home", str(home),
         "--base-url", f"{url}/v1", "--serve-config", str(ROOT / "serve_config.yaml")],
        cwd=ROOT, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home),
           "AGENTSERVE_API_KEY": "first-task", "NO_PROXY": "127.0.0.1,localhost"}
    cmd = [str(BIN / "codex"), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
           TASK.replace("the Bash tool", "the shell tool")]

    def api_error(proc: subprocess.CompletedProcess) -> str | None:
        events = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        bad = [e for e in events if e.get("type") in ("error", "turn.failed")]
        if bad:
            return json.dumps(bad[-1])[:300]
        return None if proc.returncode == 0 else proc.stderr[-300:]

    return Run(cmd, env, api_error)


def _openclaw(url: str, work: Path, home: Path) -> Run:
    config = home / "openclaw.json"
    home.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({  # docs/HARNESSES.md, "OpenClaw"
        "agents": {"defaults": {"model": {"primary": "agentserve/smollm2"}}},
        "models": {"mode": "merge", "providers": {"agentserve": {
            "baseUrl": url, "apiKey": "first-task", "api": "anthropic-messages",
            "models": [{"id": "smollm2", "name": "SmolLM2 135M (agentserve)", "reasoning": True, "input": ["text"],
                        "contextWindow": 32768, "maxTokens": 2048,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}],
        }}},
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "OPENCLAW_"))}
    env.update({"HOME": str(home), "PATH": f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"})
    cmd = [str(BIN / "openclaw"), "agent", "exec", "--config", str(config), "--cwd", str(work), "--json",
           "--model", "agentserve/smollm2", "--timeout", str(HARNESS_TIMEOUT_S - 30),
           TASK.replace("the Bash tool", "the exec tool")]

    def api_error(proc: subprocess.CompletedProcess) -> str | None:
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            return f"no JSON envelope (exit {proc.returncode}): {proc.stderr[-200:]}"
        return None if out.get("ok") and out.get("status") == "ok" else json.dumps(out)[:300]

    return Run(cmd, env, api_error)


HARNESSES: dict[str, Callable[[str, Path, Path], Run]] = {
    "claude-code": _claude, "codex": _codex, "openclaw": _openclaw,
}


class Server:
    """`make serve` on a data directory of its own; ready when it answers a one-token completion (as `bench idle`
    counts start-up): every deployment is up and the engine has served."""

    def __init__(self, data_dir: Path, serve_config: str, log: Path, url: str = "http://127.0.0.1:8000") -> None:
        self.data_dir, self.serve_config, self.log, self.url = data_dir, serve_config, log, url
        self._proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 900, serve_config: str | None = None) -> float:
        """Start it (on `serve_config` instead of its own, for this start); the seconds until it was ready."""
        t0 = time.perf_counter()
        env = os.environ | {"AGENTSERVE_DATA_DIR": str(self.data_dir), "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            ["make", "-o", ".venv/.agentserve-installed", "serve", f"SERVE_CONFIG={serve_config or self.serve_config}"],
            cwd=ROOT, env=env, start_new_session=True, stdout=self.log.open("a"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        while time.perf_counter() - t0 < timeout_s:
            if self._proc.poll() is not None:
                raise SystemExit(f"make serve exited {self._proc.returncode}: see {self.log}")
            try:
                r = httpx.post(f"{self.url}/v1/chat/completions", timeout=30, json={
                    "model": "smollm2", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
                if r.status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise SystemExit(f"make serve not ready after {timeout_s:.0f} s: see {self.log}")

    def stop(self) -> None:
        if self._proc is None:
            return
        os.killpg(self._proc.pid, signal.SIGINT)
        try:
            self._proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None
        subprocess.run([str(NODE_BIN / "ray"), "stop", "--force"], capture_output=True, timeout=120)


def without_warm_start(serve_config: str, scratch: Path) -> str:
    """A copy of the serve config with every application's warm start off (round `restart-cold`)."""
    import yaml

    doc = yaml.safe_load((ROOT / serve_config).read_text())
    for app in doc["applications"]:
        app.setdefault("args", {})["warm_start"] = {"enabled": False}
    out = scratch / "serve_config.no_warm_start.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(out)


def request_record(ex: Exchange, ready_at: float) -> dict[str, Any]:
    try:
        body = json.loads(ex.body) if ex.body else {}
    except ValueError:
        body = {}
    body = body.get("response", body) if ex.method == "WS" else body
    return {
        "api": "responses (websocket)" if ex.method == "WS" else ex.path.split("?")[0],
        "at_s": round(ex.started - ready_at, 2),
        "ttft_s": None if ex.ttft_s is None else round(ex.ttft_s, 2),
        "total_s": None if ex.total_s is None else round(ex.total_s, 2),
        "status": ex.status,
        "tokens": ex.tokens(),
        "max_tokens": body.get("max_tokens", body.get("max_output_tokens")),
        "tools": len(body.get("tools") or ()),
        "clamped": ex.headers.get("x-agentserve-max-tokens-clamped"),
        "output_head": ex.output_text()[:200],
        "output_tail": ex.output_text()[-300:],
    }


def run_harness(name: str, proxy: RecordingProxy, ready_at: float, root: Path) -> dict[str, Any]:
    """One task in a new session, in the same directory every round (a harness's prompt names it) emptied first."""
    work, home = root / f"{name}-work", root / f"{name}-home"
    for d in (work, home):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    run = HARNESSES[name](proxy.url, work, home)
    before = len(proxy.model_requests())
    started = time.perf_counter()
    try:
        proc = subprocess.run(run.cmd, cwd=work, env=run.env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=HARNESS_TIMEOUT_S)  # fmt: skip
        error = run.api_error(proc)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        error, code = f"did not finish within {HARNESS_TIMEOUT_S} s", None
    wall = time.perf_counter() - started
    hello = work / "hello.txt"
    requests = [request_record(e, ready_at) for e in proxy.model_requests()[before:]]
    return {
        "harness": name, "exit": code, "api_error": error, "passed": code == 0 and error is None,
        "task_done": hello.exists() and hello.read_text().strip() == "hi",
        "started_at_s": round(started - ready_at, 2), "wall_s": round(wall, 1), "requests": requests,
    }


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = results.pyplot()
    rows = [(f"{r['round']}: {h['harness']}", h) for r in doc["rounds"] for h in r["harnesses"]]
    fig, ax = plt.subplots(figsize=(10, 0.7 * len(rows) + 1.5))
    for y, (_, h) in enumerate(rows):
        t0 = h["started_at_s"]
        for q in h["requests"]:
            at, total, ttft = q["at_s"] - t0, q["total_s"] or 0, q["ttft_s"] or q["total_s"] or 0
            ax.barh(y, ttft, left=at, color="tab:red", height=0.5)
            ax.barh(y, max(total - ttft, 0), left=at + ttft, color="tab:blue", height=0.5)
        ax.plot([h["wall_s"]], [y], "k|", markersize=14)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the harness started (red: to first token, blue: to last; |: harness exited)")
    ax.set_title("first harness task on make serve")
    results.save_figure(fig, path, bbox_inches="tight")


def table(doc: dict[str, Any]) -> str:
    lines = ["| round | harness | passed | task done | wall | requests | first request TTFT | sum of TTFTs |"
             " prompt / cached / output tokens |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for r in doc["rounds"]:
        for h in r["harnesses"]:
            qs = h["requests"]
            first = qs[0]["ttft_s"] if qs else None
            ttfts = sum(q["ttft_s"] or 0 for q in qs)
            toks = "; ".join(f"{q['tokens']['prompt']}/{q['tokens']['cached']}/{q['tokens']['output']}" for q in qs)
            lines.append(f"| {r['round']} | {h['harness']} | {h['passed']} | {h['task_done']} | {h['wall_s']:.0f} s |"
                         f" {len(qs)} | {first} s | {ttfts:.1f} s | {toks} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench first-task")
    ap.add_argument("--harnesses", default="claude-code,codex,openclaw")
    ap.add_argument("--rounds", default="fresh,again,restart,restart-cold",
                    help="fresh: a new server on an empty data directory; again: the same server; restart: the same "
                         "data directory, a new server; restart-cold: the same without its warm start")  # fmt: skip
    ap.add_argument("--serve-config", default="serve_config.yaml")
    ap.add_argument("--label", default="", help="suffix of the output files")
    ns = ap.parse_args(argv)
    names = [n for n in ns.harnesses.split(",") if n]
    unknown = set(names) - set(HARNESSES)
    if unknown:
        raise SystemExit(f"unknown harnesses {sorted(unknown)}; known: {sorted(HARNESSES)}")
    scratch = Path(tempfile.mkdtemp(prefix="first-task-"))
    server = Server(scratch / "data", ns.serve_config, scratch / "serve.log")
    stem = "first_task" + (f"_{ns.label}" if ns.label else "")
    doc: dict[str, Any] = {
        "command": results.command("first-task", argv),
        "conditions": conditions.snapshot(git=conditions.git_state(), machine=conditions.machine(),
                                          serve_config=ns.serve_config, task=TASK),
        "rounds": [],
    }
    try:
        rounds = ns.rounds.split(",")
        for i, round_name in enumerate(rounds):
            if round_name not in ("fresh", "again", "restart", "restart-cold") or (round_name == "fresh") != (i == 0):
                raise SystemExit("--rounds: fresh first, then again / restart / restart-cold")
            ready_s = None
            if round_name != "again":
                server.stop()
                cold = without_warm_start(ns.serve_config, scratch) if round_name == "restart-cold" else None
                ready_s = server.start(serve_config=cold)
                ready_at = time.perf_counter()
                print(f"{round_name}: make serve ready after {ready_s:.1f} s (load {conditions.loadavg()})",
                      flush=True)  # fmt: skip
            record: dict[str, Any] = {"round": round_name, "ready_after_s": None if ready_s is None else round(ready_s, 1),
                                      "loadavg_at_start": conditions.loadavg(), "harnesses": []}
            with RecordingProxy(server.url) as proxy:
                for name in names:
                    h = run_harness(name, proxy, ready_at, scratch)
                    record["harnesses"].append(h)
                    print(f"  {name}: passed {h['passed']} task {h['task_done']} wall {h['wall_s']:.0f} s, "
                          f"{len(h['requests'])} requests, error {h['api_error']}", flush=True)
            record["loadavg_at_end"] = conditions.loadavg()
            doc["rounds"].append(record)
            results.write_json(results.out_path(f"{stem}.json"), doc)
    finally:
        server.stop()
    plot(doc, results.out_path(f"{stem}.png"))
    print(table(doc))
    print(f"wrote {results.out_path(stem + '.json')}")


if __name__ == "__main__":
    main(sys.argv[1:])

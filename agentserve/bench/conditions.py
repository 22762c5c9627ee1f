"""One record of the conditions a benchmark ran under: load average, git head, the client's scheduling, the machine.

Field names already cited by docs/BENCHMARKS.md stay as each benchmark wrote them; the values come from here.

The client's place on the CPU, the same for every contender (`prioritize_client`): Linux groups tasks by session for
CPU fairness (autogroup, /proc/sys/kernel/sched_autogroup_enabled). The servers a benchmark starts run in sessions of
their own, so on a 2-core machine the client competes with a whole server as one group; against the graph (many
processes beside vLLM's spinning engine core and worker) the client's thread waited runnable for 1-6 s at a time (its
/proc/thread-self/schedstat run delay) while every server-side timestamp was on time, and what the client recorded was
its own wait: c=8 TTFT p50 1.2-4.4 s against 0.77-0.79 s with autogroup off, and no wait over 50 ms against `vllm
serve`. On a GPU host the harness runs on another machine; raising the client's session in the scheduler
(`/proc/self/autogroup` nice -10, root only) gives it that: a client that reads as soon as bytes arrive, for every
contender alike. Benchmarks record what was applied (`client_scheduling`).
"""

from __future__ import annotations

import atexit
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from agentserve.bench.results import REPO

AUTOGROUP = Path("/proc/self/autogroup")
CLIENT_AUTOGROUP_NICE = -10


def loadavg(digits: int | None = 2) -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    load = os.getloadavg()
    return [round(x, digits) if digits is not None else x for x in load]


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_head(short: bool = True) -> str:
    """The commit under test ("" outside a git checkout)."""
    return _git("rev-parse", *(("--short",) if short else ()), "HEAD")


def git_state() -> dict[str, Any]:
    """The commit under test, and which tracked files differed from it (the benchmark runs the working tree)."""
    return {"head": git_head(short=False), "modified": _git("diff", "--name-only", "HEAD").splitlines()}


def prioritize_client() -> str:
    """Raise this process's session group until exit; return what holds, for the benchmark's recorded conditions."""
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if not enabled.exists() or enabled.read_text().strip() != "1":
        return "autogroup off: client and servers scheduled per task"
    before = AUTOGROUP.read_text().split("nice")[-1].strip()
    try:
        AUTOGROUP.write_text(str(CLIENT_AUTOGROUP_NICE))
        atexit.register(AUTOGROUP.write_text, before)  # the session is the caller's shell's: give it back
    except OSError as exc:
        return f"autogroup on, client's session not raised ({exc.strerror}): client waits can count in its figures"
    return f"autogroup on, client's session at nice {CLIENT_AUTOGROUP_NICE} (servers' sessions at 0)"


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version()}


def snapshot(*, client_scheduling: str | None = None, **extra: Any) -> dict[str, Any]:
    """The usual `conditions` block: load average, git head, cores (and the client's scheduling when applied)."""
    out: dict[str, Any] = {"loadavg": loadavg(), "git_head": git_head(), "cpus": os.cpu_count()}
    if client_scheduling is not None:
        out["client_scheduling"] = client_scheduling
    out.update(extra)
    return out

"""An engine's processes end with the process that started them, however it ends: the guard kills them once their
starter is SIGKILLed (no cleanup of its own runs), and never a process that merely reuses a guarded pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agentserve.engines import process_guard

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd: Linux only")

# A stand-in for the Engine replica: it starts a long-lived child (the engine core's place), optionally guards it,
# prints the child's pid and waits to be killed.
STARTER = textwrap.dedent(
    """
    import subprocess, sys, time
    from agentserve.engines import process_guard
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if sys.argv[1] == "guarded":
        process_guard.guard(process_guard.descendants(__import__("os").getpid()))
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    return process_guard.start_time(pid) is not None and b"Z" not in open(f"/proc/{pid}/stat", "rb").read().split()[2]


def _orphan_after_kill(mode: str) -> tuple[int, bool]:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, mode], stdout=subprocess.PIPE, text=True)
    child = int(starter.stdout.readline())
    time.sleep(0.3)  # the guard is up
    os.kill(starter.pid, signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    return child, alive


def test_the_guarded_child_ends_with_its_killed_starter():
    _, alive = _orphan_after_kill("guarded")
    assert not alive


def test_without_the_guard_the_child_lives_on():  # what the guard is for
    _, alive = _orphan_after_kill("unguarded")
    assert alive


def test_a_reused_pid_is_left_alone():
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wrong_start = process_guard.start_time(bystander.pid) - 1  # as if the guarded process had this pid before
        assert process_guard.main([str(_ended_pid()), f"{bystander.pid}:{wrong_start}"]) == 0
        assert _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


def _ended_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid

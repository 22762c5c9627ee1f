"""An engine's processes end with the process that started them.

vLLM runs its engine core and workers as child processes of the Engine replica. A replica that ends normally shuts
them down; one killed outright (`ray stop --force`, the OOM killer, the terminal of `make serve` closed) left them
running: SmolLM2-135M's engine kept about 4.8 GB of RAM and its KV cache, and the next start failed with vLLM's
"Available memory ... is less than requested memory for kv". A guard process, started once the engine is up, waits
on the replica's pidfd (no polling, no CPU at rest) and kills what is left of the engine when the replica is gone.
Each target is named with its start time, so a pid the kernel has since given to another process is left alone.

    python -I -S agentserve/engines/process_guard.py <watched pid> <pid>:<start time> ...
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry))
    out, frontier = [], [pid]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, [])]
        out.extend(frontier)
    return out


def guard(targets: Iterable[int], watched: int | None = None) -> subprocess.Popen | None:
    """Start a guard that kills `targets` once `watched` (this process by default) has ended. Linux only (pidfd);
    elsewhere, or with no target, nothing is started."""
    if not hasattr(os, "pidfd_open"):
        return None
    named = [f"{pid}:{t}" for pid in targets if (t := start_time(pid)) is not None]
    if not named:
        return None
    # The file run alone, standard library only (-I -S): a few MB of memory, not this package's imports.
    argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), str(watched or os.getpid()), *named]
    # Its own session: a signal to the replica's process group (a terminal's Ctrl-C) does not end it first.
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)


def main(argv: list[str]) -> int:
    watched, targets = int(argv[0]), [tuple(map(int, t.split(":"))) for t in argv[1:]]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fd = os.pidfd_open(watched)
    except ProcessLookupError:  # already gone
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable once the watched process has ended
    for pid, started in targets:
        if start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

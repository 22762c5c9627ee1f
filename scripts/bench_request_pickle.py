#!/usr/bin/env python
"""Benchmark: what a PreprocessedRequest costs to cross a replica boundary, by prompt length.

    .venv/bin/python scripts/bench_request_pickle.py [--tokens 1000,4000,20000,100000] [--samples 300]

Serve pickles a handle call's arguments and results with cloudpickle and unpickles them with pickle; the request
crosses twice on every request's critical path (Preprocessor -> Ingress as the result of `preprocess`, Ingress ->
Engine as the argument of `generate`). Per prompt length and vocabulary (SmolLM2's 49,152 ids, Qwen3's 151,936:
ids past 65,535 pickle wider as list items), the same request is timed through cloudpickle.dumps and pickle.loads
with the token ids packed (as shipped) and as a list of ints (the class's packing switched off for the run).
p50 / p90 / p99 of raw samples after 20 warm-up rounds; the machine's load average is recorded. Writes
docs/benchmarks/request_pickle.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "benchmarks" / "request_pickle"
VOCABS = {"smollm2": 49_152, "qwen3": 151_936}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


@contextmanager
def packing(on: bool) -> Iterator[None]:
    from pydantic import BaseModel

    from agentserve.protocol import PreprocessedRequest

    if on:
        yield
        return
    saved = PreprocessedRequest.__getstate__, PreprocessedRequest.__setstate__
    PreprocessedRequest.__getstate__, PreprocessedRequest.__setstate__ = BaseModel.__getstate__, BaseModel.__setstate__
    try:
        yield
    finally:
        PreprocessedRequest.__getstate__, PreprocessedRequest.__setstate__ = saved


def request(tokens: int, vocab: int, rng: random.Random):
    from agentserve.protocol import PreprocessedRequest, SamplingParams

    return PreprocessedRequest(
        request_id="req_bench",
        model="m",
        token_ids=[rng.randrange(vocab) for _ in range(tokens)],
        block_hashes=[rng.getrandbits(64) for _ in range(tokens // 128)],
        sampling=SamplingParams(),
        max_tokens=1024,
    )


def timed(req, samples: int, warmup: int = 20) -> dict[str, list[float]]:
    from ray import cloudpickle

    out: dict[str, list[float]] = {"dumps_ms": [], "loads_ms": [], "round_trip_ms": []}
    for i in range(warmup + samples):
        t0 = time.perf_counter()
        blob = cloudpickle.dumps(req)
        t1 = time.perf_counter()
        back = pickle.loads(blob)
        t2 = time.perf_counter()
        if i >= warmup:
            out["dumps_ms"].append((t1 - t0) * 1e3)
            out["loads_ms"].append((t2 - t1) * 1e3)
            out["round_trip_ms"].append((t2 - t0) * 1e3)
    assert back == req and type(back.token_ids) is list
    out["bytes"] = [len(blob)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1000,4000,20000,100000")
    ap.add_argument("--samples", type=int, default=300)
    a = ap.parse_args()
    rng = random.Random(0)
    rows = []
    for vocab_name, vocab in VOCABS.items():
        for tokens in (int(t) for t in a.tokens.split(",")):
            req = request(tokens, vocab, rng)
            row = {"vocab": vocab_name, "tokens": tokens, "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
            # Interleaved in blocks, so a slow minute of the machine weighs on both forms alike.
            raw: dict[str, dict[str, list[float]]] = {"packed": {}, "list": {}}
            for block in range(4):
                for form in (("packed", "list") if block % 2 == 0 else ("list", "packed")):
                    with packing(form == "packed"):
                        got = timed(req, a.samples // 4)
                    for k, v in got.items():
                        raw[form].setdefault(k, []).extend(v if k != "bytes" else v[:1])
            for form, got in raw.items():
                row[form] = {
                    "bytes": got["bytes"][0],
                    **{
                        k: {"n": len(v), "p50": round(pct(v, 0.5), 4), "p90": round(pct(v, 0.9), 4),
                            "p99": round(pct(v, 0.99), 4)}
                        for k, v in got.items() if k.endswith("_ms")
                    },
                }
            row["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
            rows.append(row)
            p, l = row["packed"]["round_trip_ms"], row["list"]["round_trip_ms"]
            print(f"{vocab_name:8} {tokens:>7} tokens  round trip p50/p90 ms: list {l['p50']:.3f}/{l['p90']:.3f}  "
                  f"packed {p['p50']:.3f}/{p['p90']:.3f}  ({l['p50'] / p['p50']:.2f}x)  "
                  f"bytes {row['list']['bytes']} -> {row['packed']['bytes']}")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {
        "benchmark": "request_pickle",
        "command": " ".join(["scripts/bench_request_pickle.py", *sys.argv[1:]]),
        "conditions": {"git": head, "cpus": os.cpu_count(), "samples_per_form": a.samples, "warmup_rounds": 20},
        "rows": rows,
    }
    OUT.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    plot(rows)
    print(f"wrote {OUT.with_suffix('.json')} and {OUT.with_suffix('.png')}")


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for vocab in VOCABS:
        sub = [r for r in rows if r["vocab"] == vocab]
        xs = [r["tokens"] for r in sub]
        for form, style in (("list", "--"), ("packed", "-")):
            ax.plot(xs, [r[form]["round_trip_ms"]["p50"] for r in sub], style, marker="o", label=f"{vocab}, {form}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("cloudpickle.dumps + pickle.loads, p50 ms")
    ax.set_title("One PreprocessedRequest across a replica boundary")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT.with_suffix(".png"), dpi=110)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Joins hop_hook traces with a bench_vs_vllm JSON (c=1 phases, requests in order): for each request, the client's
TTFT against the ingress's admit -> first content chunk handed to Serve, and what neither side explains (time
before the ingress handler or after its send: proxy and HTTP).

    PYTHONPATH=scripts/hop_trace .venv/bin/agentserve bench vs-vllm --contenders graph --concurrency 1 ...
    python scripts/hop_trace/analyze.py /tmp/hop_trace <bench json>
"""
import glob
import json
import sys
from collections import defaultdict


def main(trace_dir: str, bench_json: str) -> None:
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for f in glob.glob(f"{trace_dir}/*.jsonl"):
        for line in open(f):
            r = json.loads(line)
            if "id" in r:
                by[r["id"]][r["k"]].append(r["t"])
    reqs = sorted((ev for ev in by.values() if ev["admit_start"] and len(ev["engine_out"]) >= 16),
                  key=lambda ev: ev["admit_start"][0])
    bench = json.load(open(bench_json))
    client = [r for p in bench["phases"] if p["concurrency"] == 1 and p.get("server", "graph") == "graph" for r in p["requests"]]
    rows = []
    for ev, c in zip(reqs[-len(client):], client):
        a0, e0 = ev["admit_start"][0], min(ev["engine_out"])
        first_send = min(t for t in ev["body_send"] if t >= e0)
        rows.append({"client_ttft": c["ttft"], "admit": ev["admit_end"][0] - a0 if ev["admit_end"] else float("nan"),
                     "engine_first": e0 - a0, "ingress_first_send": first_send - a0,
                     "unexplained": c["ttft"] - (first_send - a0)})
    slow = sorted(rows, key=lambda r: -r["client_ttft"])[: max(1, len(rows) // 10)]
    print("slowest tenth, ms:", *(" ".join(f"{k} {1000 * v:.0f}" for k, v in r.items()) for r in slow), sep="\n  ")
    for k in ("client_ttft", "admit", "engine_first", "ingress_first_send", "unexplained"):
        xs = sorted(r[k] for r in rows)
        n = len(xs)
        print(f"{k:20s} n {n:4d}  p50 {1000 * xs[n // 2]:7.1f} ms  p90 {1000 * xs[int(n * .9)]:7.1f} ms  "
              f"max {1000 * xs[-1]:7.1f} ms")
    print(f"requests with > 150 ms unexplained: {sum(r['unexplained'] > 0.15 for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])

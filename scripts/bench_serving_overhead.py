"""The serving layer's own latency: the real graph with the scripted engine (no model compute), one stream at a time.

    .venv/bin/python scripts/bench_serving_overhead.py     # prints medians, writes docs/benchmarks/serving_overhead.json

`GET /v1/models` is proxy -> ingress; `/v1/tokenize` adds one Preprocessor call; chat TTFT (first content chunk of a
stream) adds the Preprocessor, Router and engine-stream hops. The ingress's own histograms split the chat path.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import running_graph  # noqa: E402

ARGS = {"engine": {"kind": "scripted", "block_size": 16, "rules": [{"match": "", "reply": "Hello there friend"}]}}
N = 30


def main() -> None:
    with running_graph(ARGS) as url:
        c = httpx.Client(timeout=60)

        def timed(fn) -> float:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1000

        def chat_ttft() -> float:
            t = time.perf_counter()
            body = {"model": "smollm2", "stream": True, "messages": [{"role": "user", "content": f"hi {time.time()}"}]}
            with c.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if '"content":"H' in line:
                        return (time.perf_counter() - t) * 1000
            raise RuntimeError("no content chunk")

        for _ in range(5):
            c.get(f"{url}/v1/models")
            chat_ttft()
        result = {
            "models_ms": statistics.median(timed(lambda: c.get(f"{url}/v1/models")) for _ in range(N)),
            "tokenize_ms": statistics.median(
                timed(lambda: c.post(f"{url}/v1/tokenize", json={"prompt": "hello"})) for _ in range(N)
            ),
            "chat_ttft_ms": statistics.median(chat_ttft() for _ in range(N)),
        }
        sums = {}
        for line in c.get(f"{url}/metrics").text.splitlines():
            for name in ("agentserve_queue_time_seconds", "agentserve_time_to_first_token_seconds"):
                for kind in ("_sum", "_count"):
                    if line.startswith(name + kind) and 'stage="route"' not in line:
                        key = name + kind + ("_preprocess" if "preprocess" in line else "")
                        sums[key] = float(line.rsplit(" ", 1)[1])
        result["ingress_ttft_mean_ms"] = 1000 * sums["agentserve_time_to_first_token_seconds_sum"] / sums[
            "agentserve_time_to_first_token_seconds_count"]
        result["preprocess_call_mean_ms"] = 1000 * sums["agentserve_queue_time_seconds_sum_preprocess"] / sums[
            "agentserve_queue_time_seconds_count_preprocess"]
    for k, v in result.items():
        print(f"{k:<26} {v:8.1f}")
    out = ROOT / "docs" / "benchmarks" / "serving_overhead.json"
    out.write_text(json.dumps({"command": "python scripts/bench_serving_overhead.py", "requests": N, **result}, indent=2))


if __name__ == "__main__":
    main()

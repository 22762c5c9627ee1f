"""Render the Grafana dashboard's metrics from a local run into docs/dashboard.png.

Starts the real graph (scripted engines, 2 replicas, a modelled prefix cache), drives multi-turn agent
sessions against it, scrapes Ray's metrics endpoint (what Prometheus scrapes on each KubeRay pod) and the
ingress's /metrics every few seconds, and plots the dashboard's panels from those scrapes with the same
arithmetic as its PromQL (rates of counters, quantiles of bucket deltas, ratios of rates).

    agentserve bench dashboard [--seconds 60] [--out docs/dashboard.png]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import httpx

from agentserve.bench import client as sse
from agentserve.bench import results
from agentserve.bench.scrape import Sample, scrape
from agentserve.ports import free_port

ROOT = results.REPO
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TOOL = {"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}
RULES = [
    {"match": "weather", "reply": '<tool_call>\n{"name": "run", "arguments": {"cmd": "ls"}}\n</tool_call>'
     + " Then I will summarise what I found in the listing. " * 4, "itl_ms": 15},
    {"match": "broken", "reply": '<tool_call>\n{"name": "run", "arguments": {"cmd": </tool_call> sorry', "itl_ms": 15},
    {"match": "", "reply": "Done. " + "Here is a longer explanation of the change. " * 6, "itl_ms": 15},
]
SYSTEM = "You are a coding agent. Follow the repository conventions. " * 150  # ~1.5k shared prefix tokens
def session(url: str, sid: int, stop: threading.Event) -> None:
    rng = random.Random(sid)
    messages = [{"role": "system", "content": SYSTEM + f" Session {sid}."}]
    while not stop.is_set():
        ask = rng.choice(["check the weather tool", "explain the diff", "broken call please", "explain more"])
        messages.append({"role": "user", "content": f"{ask} (turn {len(messages)})"})
        body = {"model": "smollm2", "messages": messages, "tools": [TOOL], "stream": True}
        text = ""
        try:
            with httpx.Client(timeout=120) as c:
                text = sse.stream_sync(c, "chat", f"{url}/v1/chat/completions", body, raise_on_error=False).text
        except Exception as exc:  # noqa: BLE001 - a load generator keeps going
            print(f"session {sid}: {exc!r}", flush=True)
        messages.append({"role": "assistant", "content": text or "ok"})
        if len(messages) > 14:
            messages = messages[:1]  # a new task: the shared system prompt stays cached
        time.sleep(rng.uniform(0.2, 1.0))


def run(seconds: float, sessions: int) -> list[tuple[float, Sample]]:
    import ray
    from ray import serve

    port, mport = free_port(), free_port()
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, _metrics_export_port=mport)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    args = {
        "engine": {"kind": "scripted", "block_size": 16, "rules": RULES,
                   "cache": {"capacity_blocks": 2048, "prefill_ms_per_token": 0.4}},
        "enable_streaming_tool_dispatch": True,
    }
    serve.run(build_app_with_engines(args, 2), name="agentserve", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    threads = [threading.Thread(target=session, args=(url, i, stop), daemon=True) for i in range(sessions)]
    for t in threads:
        t.start()
    scrapes: list[tuple[float, Sample]] = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < seconds:
            time.sleep(3)
            sample = scrape(f"http://127.0.0.1:{mport}/metrics")
            # The ingress registry directly too (the only view of it without Ray's agent).
            for key, value in scrape(f"{url}/metrics").items():
                sample[("local_" + key[0], key[1])] = value
            scrapes.append((time.monotonic() - t0, sample))
            print(f"t={scrapes[-1][0]:5.1f}s series={len(sample)}", flush=True)
    finally:
        stop.set()
        serve.shutdown()
        ray.shutdown()
    return scrapes


def build_app_with_engines(args: dict, n: int):
    """build_app with n engine replicas (the engine's `num_replicas`, as a serve config would set it)."""
    from agentserve.serve.app import build_app

    engine = {**args.get("engine", {}), "num_replicas": n}
    return build_app({**args, "engine": engine, "secret_key": secrets.token_hex(32)})


# -- the dashboard's arithmetic over scrapes --------------------------------------------------------------


def _sum_by(sample: Sample, name: str, by: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for (n, labels), v in sample.items():
        if n == name:
            d = dict(labels)
            out[tuple(d.get(k, "") for k in by)] += v
    return out


def rate(scrapes, name, by=(), window=2):
    """Per-second increase over `window` scrapes, summed by labels: sum by (by) (rate(name[...]))."""
    series: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for i in range(window, len(scrapes)):
        (t1, a), (t2, b) = scrapes[i - window], scrapes[i]
        new, old = _sum_by(b, name, by), _sum_by(a, name, by)
        for k, v in new.items():
            series[k].append((t2, max(0.0, v - old.get(k, 0.0)) / (t2 - t1)))
    return series


def quantile(scrapes, name, q, by=(), window=3):
    """histogram_quantile(q, sum by (le, by) (rate(name_bucket[...])))."""
    buckets = rate(scrapes, name + "_bucket", by + ("le",), window)
    grouped: dict[tuple[str, ...], dict[float, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    for key, pts in buckets.items():
        le = float(key[-1])
        for t, v in pts:
            grouped[key[:-1]][t][le] = v
    out = {}
    for key, by_t in grouped.items():
        pts = []
        for t, bs in sorted(by_t.items()):
            les = sorted(bs)
            total = bs[les[-1]]
            if total <= 0:
                continue
            rank, prev_le, prev_c = q * total, 0.0, 0.0
            for le in les:
                if bs[le] >= rank:
                    hi = le if le != float("inf") else prev_le
                    frac = (rank - prev_c) / (bs[le] - prev_c) if bs[le] > prev_c else 0
                    pts.append((t, prev_le + (hi - prev_le) * frac))
                    break
                prev_le, prev_c = le, bs[le]
        out[key] = pts
    return out


def gauge(scrapes, name, by=()):
    series: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for t, s in scrapes:
        for k, v in _sum_by(s, name, by).items():
            series[k].append((t, v))
    return series


def ratio(num, den):
    out = {}
    for k, pts in num.items():
        d = dict(den.get(k, []))
        out[k] = [(t, v / d[t]) for t, v in pts if d.get(t)]
    return out


def short(replica: str) -> str:
    return replica.rsplit("#", 1)[-1][:6] if replica else ""


def plot(scrapes, out: Path) -> None:
    plt = results.pyplot()

    p = "ray_agentserve_"
    panels = [
        ("Requests/s by status", rate(scrapes, p + "requests_total", ("status",)), "req/s"),
        ("Time to first token (ingress)", {("p50",): quantile(scrapes, p + "time_to_first_token_seconds", 0.5).get((), []),
                                           ("p95",): quantile(scrapes, p + "time_to_first_token_seconds", 0.95).get((), [])}, "s"),
        ("Queue time by stage (p95)", {**quantile(scrapes, p + "queue_time_seconds", 0.95, ("stage",)),
                                       ("engine",): quantile(scrapes, p + "engine_time_to_first_token_seconds", 0.95).get((), [])}, "s"),
        ("Prefix-cache hit ratio per engine replica",
         ratio(rate(scrapes, p + "engine_cached_prompt_tokens_total", ("replica",), 3),
               rate(scrapes, p + "engine_prompt_tokens_total", ("replica",), 3)), "ratio"),
        ("Pending prefill tokens per replica", gauge(scrapes, p + "engine_pending_prefill_tokens", ("replica",)), "tokens"),
        ("Inter-token latency p50/p95", {("p50",): quantile(scrapes, p + "inter_token_latency_seconds", 0.5).get((), []),
                                         ("p95",): quantile(scrapes, p + "inter_token_latency_seconds", 0.95).get((), [])}, "s"),
        ("Router decisions/s", rate(scrapes, p + "route_decisions_total", ("reason",)), "1/s"),
        ("Parser errors/s and tool-dispatch lead p50",
         {**{("parser " + k[0],): v for k, v in rate(scrapes, p + "parser_errors_total", ("kind",)).items()},
          ("tool lead p50 (s)",): quantile(scrapes, p + "tool_dispatch_lead_seconds", 0.5).get((), [])}, ""),
        ("Tokens/s", {("prompt",): rate(scrapes, p + "prompt_tokens_total").get((), []),
                      ("cached",): rate(scrapes, p + "cached_prompt_tokens_total").get((), []),
                      ("completion",): rate(scrapes, p + "completion_tokens_total").get((), [])}, "tok/s"),
    ]
    fig, axes = plt.subplots(3, 3, figsize=(16, 11))
    for ax, (title, series, unit) in zip(axes.flat, panels):
        for key, pts in sorted(series.items()):
            if pts:
                label = " ".join(short(k) if "#" in k else k for k in key) or "all"
                ax.plot([t for t, _ in pts], [v for _, v in pts], label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("s")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("agentserve dashboard metrics from a local run (scripted engines x2, Ray metrics endpoint)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    results.save_figure(fig, out, dpi=80)
    print(f"wrote {out}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentserve bench dashboard")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--sessions", type=int, default=6)
    # docs/dashboard.png (OPERATIONS.md shows it), or dashboard.png in --out-dir / $AGENTSERVE_BENCH_OUT
    default = results.out_path("dashboard.png") if os.environ.get(results.OUT_ENV) else ROOT / "docs" / "dashboard.png"
    ap.add_argument("--out", type=Path, default=default)
    ap.add_argument("--dump", type=Path, default=None, help="also write the raw scrapes as JSON")
    ns = ap.parse_args(argv)
    scrapes = run(ns.seconds, ns.sessions)
    if ns.dump:
        ns.dump.write_text(json.dumps([[t, [[k[0], k[1], v] for k, v in s.items()]] for t, s in scrapes]))
    plot(scrapes, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

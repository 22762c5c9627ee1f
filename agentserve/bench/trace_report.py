"""What a trace replay reports, the same for the simulator and a live graph: TTFT percentiles, program completion
time by size, output tokens/s, cached share, re-prefilled tokens and the 529 (shed) rate.

A program is a top-level session with its subagents; its completion time runs from its first arrival to the last
response of any of its sessions, tool gaps included (what a user waits for). Programs with a request shed for good
(its retries spent) are left out of completion times and counted apart ("cut"). Re-prefilled tokens are prompt
tokens one shared unbounded cache would have held (the trace's reuse) but the serving side computed again.

Retries (offline/session_flow.RetryPolicy): every attempt counts as a request; the 529 rate is shed attempts over
attempts. TTFT is given from the served attempt's arrival (`ttft_s`, what the server saw) and from the first
attempt's (`ttft_incl_retries_s`, what the harness waited, backoffs included); tables show the latter.

Output tokens/s over a whole replay is its work over its span: every policy serves the same programs, so it moves
with what is cut and with the span's tail. `sustained_output_tokens_per_s` is the output generated inside a window
where programs are still arriving (from when SUSTAINED[0] of the programs have arrived to when SUSTAINED[1] have;
each request's tokens spread evenly from its first token to its end), the throughput under sustained load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from agentserve.bench import results, stats
from agentserve.offline.session_flow import Program, Served

# Program size by its top-level session's requests: short sessions are what fairness is for.
BUCKETS: tuple[tuple[str, int, int], ...] = (("short (<=12)", 1, 12), ("medium (13-29)", 13, 29), ("long (>=30)", 30, 1 << 30))
SUSTAINED = (0.5, 0.95)  # the window: between these shares of the programs' arrivals (late enough to be loaded)


def sustained_window(programs: Sequence[Program], window: tuple[float, float] = SUSTAINED) -> tuple[float, float]:
    """(start, end) in simulated time: when window[0] and window[1] of the programs had arrived."""
    starts = sorted(p.start for p in programs)
    if len(starts) < 2:
        return (0.0, 0.0)
    pick = lambda q: starts[min(len(starts) - 1, int(q * (len(starts) - 1)))]  # noqa: E731
    return pick(window[0]), pick(window[1])


def tokens_within(requests: Sequence[Served], t0: float, t1: float) -> float:
    """Output tokens generated in [t0, t1], each request's spread evenly from its first token to its end."""
    out = 0.0
    for r in requests:
        if r.shed or r.output_tokens <= 0:
            continue
        if r.end <= r.ttft:
            out += r.output_tokens if t0 <= r.end <= t1 else 0
            continue
        overlap = min(r.end, t1) - max(r.ttft, t0)
        if overlap > 0:
            out += r.output_tokens * overlap / (r.end - r.ttft)
    return out


def bucket(turns: int) -> str:
    return next(name for name, lo, hi in BUCKETS if lo <= turns <= hi)


def summarize(requests: Sequence[Served], programs: Sequence[Program]) -> dict[str, Any]:
    """One row of figures for one replay."""
    served = [r for r in requests if not r.shed]
    ttft = [r.ttft - r.arrival for r in served]
    ttft_first = [r.ttft - (r.first_arrival if r.first_arrival is not None else r.arrival) for r in served]
    w0, w1 = sustained_window(programs)
    t0 = min((r.arrival for r in requests), default=0.0)
    t1 = max((r.end for r in requests), default=0.0)
    prompt = sum(r.prompt_tokens for r in served)
    cached = sum(r.cached_tokens for r in served)
    out: dict[str, Any] = {
        "requests": len(requests),
        "served": len(served),
        "shed": len(requests) - len(served),
        "shed_rate": (len(requests) - len(served)) / max(1, len(requests)),
        "retries": sum(r.retried for r in requests),
        "requests_cut": sum(r.shed and not r.retried for r in requests),
        "ttft_s": stats.summary(ttft, digits=3) if ttft else {"n": 0},
        "ttft_incl_retries_s": stats.summary(ttft_first, digits=3) if ttft_first else {"n": 0},
        "output_tokens_per_s": sum(r.output_tokens for r in served) / max(t1 - t0, 1e-9),
        "sustained_output_tokens_per_s": tokens_within(served, w0, w1) / (w1 - w0) if w1 > w0 else None,
        "sustained_window_s": [w0 - t0, w1 - t0],
        "preemptions": sum(r.preemptions for r in served),
        "recomputed_tokens": sum(r.recomputed_tokens for r in served),
        "cached_share": cached / max(1, prompt),
        "reusable_share": sum(r.reusable_tokens for r in served) / max(1, prompt),
        "reprefilled_tokens": sum(max(0, r.reusable_tokens - r.cached_tokens) for r in served),
        "prompt_tokens": prompt,
        "span_s": t1 - t0,
        "programs": len(programs),
        "programs_incomplete": sum(not p.complete for p in programs),
    }
    by_kind: dict[str, list[float]] = {}
    for r in served:
        by_kind.setdefault(r.kind, []).append(r.ttft - r.arrival)
    out["ttft_by_kind_s"] = {k: stats.summary(v, digits=3) for k, v in sorted(by_kind.items())}
    completion: dict[str, Any] = {}
    for name, lo, hi in BUCKETS:
        done = [p.end - p.start for p in programs if p.complete and lo <= p.turns <= hi]
        completion[name] = stats.summary(done, digits=1) if done else {"n": 0}  # no NaN in the JSON
    out["completion_s"] = completion
    return out


def ttft_of(r: dict[str, Any]) -> dict[str, float]:
    """The TTFT summary tables use: from the first attempt (rows from before retries have only `ttft_s`)."""
    return r.get("ttft_incl_retries_s") or r["ttft_s"]


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per (replicas, load, policy)."""
    names = [name for name, _, _ in BUCKETS]
    head = ("| replicas | load | policy | TTFT p50 / p90 / p99 (s, from the first attempt) | "
            + " | ".join(f"completion p50 {n} (s)" for n in names)
            + " | output tok/s (whole replay) | output tok/s, sustained window | cached | re-prefilled (M tokens) "
            "| preemptions | recomputed (M tokens) | 529 rate | retries | requests cut | programs cut |")
    out = [head, "|---:|---:|---|---:|" + "---:|" * (len(names) + 10)]
    for r in sorted(rows, key=lambda r: (r["replicas"], r["load"])):
        t = ttft_of(r)
        p50, p90, p99 = (f"{t[k]:.2f}" if k in t else "-" for k in ("p50", "p90", "p99"))
        comp = " | ".join(f"{r['completion_s'][n]['p50']:.0f}" if "p50" in r["completion_s"][n] else "-" for n in names)
        load = f"x{r['speedup']:g} speed" if "speedup" in r else f"{r['load']:.0%}"
        sus = r.get("sustained_output_tokens_per_s")
        pre, rec = r.get("preemptions", 0), r.get("recomputed_tokens", 0)  # None: not observed (a live graph)
        out.append(
            f"| {r['replicas']} | {load} | {r['policy']} | {p50} / {p90} / {p99} | {comp} "
            f"| {r['output_tokens_per_s']:.0f} | {'-' if sus is None else f'{sus:.0f}'} | {r['cached_share']:.1%} "
            f"| {r['reprefilled_tokens'] / 1e6:.2f} | {'-' if pre is None else pre} "
            f"| {'-' if rec is None else f'{rec / 1e6:.2f}'} | {r['shed_rate']:.2%} | {r.get('retries', 0)} "
            f"| {r.get('requests_cut', r['shed'])} | {r['programs_incomplete']} of {r['programs']} |"
        )
    return "\n".join(out)


def write(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]], title: str, *extra_tables: str) -> None:
    """A replay's results: JSON (meta + rows), the table (and any extra tables) printed and as .md, the PNG."""
    results.write_json(out, {"meta": meta, "rows": rows})
    md = "\n\n".join((table(rows), *extra_tables))
    print(md)
    out.with_suffix(".md").write_text(md + "\n")
    plot(rows, out.with_suffix(".png"), title)


def plot(rows: list[dict[str, Any]], path: Any, title: str) -> None:
    """Per replica count (a row of panels): TTFT p99, short programs' completion p50, output tokens/s, cached
    share and 529 rate against load, one line per policy."""
    plt = results.pyplot()
    ns = sorted({r["replicas"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    panels = (
        ("TTFT p99 (s, log)", lambda r: ttft_of(r).get("p99", ttft_of(r).get("p90", float("nan"))), "log"),
        ("short programs' completion p50 (s)", lambda r: r["completion_s"][BUCKETS[0][0]].get("p50", float("nan")), "linear"),
        ("output tokens/s, sustained window",
         lambda r: r.get("sustained_output_tokens_per_s") or r["output_tokens_per_s"], "linear"),
        ("cached share (%)", lambda r: 100 * r["cached_share"], "linear"),
        ("529 rate (%)", lambda r: 100 * r["shed_rate"], "linear"),
    )
    fig, grid = plt.subplots(len(ns), len(panels), figsize=(4.2 * len(panels), 3.6 * len(ns)), squeeze=False)
    for axes, n in zip(grid, ns):
        for policy in policies:
            pts = sorted((r for r in rows if r["replicas"] == n and r["policy"] == policy), key=lambda r: r["load"])
            for ax, (_, get, _) in zip(axes, panels):
                ax.plot([100 * p["load"] for p in pts], [get(p) for p in pts], marker="o", label=policy)
        for ax, (label, _, scale) in zip(axes, panels):
            ax.set(title=f"{label}, {n} replicas", xlabel="load (% of capacity)", yscale=scale)
    grid[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    results.save_figure(fig, path, dpi=90)

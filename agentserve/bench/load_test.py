"""Load test: concurrency above capacity, clients leaving at every stage, an engine replica killed.

Runs the real graph on loopback with scripted engines (no model compute, so the serving stack is what is
measured), deployed from a Serve config as production is (two Ingress replicas, two Engine replicas), and drives
the three APIs with streaming requests. Every request ends in exactly one bucket:

  completed            a 200 stream that reached its API's terminal event
  failed_with_error    a 200 stream that ended in its API's error event, or a 5xx in the API's envelope
  rejected_retry_after 429/503/529 with `retry-after` (and `x-should-retry`), before any stream
  disconnected         the client went away on purpose, at one of four stages (counted separately):
                         queued       before the response headers, at least 0.1 s after sending (the router's
                                      admission queue is full most of the run, so these wait there)
                         before_body  right after the 200 headers, before reading a byte of the body
                         prefill      after the headers, while the engine prefills a cold prompt (no token yet)
                         stream       after the first token, before the terminal event
  lost                 anything else: a torn stream, a hang past the timeout, a 200 with no terminal event,
                       an error without the API's envelope. Must be 0.

A request planned to leave at a stage it never reaches (rejected first, or its stage passed before the client's
timer) ends in its real bucket and is counted as `missed` for that stage.

Mid-run, one engine replica (the busiest) is killed with `ray.kill`. Beside the load, one client continues a
Responses session by `previous_response_id`, one stored turn after another, through the kill: it retries rejected or failed turns, and counts a `broken` chain (the previous response not
found) separately. The store is a SQLite file in a temporary data directory.

After the load stops it checks the router's leases (every replica's `in_flight` back to 0, and `lapsed`: leases
that expired instead of being released), that no engine request is left running, and that every response the chain
stored is still served. Results: docs/benchmarks/load_test.json and .png.

    agentserve bench load-test          # --duration 60 --concurrency 48; --duration 15 to try it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
import sys
from typing import Any, Sequence

import httpx

from agentserve.bench import conditions, results
from agentserve.bench.stats import P99_MIN_SAMPLES, percentile
from agentserve.ports import free_port

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

APP = "loadtest"
APIS = ("anthropic", "responses", "chat")
STAGES = ("queued", "before_body", "prefill", "stream")
SYSTEM = "You are a coding agent working in a large repository. " * 12
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu river stone cloud paper glass metal").split()
CHAIN_MARK = "CHAINTURN"
CHAIN_REPLY = "Noted; continuing the session."


def graph_args(a: argparse.Namespace, data_dir: str) -> dict[str, Any]:
    return {
        "engine": {
            "kind": "scripted",
            "block_size": 16,
            "rules": [
                {"match": CHAIN_MARK, "reply": CHAIN_REPLY, "itl_ms": 10},
                {"match": "", "reply": "word " * a.reply_tokens, "itl_ms": a.itl_ms},
            ],
            "cache": {"prefill_ms_per_token": a.prefill_ms_per_token},
        },
        "model": {"aliases": ["smollm2", "claude-smollm2"]},
        "router": {
            "max_in_flight_per_replica": a.max_in_flight,
            "max_waiting": a.max_waiting,
            "max_wait_s": a.max_wait_s,
            "retry_after_s": 1.0,
            "lease_s": a.lease_s,
        },
        "keepalive_interval_s": 2.0,
        "state": {"backend": "sqlite", "data_dir": data_dir},
        "secret_key": secrets.token_hex(32),
    }


def serve_config(a: argparse.Namespace, port: int, data_dir: str) -> dict[str, Any]:
    """A plain Serve config, as `serve deploy` and KubeRay apply it: the `deployments` section sets the replicas."""
    return {
        "http_options": {"host": "127.0.0.1", "port": port},  # loopback only
        "applications": [
            {
                "name": APP,
                "route_prefix": "/",
                "import_path": "agentserve.serve.app:build_app",
                "args": graph_args(a, data_dir),
                "deployments": [
                    {"name": "Ingress", "num_replicas": a.ingress_replicas},
                    {"name": "Engine", "num_replicas": a.replicas},
                ],
            }
        ],
    }


def cold_prompt(n: int) -> str:
    """About n tokens nobody sent before: the engine prefills all of them (prefill_ms_per_token each)."""
    return " ".join(random.choice(WORDS) for _ in range(n)) + f" {random.random():.9f}"


def build_request(api: str, i: int, cold: int) -> tuple[str, dict[str, Any]]:
    user = f"task {i}: {random.random():.6f}"
    if cold:
        user = cold_prompt(cold) + "\n" + user
    if api == "anthropic":
        return "/v1/messages", {"model": "claude-smollm2", "max_tokens": 4096, "stream": True, "system": SYSTEM,
                                "messages": [{"role": "user", "content": user}]}
    if api == "responses":
        return "/v1/responses", {"model": "smollm2", "stream": True, "instructions": SYSTEM, "input": user, "store": False}
    return "/v1/chat/completions", {"model": "smollm2", "stream": True,
                                    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]}


def terminal(api: str, event: str | None, data: str) -> str | None:
    """'completed' / 'error' when this SSE event ends the stream in the API's contract, else None."""
    if api == "anthropic":
        return {"message_stop": "completed", "error": "error"}.get(event or "")
    if api == "responses":
        return {"response.completed": "completed", "response.incomplete": "completed", "response.failed": "error"}.get(event or "")
    if data == "[DONE]":
        return "done"
    if data.startswith('{"error"'):
        return "error"
    return None


def is_token(api: str, event: str | None, data: str) -> bool:
    """This SSE event carries generated output (not the opening frames, pings or keep-alives)."""
    if api == "anthropic":
        return event == "content_block_delta"
    if api == "responses":
        return bool(event) and event.endswith(".delta")
    if not data.startswith("{") or '"delta"' not in data:
        return False
    try:
        delta = json.loads(data)["choices"][0]["delta"]
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


def envelope_ok(api: str, body: bytes) -> bool:
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    if api == "anthropic":
        return obj.get("type") == "error" and isinstance(obj.get("error", {}).get("type"), str)
    return isinstance(obj.get("error", {}).get("message"), str)


class Stats:
    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.by_api: dict[str, Counter[str]] = {api: Counter() for api in APIS}
        self.left: Counter[str] = Counter()  # disconnected, by stage
        self.planned: Counter[str] = Counter()
        self.missed: Counter[str] = Counter()
        self.admitted = 0
        self.ttft: list[float] = []
        self.ttft_cold: list[float] = []
        self.duration: list[float] = []
        self.timeline: list[tuple[float, str]] = []
        self.lost_examples: list[str] = []

    def record(self, t0: float, api: str, outcome: str, note: str = "") -> None:
        self.outcomes[outcome] += 1
        self.by_api[api][outcome] += 1
        self.timeline.append((time.monotonic() - t0, outcome))
        if outcome == "lost" and len(self.lost_examples) < 10:
            self.lost_examples.append(f"{api}: {note}")

    def leave(self, t0: float, api: str, stage: str) -> None:
        self.left[stage] += 1
        self.record(t0, api, "disconnected")


async def _next_line(lines: Any, timeout: float | None) -> str | None:
    """The next line of the body; None when `timeout` passed first (the client then leaves)."""
    if timeout is None:
        return await anext(lines)
    if timeout <= 0:
        return None
    try:
        return await asyncio.wait_for(anext(lines), timeout)
    except TimeoutError:
        return None


async def one_request(client: httpx.AsyncClient, api: str, i: int, a: argparse.Namespace, st: Stats, t0: float) -> float:
    """Run one request; returns how long the client waits before its next one."""
    stage = random.choice(a.stages) if random.random() < a.leave else None
    cold = a.cold_tokens if stage == "prefill" or random.random() < a.cold else 0
    if stage:
        st.planned[stage] += 1
    path, body = build_request(api, i, cold)
    started = time.monotonic()
    req = client.build_request("POST", path, json=body, headers={"anthropic-version": "2023-06-01"})
    send = asyncio.ensure_future(client.send(req, stream=True))
    r: httpx.Response | None = None
    try:
        async with asyncio.timeout(a.request_timeout):
            if stage == "queued":
                done, _ = await asyncio.wait((send,), timeout=random.uniform(0.1, 0.9 * a.max_wait_s))
                if not done:  # no headers yet: leave while the request waits for admission
                    send.cancel()
                    try:
                        await send
                    except (asyncio.CancelledError, httpx.HTTPError):
                        pass
                    st.leave(t0, api, "queued")
                    return 0.0
            r = await send
            if r.status_code != 200:
                raw = await r.aread()
                if stage:
                    st.missed[stage] += 1
                if r.status_code in (429, 503, 529) and r.headers.get("retry-after") and envelope_ok(api, raw):
                    st.record(t0, api, "rejected_retry_after")
                    return min(float(r.headers["retry-after"]), a.max_backoff_s) * random.uniform(0.5, 1.0)
                if r.status_code >= 500 and envelope_ok(api, raw):
                    st.record(t0, api, "failed_with_error")
                    return 0.2
                st.record(t0, api, "lost", f"status {r.status_code}: {raw[:200]!r}")
                return 0.2
            st.admitted += 1
            headers_at = time.monotonic()
            if stage == "before_body":
                st.leave(t0, api, "before_body")
                return 0.0  # the `finally` closes the response unread
            if stage == "queued":  # admitted before the client's timer: it stays to the end
                st.missed[stage] += 1
                stage = None
            leave_at = headers_at + random.uniform(0.1, 0.8 * cold * a.prefill_ms_per_token / 1000) if stage == "prefill" else None
            event, first, result = None, None, None
            lines = r.aiter_lines()
            while True:
                timeout = None if leave_at is None else leave_at - time.monotonic()
                try:
                    line = await _next_line(lines, timeout)
                except StopAsyncIteration:
                    break
                if line is None:  # the client's timer: leave here
                    st.leave(t0, api, stage)
                    return 0.0
                if line.startswith("event:"):
                    event = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                now = time.monotonic()
                if first is None and is_token(api, event, data):
                    first = now - started
                    if stage == "prefill":  # the prefill ended before the client's timer
                        st.missed[stage] += 1
                        stage, leave_at = None, None
                    elif stage == "stream":
                        leave_at = now + random.uniform(0.02, 0.8 * a.reply_tokens * a.itl_ms / 1000)
                end = terminal(api, event, data)
                if end == "error":
                    result = "failed_with_error"
                elif end in ("completed", "done") and result is None:
                    result = "completed"
                event = None
            if stage in ("prefill", "stream"):  # the stream ended before the client's timer
                st.missed[stage] += 1
            if result is None:
                st.record(t0, api, "lost", "stream ended without a terminal event")
            else:
                st.record(t0, api, result)
                if result == "completed":
                    st.duration.append(time.monotonic() - started)
                    if first is not None:
                        (st.ttft_cold if cold else st.ttft).append(first)
            return 0.0
    except TimeoutError:
        st.record(t0, api, "lost", f"no end after {a.request_timeout}s")
    except httpx.HTTPError as exc:
        st.record(t0, api, "lost", f"{type(exc).__name__}: {exc}")
    finally:
        if r is not None:
            await r.aclose()  # closing an unfinished response closes its connection: the server sees the client go
        elif not send.done():
            send.cancel()
    return 0.2


async def worker(n: int, url: str, a: argparse.Namespace, st: Stats, t0: float, deadline: float) -> None:
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=2)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(a.request_timeout), limits=limits) as client:
        i = 0
        while time.monotonic() < deadline:
            api = APIS[(n + i) % len(APIS)]
            pause = await one_request(client, api, n * 100_000 + i, a, st, t0)
            i += 1
            if pause:
                await asyncio.sleep(pause)


class Chain:
    """One Responses session continued turn after turn by previous_response_id, through the engine kill."""

    def __init__(self) -> None:
        self.turns: Counter[str] = Counter()  # ok / rejected_retry_after / failed_with_error / broken / lost
        self.ids: list[tuple[float, str]] = []  # (t, response id) of every completed turn, in order
        self.timeline: list[tuple[float, str]] = []
        self.examples: list[str] = []
        self.continued_across_kill: dict[str, Any] | None = None
        self.chains_started = 0

    def note(self, t0: float, outcome: str, why: str = "") -> None:
        self.turns[outcome] += 1
        self.timeline.append((time.monotonic() - t0, outcome))
        if why and len(self.examples) < 10:
            self.examples.append(f"{outcome}: {why}")


async def chain_turn(client: httpx.AsyncClient, prev: str | None, k: int, a: argparse.Namespace) -> tuple[str, Any]:
    """One stored turn: ('ok', response id), ('rejected_retry_after', seconds), ('failed_with_error' | 'broken' |
    'lost', why)."""
    body: dict[str, Any] = {"model": "smollm2", "stream": True, "store": True, "instructions": SYSTEM,
                            "input": f"{CHAIN_MARK} {k}: go on with the refactor"}
    if prev:
        body["previous_response_id"] = prev
    try:
        async with asyncio.timeout(a.request_timeout):
            async with client.stream("POST", "/v1/responses", json=body) as r:
                if r.status_code != 200:
                    raw = await r.aread()
                    if r.status_code in (429, 503, 529) and r.headers.get("retry-after") and envelope_ok("responses", raw):
                        return "rejected_retry_after", min(float(r.headers["retry-after"]), a.max_backoff_s)
                    if r.status_code == 404 and b"previous_response_id" in raw:
                        return "broken", f"{prev} not found: {raw[:200]!r}"
                    if r.status_code >= 500 and envelope_ok("responses", raw):
                        return "failed_with_error", f"status {r.status_code}: {raw[:160]!r}"
                    return "lost", f"status {r.status_code}: {raw[:200]!r}"
                event, rid, end = None, None, None
                async for line in r.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                        continue
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if event == "response.created":
                        rid = json.loads(data)["response"]["id"]
                    end = terminal("responses", event, data) or end
                    event = None
                if end == "completed" and rid:
                    return "ok", rid
                if end == "error":
                    return "failed_with_error", "response.failed"
                return "lost", "stream ended without a terminal event"
    except TimeoutError:
        return "lost", f"no end after {a.request_timeout}s"
    except httpx.HTTPError as exc:
        return "lost", f"{type(exc).__name__}: {exc}"


async def chain_client(url: str, a: argparse.Namespace, ch: Chain, kills: list[dict[str, Any]], t0: float,
                       deadline: float) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(a.request_timeout)) as client:
        prev: str | None = None
        k = 0
        session: list[tuple[float, str]] = []  # this session's stored turns: (t, id)
        ch.chains_started = 1
        while time.monotonic() < deadline:
            if k == getattr(a, "chain_turns", None):  # a session this long ends; the next one starts fresh
                prev, k, session = None, 0, []
                ch.chains_started += 1
            sent = time.monotonic() - t0
            outcome, detail = await chain_turn(client, prev, k, a)
            ch.note(t0, outcome, "" if outcome in ("ok", "rejected_retry_after") else str(detail))
            now = time.monotonic() - t0
            if outcome == "ok":
                kill = next((x for x in kills if x["what"] == "Engine"), None)
                back = kill["t_s"] + kill["replaced_after_s"] if kill and "replaced_after_s" in kill else None
                if ch.continued_across_kill is None and back is not None and sent > back:
                    before = [(t, rid) for t, rid in session if t < kill["t_s"]]
                    if before:  # this session was stored before the kill and goes on after the new replica is up
                        ch.continued_across_kill = {
                            "session_first_response": before[0][1], "turns_before_kill": len(before),
                            "turns_between": len(session) - len(before), "killed_at_s": kill["t_s"],
                            "replaced_at_s": round(back, 2), "continued_turn": k, "turn_sent_at_s": round(sent, 2),
                            "previous_response_id": prev,
                        }
                prev, k = detail, k + 1
                session.append((now, detail))
                ch.ids.append((now, detail))
                await asyncio.sleep(a.chain_pause_s)
            elif outcome == "rejected_retry_after":
                await asyncio.sleep(float(detail) * random.uniform(0.5, 1.0))
            elif outcome == "broken":  # a new session, so the rest of the run still measures something
                prev, k, session = None, 0, []
                ch.chains_started += 1
            else:
                await asyncio.sleep(0.5)  # failed or lost: retry the same turn


def named_actors(deployment: str) -> list[dict[str, str]]:
    import ray

    return [x for x in ray.util.list_named_actors(all_namespaces=True) if f"#{deployment}#" in x["name"]]


def router_stats(app: str = APP, router_id: str | None = None) -> dict[str, Any]:
    """A Router replica's stats (agentserve.protocol.cluster.RouterStats) as plain data: the results JSON records
    them. `router_id`: that replica's (each Router replica keeps its own leases), else any one's."""
    from ray import serve

    from agentserve.protocol.cluster import RouterTarget

    call = serve.get_deployment_handle("Router", app).stats
    return (call.remote(RouterTarget(router_id)) if router_id else call.remote()).result(timeout_s=20).as_dict()


def engine_stats(app: str = APP) -> dict[str, dict[str, Any]]:
    import dataclasses

    from ray import serve

    from agentserve.protocol import RouteDecision

    handle = serve.get_deployment_handle("Engine", app)
    ids = list(router_stats(app)["replicas"])
    calls = {r: handle.stats.remote(RouteDecision(replica_id=r)) for r in ids}  # pinned: each replica answers
    return {r: dataclasses.asdict(c.result(timeout_s=20)) for r, c in calls.items()}


def running_replicas(app: str = APP) -> dict[str, int]:
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()
    deps = details["applications"][app]["deployments"]
    return {name: sum(1 for r in d["replicas"] if r["state"] == "RUNNING") for name, d in deps.items()}


async def kill_engine(at: float, kills: list[dict[str, Any]], t0: float, app: str = APP) -> None:
    import ray

    await asyncio.sleep(at)
    replicas = (await asyncio.to_thread(router_stats, app))["replicas"]
    victim = max(replicas, key=lambda r: replicas[r]["in_flight"])
    actor = next(x for x in named_actors("Engine") if victim in x["name"])
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
    kill = {"what": "Engine", "t_s": round(time.monotonic() - t0, 2), "replica": victim,
            "in_flight": replicas[victim]["in_flight"]}
    kills.append(kill)
    print(f"killed engine replica {victim} with {replicas[victim]['in_flight']} requests in flight at t={kill['t_s']}s")
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:  # Serve starts a new one: when does the router route to it?
        await asyncio.sleep(0.5)
        try:
            now = set((await asyncio.to_thread(router_stats, app))["replicas"])
        except Exception:  # noqa: BLE001 - keep looking
            continue
        if len(now) >= len(replicas) and victim not in now:
            kill["replaced_after_s"] = round(time.monotonic() - t0 - kill["t_s"], 2)
            return


async def sample_load(samples: list[tuple[float, float]], t0: float, deadline: float) -> None:
    while time.monotonic() < deadline:
        samples.append((round(time.monotonic() - t0, 1), conditions.loadavg(None)[0]))
        await asyncio.sleep(5.0)


def settle(a: argparse.Namespace, trace: list[tuple[float, int, int]]) -> tuple[dict[str, Any], float]:
    """Router stats once every slot is free (or the wait ran out), and how long after the load that took;
    `trace` gets (seconds, router in_flight, lapsed so far) on each look."""
    started = time.monotonic()
    while True:
        router = router_stats()
        trace.append((round(time.monotonic() - started, 1), router["in_flight"], router["counters"].get("lapsed", 0)))
        if router["in_flight"] == 0 or time.monotonic() - started > a.settle_s:
            return router, time.monotonic() - started
        time.sleep(0.5)


def pct(xs: list[float], p: float) -> float | None:
    """The shared percentile of samples in seconds, in ms; None without samples (p99: under 100 samples)."""
    if not xs or (p == 99 and len(xs) < P99_MIN_SAMPLES):
        return None
    return round(percentile(xs, p) * 1000, 1)


def git_head() -> dict[str, Any]:
    """The commit, and any uncommitted changes to the serving code in the tree that ran (others may be editing it)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=results.REPO, capture_output=True, text=True).stdout.rstrip()

    try:
        dirty = [line[3:] for line in git("status", "--porcelain", "--", "agentserve").splitlines()]
        return {"commit": git("rev-parse", "--short", "HEAD").strip(), "uncommitted": dirty}
    except OSError:
        return {"commit": "unknown", "uncommitted": []}


def plot_outcomes(ax: Any, st: Stats, duration: float, bin_s: float) -> None:
    """How many requests ended each `bin_s` seconds, one line per outcome."""
    bins = max(1, int(duration / bin_s) + 5)
    colours = {"completed": "tab:green", "rejected_retry_after": "tab:orange", "failed_with_error": "tab:red",
               "disconnected": "tab:gray", "lost": "black"}
    for outcome, colour in colours.items():
        ts = [t for t, o in st.timeline if o == outcome]
        if ts:
            ax.hist(ts, bins=bins, range=(0, bins * bin_s), histtype="step", linewidth=1.5, color=colour,
                    label=f"{outcome} ({len(ts)})")


def plot(st: Stats, ch: Chain, kills: list[dict[str, Any]], duration: float, out: Path) -> None:
    plt = results.pyplot()

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.4), gridspec_kw={"width_ratios": [2.2, 1.2, 1.4]})
    plot_outcomes(ax1, st, duration, bin_s=2)
    top = ax1.get_ylim()[1]
    marks = {"ok": ("tab:blue", "o"), "rejected_retry_after": ("tab:orange", "x"), "failed_with_error": ("tab:red", "x"),
             "broken": ("black", "s"), "lost": ("black", "X")}
    for outcome, (colour, marker) in marks.items():
        ts = [t for t, o in ch.timeline if o == outcome]
        if ts:
            ax1.scatter(ts, [top * 0.03] * len(ts), s=12, color=colour, marker=marker,
                        label=f"chain turn {outcome} ({len(ts)})")
    for k in kills:
        ax1.axvline(k["t_s"], color="tab:red" if k["what"] == "Engine" else "tab:purple", linestyle="--", linewidth=1)
        ax1.annotate(f"{k['what']} killed", (k["t_s"], top * 0.92), color="tab:red" if k["what"] == "Engine" else "tab:purple",
                     fontsize=8)
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("requests ended per 2 s")
    ax1.set_title("outcomes over time (dots: the Responses chain's turns)")
    ax1.legend(fontsize=7, loc="center right")
    xs = range(len(STAGES))
    ax2.bar([x - 0.2 for x in xs], [st.left[s] for s in STAGES], width=0.4, color="tab:gray", label="left at this stage")
    ax2.bar([x + 0.2 for x in xs], [st.missed[s] for s in STAGES], width=0.4, color="tab:olive",
            label="planned, stage not reached")
    ax2.set_xticks(list(xs), list(STAGES), fontsize=8)
    ax2.set_ylabel("requests")
    ax2.set_title("clients leaving, by stage")
    ax2.legend(fontsize=7)
    if st.duration:
        ax3.hist([d * 1000 for d in st.duration], bins=40, color="tab:green", alpha=0.6, label="end to end")
    if st.ttft:
        ax3.hist([d * 1000 for d in st.ttft], bins=40, color="tab:blue", alpha=0.6, label="first token (warm prompt)")
    if st.ttft_cold:
        ax3.hist([d * 1000 for d in st.ttft_cold], bins=40, color="tab:purple", alpha=0.6, label="first token (cold prompt)")
    ax3.set_xlabel("latency of completed requests (ms)")
    ax3.set_ylabel("requests")
    ax3.set_title("latency of admitted, completed requests")
    ax3.legend(fontsize=7)
    fig.tight_layout()
    results.save_figure(fig, out, dpi=110)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The load's arguments (the soak on the multi-node cluster takes the same)."""
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--concurrency", type=int, default=48, help="concurrent clients (capacity is replicas x max-in-flight)")
    ap.add_argument("--replicas", type=int, default=2, help="engine replicas")
    ap.add_argument("--ingress-replicas", type=int, default=2)
    ap.add_argument("--max-in-flight", type=int, default=8, help="router admission limit per replica")
    ap.add_argument("--max-waiting", type=int, default=8)
    ap.add_argument("--max-wait-s", type=float, default=2.0)
    ap.add_argument("--lease-s", type=float, default=15.0, help="router.lease_s (the shipped default)")
    ap.add_argument("--reply-tokens", type=int, default=40)
    ap.add_argument("--itl-ms", type=float, default=25.0)
    ap.add_argument("--prefill-ms-per-token", type=float, default=3.0)
    ap.add_argument("--cold", type=float, default=0.2, help="fraction of requests with a cold prompt")
    ap.add_argument("--cold-tokens", type=int, default=400, help="about this many uncached words in a cold prompt")
    ap.add_argument("--leave", type=float, default=0.3, help="fraction of requests whose client plans to leave "
                    "(the stage drawn uniformly from queued / before_body / prefill / stream)")
    ap.add_argument("--stages", default=",".join(STAGES), help="the stages clients leave at (comma-separated)")
    ap.add_argument("--kill-at", type=float, default=0.4, help="kill one engine replica at this fraction of the run")
    ap.add_argument("--chain-pause-s", type=float, default=0.3, help="the chain client's pause between turns")
    ap.add_argument("--request-timeout", type=float, default=90.0)
    ap.add_argument("--max-backoff-s", type=float, default=1.0)
    ap.add_argument("--settle-s", type=float, default=45.0, help="after the load, wait at most this long for 0 in flight")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(results.out_path("load_test")), help="output path without suffix")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench load-test", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    a.stages = [s for s in a.stages.split(",") if s]
    if set(a.stages) - set(STAGES):
        ap.error(f"--stages: choose from {', '.join(STAGES)}")
    random.seed(a.seed)

    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="agentserve-loadtest-")
    load_before = conditions.loadavg(None)
    # A cluster of this process's own (never one already running on the machine); the declarative config API.
    from agentserve.serve import ray_env

    # The graph's processes start with the environment `make serve` ships (agentserve/serve/ray_env.py); this
    # driver keeps Serve's defaults (its sync `.result()` calls need the handle router on a loop of its own).
    ray.init(address="local", num_cpus=16, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": ray_env.beside_others()})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        _get_global_client().deploy_apps(ServeDeploySchema.model_validate(serve_config(a, port, data_dir)))
        url = f"http://127.0.0.1:{port}"
        deadline_ready = time.monotonic() + 180
        while time.monotonic() < deadline_ready:
            try:
                running = running_replicas()
                if (running.get("Ingress") == a.ingress_replicas
                        and len(router_stats()["replicas"]) == a.replicas
                        and httpx.get(f"{url}/health", timeout=5).status_code == 200):
                    break
            except Exception:  # noqa: BLE001 - not deployed yet
                pass
            time.sleep(1.0)
        else:
            raise SystemExit("the graph did not come up in 180 s")
        replicas_at_start = running_replicas()
        print(f"graph up at {url} ({replicas_at_start}); {a.concurrency} clients for {a.duration:.0f}s against capacity "
              f"{a.replicas * a.max_in_flight} (+{a.max_waiting} waiting)")

        st = Stats()
        ch = Chain()
        kills: list[dict[str, Any]] = []
        load_samples: list[tuple[float, float]] = []

        async def run() -> None:
            t0 = time.monotonic()
            deadline = t0 + a.duration
            tasks = [asyncio.create_task(worker(n, url, a, st, t0, deadline)) for n in range(a.concurrency)]
            tasks.append(asyncio.create_task(chain_client(url, a, ch, kills, t0, deadline)))
            if a.kill_at > 0:
                tasks.append(asyncio.create_task(kill_engine(a.duration * a.kill_at, kills, t0)))
            tasks.append(asyncio.create_task(sample_load(load_samples, t0, deadline)))
            await asyncio.gather(*tasks)

        started = time.monotonic()
        asyncio.run(run())
        wall = time.monotonic() - started
        load_after = conditions.loadavg(None)

        settle_trace: list[tuple[float, int, int]] = []
        router, settled_s = settle(a, settle_trace)
        engines = engine_stats()
        left_running = sum(s["active"] for s in engines.values())
        per_replica = {r: v["in_flight"] for r, v in router["replicas"].items()}

        # Every response the chain stored is still there (the store is the database, not a process).
        retrieved = 0
        for _, rid in ch.ids:
            if httpx.get(f"{url}/v1/responses/{rid}", timeout=30).status_code == 200:
                retrieved += 1

        o = st.outcomes
        total = sum(o.values())
        chain_lost = ch.turns["lost"]
        result = {
            "conditions": {
                "git_head": git_head(),
                "load_avg_before": [round(x, 2) for x in load_before],
                "load_avg_during_1m": load_samples,
                "load_avg_after": [round(x, 2) for x in load_after],
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "ray": ray.__version__,
                "serve_env": ray_env.SERVE_ENV,
            },
            "config": vars(a),
            "replicas_at_start": replicas_at_start,
            "replicas_at_end": running_replicas(),
            "capacity": a.replicas * a.max_in_flight,
            "wall_s": round(wall, 1),
            "requests": total,
            "admitted": st.admitted,
            "completed": o["completed"],
            "rejected_retry_after": o["rejected_retry_after"],
            "failed_with_error": o["failed_with_error"],
            "disconnected": o["disconnected"],
            "lost": o["lost"],
            "disconnected_by_stage": {s: st.left[s] for s in STAGES},
            "leave_planned_by_stage": {s: st.planned[s] for s in STAGES},
            "leave_missed_by_stage": {s: st.missed[s] for s in STAGES},
            "lost_examples": st.lost_examples,
            "by_api": {api: dict(c) for api, c in st.by_api.items()},
            "kills": kills,
            "responses_chain": {
                "turns": dict(ch.turns),
                "turns_ok": ch.turns["ok"],
                "turns_rejected_then_retried": ch.turns["rejected_retry_after"],
                "turns_failed": ch.turns["failed_with_error"] + ch.turns["broken"] + ch.turns["lost"],
                "chains_started": ch.chains_started,
                "continued_across_kill": ch.continued_across_kill,
                "stored": len(ch.ids),
                "stored_retrieved_after": retrieved,
                "examples": ch.examples,
            },
            "after": {
                "settled_after_s": round(settled_s, 1),
                "in_flight_trace": settle_trace,  # (s after the load, router in_flight, lapsed so far)
                "router_in_flight": router["in_flight"],
                "router_in_flight_by_replica": per_replica,
                "router_waiting": router["waiting"],
                "router_counters": router["counters"],
                "router_calls": router.get("calls"),
                "router_rejected": router.get("rejected"),
                "engine_requests_left_running": left_running,
                "engine_by_replica": engines,
            },
            "leaked_slots": router["in_flight"] + sum(per_replica.values()),
            "lapsed_leases": router["counters"].get("lapsed"),
            "latency_ms": {
                "ttft_p50": pct(st.ttft, 50), "ttft_p90": pct(st.ttft, 90), "ttft_p99": pct(st.ttft, 99),
                "ttft_cold_p50": pct(st.ttft_cold, 50), "ttft_cold_p90": pct(st.ttft_cold, 90),
                "e2e_p50": pct(st.duration, 50), "e2e_p90": pct(st.duration, 90), "e2e_p99": pct(st.duration, 99),
                "e2e_mean": round(statistics.mean(st.duration) * 1000, 1) if st.duration else None,
            },
            "completed_per_s": round(o["completed"] / a.duration, 2),
        }
        out = Path(a.out)
        results.write_json(out.with_suffix(".json"), result)
        plot(st, ch, kills, a.duration, out.with_suffix(".png"))
        print(json.dumps({k: v for k, v in result.items() if k not in ("config", "conditions")}, indent=2))
        ok = (o["lost"] == 0 and chain_lost == 0 and left_running == 0 and result["leaked_slots"] == 0
              and ch.continued_across_kill is not None and ch.turns["broken"] == 0
              and retrieved == len(ch.ids))
        print("PASS" if ok else "FAIL", f"lost={o['lost']} chain_lost={chain_lost} leaked_slots={result['leaked_slots']} "
              f"lapsed={result['lapsed_leases']} engine_requests_left_running={left_running} "
              f"chain_broken={ch.turns['broken']} chain_continued={ch.continued_across_kill is not None} "
              f"stored_retrieved={retrieved}/{len(ch.ids)}")
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])

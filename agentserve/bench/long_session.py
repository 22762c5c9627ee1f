"""Benchmark: the serving path's cost of a long agent session's next turn, by the session's length (issue 28).

    agentserve bench long-session --turns 10,50,100,200,300 --samples 10 [--cold-samples 5] [--result-tokens 600]
        [--gap 0.25] [--replicas 2 [--affinity off]]

The session is Claude Code-shaped (agentserve/bench/claude_code_shape.py: a ~12K-token system prompt, 20 tools,
then turns of thinking, text and one tool_use, each answered by a ~600-token tool_result). It runs through the real
graph as `make serve` starts it (serve_config.yaml's args and one replica per deployment) with two changes: the
scripted engine (first token at once, itl 0; one rule per turn, matched on the step marker that ends the last tool
result, replying thinking + text + a hermes tool call in the embedded model's format, so the graph's parsers make
thinking / text / tool_use blocks) and a context window of 512K tokens so 300 turns fit. The client keeps what a
harness keeps: each turn's assistant message rebuilt from the stream (the server's tool_use ids and thinking
signatures), then the next tool result; so kept turns (token-exact replay) splice as in real sessions.

Building: the session's turns are really sent, one after another (each request's answer is what the next sends
back); each build request's TTFT is recorded too (`build`). At each size N of --turns, samples of "the session's
next turn" (the conversation after N turns) are timed: TTFT to the first content event (reasoning, text or tool).

A sample is a real next turn, not the same request again. Sending one conversation twice is not a fair sample on
today's code, in both directions: the Preprocessor's span memo would already know the newest assistant turn (a real
next turn renders the conversation before and through it, twice more: cheaper when repeated), while the prefix
doctor would find the prompt does not extend the previous request's prompt + output and diagnose it on its thread,
awaited before the first byte (dearer when repeated). Nothing about the answer is cached otherwise (the kept turn of
the answer is rewritten under the same key; the scripted engine's prefix cache costs nothing at itl 0). So each
sample forks the session one turn back: the request after N - 1 turns is sent again (untimed) with turn N - 1's tool
result changed in its step marker only (same length, a variant per sample), its answer is turn N again with fresh
ids, and the timed request is that fork after N turns: same size, same work, a newest turn nobody has seen, a prompt
extending the previous request's as the doctor expects. The fork is a diverging prompt, which the doctor
diagnoses after it is answered, and its answer writes a kept turn: work a real session's previous turn does not set
going, or not while the harness waits. Between the fork's answer and the timed request the client waits `--gap`
seconds (0.25 by default), as a harness runs its tool between a turn's answer and the next request (seconds, in
Claude Code sessions), so the timed turn meets the serving path, not the fork's aftermath on the same two cores.

Warm: the Preprocessor replica that served the session (one replica, as `make serve` runs). Cold: a replica that
never saw the session. Routing a sample to a chosen one of two replicas is not something Serve's handles offer
(power-of-two choices picks), so a cold sample restarts the replica instead: after the fork is sent, the
Preprocessor replica's actor is killed and Serve starts a new one (kept turns live in the state backend and
survive; the span memo, per process, does not), one unrelated short request warms the new process (tokenizer,
template) and the timed request is the first of this session it sees: a restart or scale-up, as the issue names it.

`--replicas N` runs N Ingress and N Preprocessor replicas from a Serve config (the path `serve deploy` and KubeRay
take): each turn lands on the Ingress replica HAProxy picks by the session header (serve/haproxy_front.py) and on
the Preprocessor replica the session-affinity router picks (serve/deployments/session_affinity.py); `--affinity off`
is Serve's defaults for both, least connections and power of two choices: the ablation. "Warm" samples are then the session's next turns wherever they land; a cold
sample restarts every Preprocessor replica. The Ingress's histograms are not split per sample there (a scrape
reads one replica of N).

Beside it, same run, same machine: the anchor, what `vllm serve`'s front end does per request (the tokenizer's
`apply_chat_template(messages, tools=..., tokenize=True, add_generation_prompt=True)` on the OpenAI-shaped
messages of the same conversation, in this process), measured right after each size's samples while the graph is
up. After the graph is gone: the stage breakdown at the largest size, in this process on the same conversation and
the graph's own kept-turn store (agentserve/bench/turn_stages.py).

Writes docs/benchmarks/long_session.{json,png}: per size p50 / p90 of warm, cold and anchor, prompt tokens, the
ratios (TTFT(largest) / TTFT(smallest), TTFT(N) / anchor(N)) against the issue's targets (2x, 0.25x), the stages,
load average and git head. The smallest size is >= 2 (a sample forks the turn before).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import httpx

from agentserve.bench import claude_code_shape as shape
from agentserve.bench import client as sse
from agentserve.bench import conditions, results, turn_stages
from agentserve.bench.graph import running_declared_graph, running_graph, wait_for
from agentserve.bench.scrape import Sample, mean_between, scrape
from agentserve.bench.stats import summary

APP = "long-session"
CONTEXT_WINDOW = 1 << 19  # 300 turns of ~790 tokens on a ~15.6K-token start, and Claude Code's 32K max_tokens
WARMUP_MARK = "[replica warm-up]"
SERVE_DEFAULT_ROUTER = "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter"
FIRST_CONTENT = ("reasoning", "text", "tool")
TARGET_GROWTH = 2.0  # issue 28: TTFT(300 turns) <= 2x TTFT(10 turns)
TARGET_ANCHOR = 0.25  # issue 28: TTFT(N) <= 0.25x re-rendering and tokenizing the whole conversation


def graph_args(max_turns: int, seed: int, result_tokens: int, data_dir: str, secret_key: str) -> dict[str, Any]:
    """serve_config.yaml's args with the scripted engine (same block size), a window 300 turns fit in, and a
    state directory of its own (kept turns start empty; the stage breakdown reads them afterwards)."""
    import yaml

    cfg = yaml.safe_load((results.REPO / "serve_config.yaml").read_text())
    args = dict(cfg["applications"][0]["args"])
    model = dict(args["model"])
    model["context_window"] = CONTEXT_WINDOW
    model["aliases"] = [*model.get("aliases", ()), shape.MODEL]
    rules = [{"match": WARMUP_MARK, "reply": "Ready."}, *shape.scripted_rules(max_turns, seed, result_tokens)]
    args["model"] = model
    args["engine"] = {"kind": "scripted", "block_size": args["engine"]["block_size"], "rules": rules}
    args["state"] = {**args.get("state", {}), "data_dir": data_dir}
    args["secret_key"] = secret_key
    args["doctor"] = {**args.get("doctor", {}), "header": "always"}  # one client: its own prefix report per turn
    return args


def encode(body: dict[str, Any]) -> bytes:
    """The body as a harness sends it (compact JSON), encoded before the clock starts."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class Sent:
    turns: int
    raw: bytes
    result: sse.StreamResult

    @property
    def ttft_ms(self) -> float:
        t = self.result.ttft(FIRST_CONTENT)
        if t is None:
            raise RuntimeError(f"no content event after {self.turns} turns: {self.result.last_data[:300]}")
        return t * 1000

    def row(self) -> dict[str, Any]:
        r = self.result
        return {"turns": self.turns, "ttft_ms": round(self.ttft_ms, 2), "e2e_ms": round((r.e2e or 0) * 1000, 2),
                "prompt_tokens": r.prompt_tokens, "body_bytes": len(self.raw),
                "x-agentserve-prefix": r.headers.get("x-agentserve-prefix")}


@dataclass
class Session:
    """One session's client: what it was sent back per turn (as received), and how to send a turn."""

    http: httpx.Client
    seed: int
    result_tokens: int
    session_id: str
    assistant: list[dict[str, Any]] = field(default_factory=list)  # turn i's assistant message at [i - 1]

    def body(self, turns: int, assistant: Sequence[dict[str, Any]], variants: dict[int, int] | None = None) -> bytes:
        return encode(shape.body(turns, self.seed, assistant=assistant[:turns], variants=variants,
                                 result_tokens=self.result_tokens))

    def send(self, turns: int, raw: bytes) -> Sent:
        headers = {**sse.ANTHROPIC_HEADERS, "x-claude-code-session-id": self.session_id}
        r = sse.stream_sync(self.http, "anthropic", "/v1/messages", raw, headers=headers)
        return Sent(turns, raw, r)

    def answer(self, sent: Sent) -> dict[str, Any]:
        """The assistant message the answer to `sent` is (turn sent.turns + 1), checked to be the scripted one."""
        expected = shape.step(sent.turns + 1, self.seed, self.result_tokens)
        blocks = sent.result.blocks
        kinds = [b.get("type") for b in blocks]
        tool = next((b for b in blocks if b.get("type") == "tool_use"), None)
        if kinds != ["thinking", "text", "tool_use"] or tool is None or tool.get("name") != expected.tool:
            raise RuntimeError(f"turn {sent.turns + 1}: expected thinking, text, {expected.tool} tool_use; got "
                               f"{kinds} {sent.result.last_data[:200]}")
        return {"role": "assistant", "content": blocks}

    def build_to(self, turns: int, log: list[dict[str, Any]], after_samples: bool) -> Sent | None:
        """Send the session's own turns until it holds `turns` of them; the last request sent."""
        last = None
        while len(self.assistant) < turns:
            n = len(self.assistant)
            last = self.send(n, self.body(n, self.assistant))
            self.assistant.append(self.answer(last))
            log.append({**last.row(), "after_samples": after_samples})
            after_samples = False
        return last

    def fork(self, turns: int, variant: int) -> tuple[Sent, bytes]:
        """Send the request after turns - 1 turns with that turn's result forked (`variant`); the request after
        `turns` turns on that fork, ready to send (a real next turn: its newest assistant turn just generated)."""
        variants = {turns - 1: variant}
        prev = self.send(turns - 1, self.body(turns - 1, self.assistant, variants))
        newest = self.answer(prev)
        return prev, self.body(turns, [*self.assistant[: turns - 1], newest], variants)


# -- cold replicas -----------------------------------------------------------------------------------------------


def preprocessor_actors() -> list[dict[str, str]]:
    import ray

    return [a for a in ray.util.list_named_actors(all_namespaces=True) if "#Preprocessor#" in a["name"]]


def app_running() -> bool:
    from ray import serve

    app = serve.status().applications.get(APP)
    return app is not None and app.status == "RUNNING" and all(d.status == "HEALTHY" for d in app.deployments.values())


def restart_preprocessors(http: httpx.Client, replicas: int) -> float:
    """Kill every Preprocessor replica's actor, wait for Serve's new ones and warm their processes with unrelated
    requests (retried while the handles still point at the old ones; several sessions, so each new replica is
    likely to get one); seconds it took."""
    import ray

    t0 = time.perf_counter()
    old = preprocessor_actors()
    for a in old:
        ray.kill(ray.get_actor(a["name"], namespace=a["namespace"]), no_restart=True)
    gone = {a["name"] for a in old}

    def replaced() -> bool:
        now = {a["name"] for a in preprocessor_actors()}
        return len(now) == replicas and not now & gone and app_running()

    wait_for(replaced, 180, 0.2, what="new Preprocessor replicas")
    warm = encode({"model": shape.MODEL, "max_tokens": 256, "stream": True,
                   "system": [dict(b) for b in shape.system_blocks(0)], "tools": shape.tools(),
                   "messages": [{"role": "user", "content": f"Say you are ready. {WARMUP_MARK}"}]})

    def warmed(session: str) -> bool:
        headers = {**sse.ANTHROPIC_HEADERS, "x-claude-code-session-id": session}
        r = sse.stream_sync(http, "anthropic", "/v1/messages", warm, headers=headers, raise_on_error=False,
                            raise_on_status=False)
        return r.status == 200 and r.error is None and bool(r.text)

    for i in range(1 if replicas == 1 else 4 * replicas):
        wait_for(lambda: warmed(f"long-session-warm-up-{i}"), 120, 0.5, what="the new Preprocessor replicas answering")
    return time.perf_counter() - t0


def crossings_by_form() -> dict[str, float]:
    """How the Ingress replicas' conversations crossed to the Preprocessor (`whole`, `delta`, `resent`: a delta the
    replica it reached could not apply), summed over every replica from Ray's metrics export on this node, once two
    reads a report interval apart agree (the replicas mirror their counters every 10 s)."""
    import ray

    port = next(n["MetricsExportPort"] for n in ray.nodes() if n["Alive"])

    def read() -> dict[str, float]:
        got: dict[str, float] = {}
        for (name, labels), v in scrape(f"http://127.0.0.1:{port}/metrics").items():
            if name == "ray_agentserve_conversation_crossings_total":
                form = dict(labels).get("form", "")
                got[form] = got.get(form, 0.0) + v
        return got

    last, deadline = read(), time.monotonic() + 90
    while time.monotonic() < deadline:
        time.sleep(12)
        now = read()
        if now == last and now:
            return now
        last = now
    return last


# -- the anchor --------------------------------------------------------------------------------------------------


class Anchor:
    """What `vllm serve`'s front end does per request: the whole conversation rendered and tokenized, in one call."""

    def __init__(self, args: dict[str, Any], session_id: str) -> None:
        from agentserve.apis import anthropic
        from agentserve.config import ServeArgs
        from agentserve.preprocess.preprocessor import Preprocessor

        self._args = ServeArgs.from_any(args)
        spec = self._args.model
        self._pre = Preprocessor(spec, str(spec.resolve_path()), self._args.engine.block_size)
        self._signer = anthropic.ThinkingSigner(self._args.secret_key)
        self._session_id = session_id

    def openai_messages(self, raw: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The conversation as the OpenAI-shaped messages (with reasoning_content) and tools a template takes."""
        from agentserve.apis import anthropic
        from agentserve.apis.anthropic.schema import MessagesRequest
        from agentserve.preprocess.preamble import strip_anthropic_preamble
        from agentserve.ingress.middleware.auth import identity_of
        from agentserve.preprocess.render import plan_messages

        pre = self._pre
        gen = anthropic.decode(MessagesRequest.model_validate_json(raw), request_id="anchor", model=self._args.model.id,
                               signer=self._signer, caller=identity_of(None), session_id=self._session_id)
        conv = strip_anthropic_preamble(gen.conversation)[0]
        plan = plan_messages(conv, pre._policy, pre._caps, pre._placement)  # noqa: SLF001 - the same plan
        return plan.messages, [t.openai_schema() for t in conv.tools] or None

    def measure(self, raw: bytes, samples: int) -> tuple[list[float], int]:
        msgs, tools = self.openai_messages(raw)
        tok = self._pre._tok  # noqa: SLF001
        kwargs = self._pre.template_kwargs({}, None)

        def run() -> Any:
            return tok.apply_chat_template(msgs, tools=tools, tokenize=True, add_generation_prompt=True, **kwargs)

        ids = run()
        xs = turn_stages.timed(run, samples, warmup=0)
        n = len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        return xs, n


# -- the run -----------------------------------------------------------------------------------------------------


def stats_of(xs: Sequence[float]) -> dict[str, Any]:
    return {**summary(xs), "samples_ms": [round(x, 2) for x in xs]}


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def graph(ns: argparse.Namespace, args: dict[str, Any]) -> Any:
    """One replica per deployment as `make serve` runs it; with --replicas N, N Ingress and N Preprocessor replicas
    from a Serve config (--affinity off: Serve's defaults, HAProxy's least connections to the Ingress replicas and power of two
    choices to the Preprocessor's)."""
    if ns.replicas == 1:
        return running_graph(args, name=APP)
    pre: dict[str, Any] = {"name": "Preprocessor", "num_replicas": ns.replicas}
    env: dict[str, str] = {}
    if ns.affinity == "off":
        pre["request_router_config"] = {"request_router_class": SERVE_DEFAULT_ROUTER}
        env["AGENTSERVE_HAPROXY_SESSION_AFFINITY"] = "0"
    return running_declared_graph(args, [{"name": "Ingress", "num_replicas": ns.replicas}, pre], name=APP, env=env)


def run_graph(ns: argparse.Namespace, sizes: list[int], args: dict[str, Any], session_id: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    build: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    variant = 0
    anchor = Anchor(args, session_id)
    with graph(ns, args) as url, httpx.Client(base_url=url, timeout=900) as http:
        session = Session(http, ns.seed, ns.result_tokens, session_id)
        print(f"graph up in {url.serve_s:.1f} s", flush=True)
        after_samples = False
        for n in sizes:
            t_build = time.perf_counter()
            session.build_to(n, build, after_samples)
            load = conditions.loadavg()
            row: dict[str, Any] = {"turns": n, "loadavg_before": load, "build_s": round(time.perf_counter() - t_build, 1)}
            warm, cold, restarts, prefix = [], [], [], []
            scrapes: list[tuple[Sample, Sample]] = []  # the Ingress's metrics around each warm sample
            cold_scrapes: list[tuple[Sample, Sample]] = []
            for k in range(ns.samples + ns.cold_samples):
                variant += 1
                prev, raw = session.fork(n, variant)
                time.sleep(ns.gap)  # what the fork set going after its answer (kept turn, diagnosis) ends meanwhile
                if k >= ns.samples:
                    restarts.append(round(restart_preprocessors(http, ns.replicas), 1))
                split = ns.replicas == 1  # several Ingress replicas: a scrape reads one of them
                before = scrape(f"{url}/metrics") if split else {}
                sent = session.send(n, raw)
                if split:
                    (scrapes if k < ns.samples else cold_scrapes).append((before, scrape(f"{url}/metrics")))
                session.answer(sent)  # the reply parsed into the expected blocks
                (warm if k < ns.samples else cold).append(sent.ttft_ms)
                prefix.append(sent.result.headers.get("x-agentserve-prefix"))
                row["prompt_tokens"] = sent.result.prompt_tokens
                last = {"body": raw, "previous": prev.raw}
            row["server_split_ms"] = server_split(scrapes, warm)
            row["server_split_cold_ms"] = server_split(cold_scrapes, cold)
            anchor_ms, anchor_tokens = anchor.measure(last["body"], ns.samples)
            row.update({
                "warm_ms": stats_of(warm), "cold_ms": stats_of(cold), "anchor_ms": stats_of(anchor_ms),
                "anchor_tokens": anchor_tokens, "cold_restart_s": restarts, "x-agentserve-prefix": prefix,
                "loadavg_after": conditions.loadavg(),
            })
            for cond in ("warm", "cold"):
                row[f"{cond}_over_anchor"] = ratio(row[f"{cond}_ms"]["p50"], row["anchor_ms"]["p50"])
            rows.append(row)
            after_samples = True
            print(f"{n:4d} turns {row['prompt_tokens']:7d} tokens  TTFT p50/p90 warm {row['warm_ms']['p50']:8.1f} / "
                  f"{row['warm_ms']['p90']:8.1f} ms  cold {row['cold_ms']['p50']:8.1f} / {row['cold_ms']['p90']:8.1f} ms"
                  f"  anchor {row['anchor_ms']['p50']:7.1f} / {row['anchor_ms']['p90']:7.1f} ms  "
                  f"warm/anchor {row['warm_over_anchor']}  cold/anchor {row['cold_over_anchor']}  load {load[0]}",
                  flush=True)
            print(f"           warm, mean ms from the Ingress's histograms: {row.get('server_split_ms')}", flush=True)
            print(f"           cold: {row.get('server_split_cold_ms')}", flush=True)
        crossings = crossings_by_form()
        print(f"conversation crossings, every Ingress replica: {crossings}", flush=True)
    return {"rows": rows, "build": build, "last": last, "crossings": crossings}


def server_split(scrapes: Sequence[tuple[Sample, Sample]], warm_ms: Sequence[float]) -> dict[str, Any]:
    """Where the warm samples' time went, from the Ingress's own histograms scraped just before and after each timed
    request (the scrapes are outside its timing): means over those requests. `server_ttft` runs from the request's
    arrival at the Ingress (before its body is read) to the first engine delta; `preprocess_call` and `route_call`
    are the Ingress's waits on those calls (crossings included); `server_rest` the decode, the prefix check, the
    engine stream's open and first delta; `client_minus_server` the HAProxy hop, the body's upload and the client's
    reading of the first event."""
    def mean(name: str, **labels: str) -> tuple[float | None, int]:
        parts = [mean_between(b, a, name, **labels) for b, a in scrapes]
        n = sum(c for _, c in parts)
        return (sum(m * c for m, c in parts if m is not None) / n, n) if n else (None, 0)

    ttft, n = mean("agentserve_time_to_first_token_seconds", api="anthropic")
    pre, _ = mean("agentserve_queue_time_seconds", stage="preprocess")
    route, _ = mean("agentserve_queue_time_seconds", stage="route")
    out: dict[str, Any] = {"requests": n}
    if ttft is None or pre is None or route is None:
        return out
    ms = {"server_ttft": ttft * 1e3, "preprocess_call": pre * 1e3, "route_call": route * 1e3}
    ms["server_rest"] = ms["server_ttft"] - ms["preprocess_call"] - ms["route_call"]
    if warm_ms:
        ms["client_minus_server"] = sum(warm_ms) / len(warm_ms) - ms["server_ttft"]
    return {**out, **{k: round(v, 2) for k, v in ms.items()}}


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    lo, hi = rows[0], rows[-1]
    out: dict[str, Any] = {"smallest_turns": lo["turns"], "largest_turns": hi["turns"],
                           "target_growth": TARGET_GROWTH, "target_over_anchor": TARGET_ANCHOR}
    for cond in ("warm", "cold"):
        g = ratio(hi[f"{cond}_ms"]["p50"], lo[f"{cond}_ms"]["p50"])
        out[f"{cond}_growth"] = g
        out[f"{cond}_growth_met"] = g is not None and g <= TARGET_GROWTH
        out[f"{cond}_over_anchor_largest"] = hi[f"{cond}_over_anchor"]
        out[f"{cond}_over_anchor_met"] = all((r[f"{cond}_over_anchor"] or 1e9) <= TARGET_ANCHOR for r in rows)
    return out


# The in-process stages one warm next turn passes through on its way to the first token (block hashing is inside
# preprocess); what the graph's warm TTFT has beyond their sum is the HTTP proxy, the Router call, opening the
# engine stream and the first chunk's trip back.
CRITICAL_PATH = ("ingress: whole decode", "crossing: GenerationRequest dumps", "crossing: GenerationRequest loads",
                 "preprocess: warm, next turn", "crossing: Preprocessed dumps", "crossing: Preprocessed loads",
                 "doctor: check, next turn", "crossing: EngineRequest dumps", "crossing: EngineRequest loads")


def accounted(rows: list[dict[str, Any]], stages: dict[str, Any]) -> dict[str, Any]:
    """The largest size's warm TTFT split into the in-process stages (p50s) and the rest."""
    parts = {k: stages[k]["p50"] for k in CRITICAL_PATH if k in stages}
    warm = rows[-1]["warm_ms"]["p50"]
    return {"warm_ttft_p50_ms": warm, "stages_p50_ms": parts, "stages_sum_ms": round(sum(parts.values()), 2),
            "rest_ms": round(warm - sum(parts.values()), 2)}


def table(doc: dict[str, Any]) -> str:
    head = ("| turns | prompt tokens | TTFT warm p50 (p90) | TTFT cold p50 (p90) | anchor p50 (p90) | warm / anchor |"
            " cold / anchor |\n|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in doc["rows"]:
        w, c, a = r["warm_ms"], r["cold_ms"], r["anchor_ms"]
        lines.append(f"| {r['turns']} | {r['prompt_tokens']:,} | {w['p50']:.1f} ms ({w['p90']:.1f}) | "
                     f"{c['p50']:.1f} ms ({c['p90']:.1f}) | {a['p50']:.1f} ms ({a['p90']:.1f}) | "
                     f"{r['warm_over_anchor']} | {r['cold_over_anchor']} |")
    rt = doc["ratios"]
    lines.append(f"\nTTFT({rt['largest_turns']}) / TTFT({rt['smallest_turns']}): warm {rt['warm_growth']}, cold "
                 f"{rt['cold_growth']} (target <= {TARGET_GROWTH})")
    lines.append(f"\nstages at {doc['stages_turns']} turns (in process), p50 (p90) ms:\n")
    for name, s in doc["stages"].items():
        if not name.startswith("_"):
            lines.append(f"  {name:<52} {s['p50']:9.3f} ({s['p90']:.3f})")
    lines.append(f"  {doc['stages']['_facts']}")
    acc = doc["accounted"]
    lines.append(f"\nwarm TTFT p50 {acc['warm_ttft_p50_ms']} ms = stages {acc['stages_sum_ms']} ms + the rest (proxy, "
                 f"route, engine open, first chunk) {acc['rest_ms']} ms")
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = results.pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    tokens = [r["prompt_tokens"] / 1000 for r in doc["rows"]]
    for key, style, label in (("warm_ms", "o-", "graph TTFT, warm replica"), ("cold_ms", "^:", "graph TTFT, cold replica"),
                              ("anchor_ms", "s--", "re-render + tokenize all (vllm serve's front end)")):
        left.plot(tokens, [r[key]["p50"] for r in doc["rows"]], style, label=label)
    for r, x in zip(doc["rows"], tokens):
        left.annotate(f"{r['turns']} turns", (x, r["warm_ms"]["p50"]), fontsize=7, textcoords="offset points",
                      xytext=(4, -10))
    left.set_xlabel("prompt tokens (K)")
    left.set_ylabel("p50 (ms)")
    left.set_yscale("log")
    left.set_title("A long Claude Code-shaped session's next turn (scripted engine)", fontsize=10)
    left.legend(fontsize=8)
    stages = {k: v for k, v in doc["stages"].items() if not k.startswith("_")}
    names = list(stages)
    right.barh(range(len(names)), [stages[k]["p50"] for k in names], color="tab:blue")
    right.set_yticks(range(len(names)), names, fontsize=7)
    right.invert_yaxis()
    right.set_xscale("log")
    right.set_xlabel("p50 (ms, log)")
    right.set_title(f"Stages at {doc['stages_turns']} turns, in process", fontsize=10)
    fig.tight_layout()
    results.save_figure(fig, path, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench long-session", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", default="10,50,100,200,300", help="session sizes, in assistant turns (each >= 2)")
    ap.add_argument("--samples", type=int, default=10, help="warm samples per size (and anchor / stage samples)")
    ap.add_argument("--cold-samples", type=int, default=None, help="cold samples per size (default: --samples)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result-tokens", type=int, default=shape.RESULT_TOKENS, help="size of each tool result")
    ap.add_argument("--gap", type=float, default=0.25,
                    help="seconds between the untimed fork and the timed turn: the harness running its tool")
    ap.add_argument("--replicas", type=int, default=1, help="Ingress and Preprocessor replicas (default 1)")
    ap.add_argument("--affinity", choices=("on", "off"), default="on",
                    help="with --replicas > 1: the Preprocessor's session affinity (off: routed by load only)")
    ap.add_argument("--out", default=None, help="output path without suffix (default docs/benchmarks/long_session)")
    ns = ap.parse_args(argv)
    ns.cold_samples = ns.samples if ns.cold_samples is None else ns.cold_samples
    sizes = sorted({int(x) for x in ns.turns.split(",")})
    if sizes[0] < 2 or ns.samples < 1 or ns.cold_samples < 1 or ns.replicas < 1:
        ap.error("sizes must be >= 2 turns (a sample forks the turn before) and sample counts >= 1")
    if sizes[-1] * shape.TURN_TOKENS + shape.BASE_TOKENS > CONTEXT_WINDOW * 0.9:
        ap.error(f"{sizes[-1]} turns do not fit the {CONTEXT_WINDOW}-token window")
    if ns.samples + ns.cold_samples > 999:
        ap.error("at most 999 samples per size (the step marker's variant has three digits)")
    out = Path(ns.out) if ns.out else results.out_path("long_session")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    client_scheduling = conditions.prioritize_client()
    data_dir = tempfile.mkdtemp(prefix="agentserve-long-session-")
    session_id = f"long-session-{ns.seed}-{secrets.token_hex(4)}"
    args = graph_args(sizes[-1], ns.seed, ns.result_tokens, data_dir, secrets.token_hex(32))
    t0 = time.perf_counter()
    try:
        got = run_graph(ns, sizes, args, session_id)
        graph_s = time.perf_counter() - t0
        from agentserve.config import ServeArgs
        from agentserve.preprocess.tokenizer import load_tokenizer

        parsed = ServeArgs.from_any(args)
        tok = load_tokenizer(str(parsed.model.resolve_path()))
        reply = shape.step(sizes[-1], ns.seed, ns.result_tokens).reply()
        output_ids = tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id]
        stage_load = conditions.loadavg()
        stages = turn_stages.measure(got["last"]["body"], got["last"]["previous"], args=parsed, session_id=session_id,
                                     output_ids=output_ids, samples=ns.samples, cold_samples=ns.cold_samples)
        stages["_facts"]["loadavg_before"] = stage_load
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    rows = got["rows"]
    doc = {
        "benchmark": "long_session",
        "command": results.command("long-session", argv),
        "conditions": conditions.snapshot(client_scheduling=client_scheduling, git=conditions.git_state(),
                                          engine="scripted, itl 0", context_window=CONTEXT_WINDOW,
                                          machine=conditions.machine()),
        "session": {"seed": ns.seed, "result_tokens": ns.result_tokens, "tools": len(shape.tools()),
                    "samples": ns.samples, "cold_samples": ns.cold_samples, "gap_s": ns.gap},
        "replicas": {"ingress": ns.replicas, "preprocessor": ns.replicas,
                     "preprocessor_affinity": ns.affinity if ns.replicas > 1 else None},
        "rows": rows,
        "crossings": got["crossings"],
        "ratios": ratios(rows),
        "stages_turns": sizes[-1],
        "stages": stages,
        "accounted": accounted(rows, stages),
        "build": got["build"],
        "wall_s": {"graph": round(graph_s, 1), "total": round(time.perf_counter() - t0, 1)},
        "note": ("TTFT to the first content event through the graph (scripted engine, itl 0). Each sample is a real "
                 "next turn on a fork of the session (see the module docstring); cold: the Preprocessor replica "
                 "restarted before the sample. Anchor: apply_chat_template(tokenize=True) of the same conversation "
                 "in the client's process while the graph was up."),
    }
    results.write_json(out.with_suffix(".json"), doc, indent=1)
    plot(doc, out.with_suffix(".png"))
    print(table(doc))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')} in {doc['wall_s']['total']:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])

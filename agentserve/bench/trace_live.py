"""Replay a request trace against a running graph through the official `anthropic` SDK.

    agentserve bench replay TRACE --live [--url http://127.0.0.1:8000] [--model smollm2] [--sessions 4]
        [--token-scale 0.03] [--time-scale 1] [--speedup 1] [--retries 3]
    agentserve bench replay TRACE --live --vllm-replicas 2 --kv-cache-gib 0.25 --conditions fcfs,sessions [...]
        (no --url: a graph started per condition, bench/trace_vllm.py)

Each session runs as the trace says (offline/trace_workload.py infers the tree): top-level sessions arrive at their
recorded offsets (divided by --speedup), each next request its recorded gap (times --time-scale) after the
previous response ended here, subagents when their spawning request ends, a parent that waited for its subagents
after the last of them. Prompts are synthesised (bench/trace_prompts.py) so the block reuse is the trace's as
closely as text allows. Sessions are named in agentserve's own headers (session, parent, request kind), as a
harness's headers would name them. A 529 is counted, then retried after its retry-after (up to --retries; then the
session ends). Reports the same figures as --sim (bench/trace_report.py) and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from agentserve.bench import conditions, results, trace_report
from agentserve.bench.trace_prompts import BlockText, Conversation, Scale, shared_prefix_blocks
from agentserve.offline import trace_workload as tw
from agentserve.offline.router_sim import Session
from agentserve.offline.session_flow import Program, Served
from agentserve.traces.jsonl import read_records

KINDS = {"user_message", "tool_result", "compaction", "subagent_spawn", "other"}


def continues(prev_written: list[int] | None, blocks: list[int]) -> bool:
    return prev_written is not None and blocks[: len(prev_written)] == prev_written


class LiveReplay:
    def __init__(self, client: Any, sessions: list[Session], args: argparse.Namespace, block_size: int) -> None:
        self.client, self.args = client, args
        self.by_id = {s.sid: s for s in sessions}
        self.scale = Scale(block_size, args.token_scale)
        self.texts = BlockText(self.scale)
        self.done = {s.sid: asyncio.Event() for s in sessions}
        self.requests: list[Served] = []
        self.attempts = self.overloaded = 0
        self.shed_roots: set[int] = set()
        self.seen: set[int] = set()
        self.nonce = f"{os.getpid():x}{int(time.time()) % 100000:05d}"
        self.t0 = 0.0
        self.tasks: list[asyncio.Task] = []
        starts: list[tuple[int, int]] = []  # (session, turn) of every context's first request
        firsts: list[list[int]] = []
        for s in sessions:
            prev = None
            for k, t in enumerate(s.turns):
                if not continues(prev, t.blocks or []):
                    starts.append((s.sid, k))
                    firsts.append(t.blocks or [])
                prev = t.written
        self.shared = dict(zip(starts, shared_prefix_blocks(firsts)))

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def root(self, s: Session) -> int:
        while s.parent is not None and s.parent in self.by_id:
            s = self.by_id[s.parent]
        return s.sid

    async def session(self, s: Session, at: float) -> None:
        try:
            await asyncio.sleep(max(0.0, at - self.now()))
            conv = Conversation(self.texts, 0)
            prev_written: list[int] | None = None
            prev_prompt = prev_out = 0
            reply: list[dict[str, Any]] = []
            for k, turn in enumerate(s.turns):
                if k:
                    joined = s.joins.get(k)
                    if joined:
                        await asyncio.gather(*(self.done[c].wait() for c in joined[0]))
                    await asyncio.sleep((joined[1] if joined else s.turns[k - 1].gap_s) * self.args.time_scale)
                blocks = turn.blocks or []
                if continues(prev_written, blocks):
                    conv.extend(reply, turn.prompt_tokens - prev_prompt - prev_out, seed=hash((s.sid, k)))
                else:
                    conv = Conversation(self.texts, self.shared.get((s.sid, k), 0))
                    conv.start(blocks, turn.prompt_tokens, seed=hash((s.sid, k)))
                served, reply = await self.send(s, k, conv)
                self.requests.append(served)
                if served.shed:
                    self.shed_roots.add(self.root(s))
                    return
                prev_written, prev_prompt, prev_out = turn.written, turn.prompt_tokens, turn.output_tokens
                for c in s.spawns.get(k, ()):
                    child = self.by_id[c]
                    self.tasks.append(asyncio.create_task(self.session(child, self.now() + child.start_s / self.args.speedup)))
        finally:
            self.done[s.sid].set()

    def reusable(self, blocks: list[int], written: list[int] | None, prompt_tokens: int) -> int:
        hit = 0
        for h in blocks[: max(0, (prompt_tokens - 1) // self.scale.block_size)]:
            if h not in self.seen:
                break
            hit += 1
        self.seen.update(blocks)
        self.seen.update(written or ())
        return self.scale.tokens(hit * self.scale.block_size) if hit else 0

    async def send(self, s: Session, k: int, conv: Conversation) -> tuple[Served, list[dict[str, Any]]]:
        import anthropic

        turn = s.turns[k]
        headers = {"x-agentserve-session-id": f"replay-{self.nonce}-{s.sid}"}
        if s.parent is not None:
            headers["x-agentserve-parent-session-id"] = f"replay-{self.nonce}-{s.parent}"
        if turn.kind in KINDS:
            headers["x-agentserve-request-kind"] = turn.kind
        reusable = self.reusable(turn.blocks or [], turn.written, turn.prompt_tokens)
        arrival = self.now()
        for attempt in range(self.args.retries + 1):
            self.attempts += 1
            first = None
            try:
                kwargs: dict[str, Any] = {"system": conv.system} if conv.system else {}
                async with self.client.messages.stream(
                    model=self.args.model, max_tokens=self.scale.tokens(turn.output_tokens), messages=conv.messages,
                    extra_headers=headers, extra_body={"temperature": 0.0}, **kwargs,  # the SDK takes no temperature
                ) as stream:
                    async for event in stream:
                        if first is None and event.type == "content_block_delta":
                            first = self.now()
                    msg = await stream.get_final_message()
                end = self.now()
                u = msg.usage
                cached = u.cache_read_input_tokens or 0
                prompt = u.input_tokens + cached + (u.cache_creation_input_tokens or 0)
                content = [b.model_dump(exclude_none=True) for b in msg.content if b.type == "text" and b.text]
                return Served(s.sid, k, turn.kind, arrival, first if first is not None else end, end, prompt, cached,
                              reusable, u.output_tokens, False), content
            except anthropic.APIStatusError as exc:
                if exc.status_code != 529 or attempt == self.args.retries:
                    print(f"session {s.sid} turn {k}: {exc.status_code} {str(exc)[:200]}", file=sys.stderr)
                    break
                self.overloaded += 1
                await asyncio.sleep(min(float(exc.response.headers.get("retry-after", "1") or 1), 30.0))
            except anthropic.APIConnectionError as exc:
                print(f"session {s.sid} turn {k}: {exc}", file=sys.stderr)
                break
        now = self.now()
        return Served(s.sid, k, turn.kind, arrival, now, now, 0, 0, reusable, 0, True), []

    async def run(self) -> None:
        self.t0 = time.perf_counter()
        top = tw.top_level(list(self.by_id.values()))
        origin = min((s.start_s for s in top), default=0.0)
        self.tasks = [asyncio.create_task(self.session(s, (s.start_s - origin) / self.args.speedup)) for s in top]
        while any(not t.done() for t in self.tasks):
            await asyncio.gather(*list(self.tasks))

    def programs(self) -> list[Program]:
        spans: dict[int, list[float]] = {}
        turns: dict[int, int] = {}
        for r in self.requests:
            root = self.root(self.by_id[r.session])
            span = spans.setdefault(root, [r.arrival, r.end])
            span[0], span[1] = min(span[0], r.arrival), max(span[1], r.end)
            turns[root] = len(self.by_id[root].turns)
        return [Program(root, turns[root], a, b, root not in self.shed_roots) for root, (a, b) in spans.items()]


async def replay(args: argparse.Namespace) -> dict[str, Any]:
    """One replay of args.trace against args.url: the report's row (bench/trace_report.summarize + 529s)."""
    import anthropic

    records = read_records(args.trace)
    bs = tw.block_size_of(records)
    from agentserve.bench.trace_replay import first_programs

    sessions = first_programs(tw.sessions_from_trace(records), args.sessions)
    client = anthropic.AsyncAnthropic(base_url=args.url, api_key=args.api_key, max_retries=0, timeout=args.timeout)
    replay = LiveReplay(client, sessions, args, bs)
    t0 = time.perf_counter()
    await replay.run()
    row = trace_report.summarize(replay.requests, replay.programs())
    # A live graph's engines do not report their preemptions here (vLLM counts them in its own metrics): None, not 0.
    # Retries happen inside one request's record: every attempt past its first.
    row |= {"policy": args.label, "replicas": args.replicas, "load": 0.0, "speedup": args.speedup,
            "preemptions": None, "recomputed_tokens": None, "retries": replay.attempts - len(replay.requests),
            "overloaded_529": replay.overloaded, "attempts": replay.attempts,
            "rate_529": replay.overloaded / max(1, replay.attempts), "wall_s": time.perf_counter() - t0}
    return row


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="agentserve bench replay TRACE --live", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--api-key", default=os.environ.get("ANTHROPIC_API_KEY", "agentserve"))
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--sessions", type=int, default=4, help="the first N top-level sessions and their subagents")
    ap.add_argument("--token-scale", type=float, default=0.03, help="live tokens per trace token")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiplies every gap")
    ap.add_argument("--speedup", type=float, default=1.0, help="top-level sessions arrive this much faster")
    ap.add_argument("--retries", type=int, default=3, help="retries of a 529 before the session ends")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--replicas", type=int, default=0, help="engine replicas behind --url (recorded only)")
    ap.add_argument("--label", default="live", help="what is being measured (recorded as the row's policy)")
    ap.add_argument("--out", default=None, help="JSON path (default docs/benchmarks/trace_replay_live.json)")
    from agentserve.bench import trace_vllm

    trace_vllm.add_arguments(ap)  # --vllm-replicas: start the graph per condition (bench/trace_vllm.py)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.vllm_replicas:
        from agentserve.bench import trace_vllm

        return trace_vllm.run(args, list(argv or ()))
    row = asyncio.run(replay(args))
    out = Path(args.out) if args.out else results.out_path("trace_replay_live.json")
    results.write_json(out, {"meta": {"command": results.command("replay", ["--live", *(argv or [])]),
                                      "url": args.url, "model": args.model, "token_scale": args.token_scale,
                                      "time_scale": args.time_scale, "conditions": conditions.snapshot()},
                             "rows": [row]})
    print(trace_report.table([row]))
    print(f"529s: {row['overloaded_529']} of {row['attempts']} attempts; wall {row['wall_s']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

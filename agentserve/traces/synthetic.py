"""Synthetic agent traces in the published shapes: seeded, in the record schema the Ingress writes.

Why synthetic: the router's session scheduling has to be measured at 4-64 replicas on thousands of sessions, and
no recorded trace of that size with block hashes is at hand. Every shape below is a parameter of `TraceShape`,
whose comments name the source of each default (docs/TRACES.md tabulates them). A session is a program:

* it opens with its harness's system prompt and tools (shared by every session of that harness, so their first
  blocks hash alike), then the task;
* each next request is the previous request's input, its output and a tool result (or, now and then, a user's
  message), arriving a tool gap after the previous response ended;
* near its compaction threshold a session sends a compaction request; the request after it starts again from the
  system prompt and the summary, so it shares only the system prefix with what came before;
* in about half the sessions some turns spawn subagents (1-3 at once); a subagent's first request shares the
  parent's system prefix, it starts when the spawning request ends, and the parent's next request waits for the
  last of them to end (their answers are its tool result).

Timestamps come from a nominal unloaded server (`nominal_*` fields: a warm shared prefix, prefill of the rest at a
fixed rate, fixed inter-token latency). A replay recomputes every time but the gaps.

Block hashes follow record.py: content is modelled as segments (a system prompt, a task, an output, a tool
result) of so many tokens; a full block's hash chains its parent's hash with the segment pieces it holds, keyed by
the trace salt, so equal prefixes hash equally and nothing else does.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
from dataclasses import dataclass, field
from agentserve.traces.record import TraceRecord

_MASK = (1 << 63) - 1
TOOLS = ("Read", "Bash", "Edit", "Grep", "Glob", "Write")  # tool names on non-final turns (labels only)
SPAWN_TOOL = "Task"  # Claude Code's subagent tool


@dataclass(frozen=True, slots=True)
class TraceShape:
    """What a synthetic trace looks like. Sources: [M] vLLM x Mooncake blog 2026-05-06 (Codex/GPT-5.4 on SWE-bench
    Pro, 610 traces); [I] issue 32 (its summary of [M] and vLLM's agent workload notes); [A] docs ARCHITECTURE.md;
    [L] llm-d agentic-code-generation guide; [C] reference/agent-serving-2026-12 section 2; [S] this file's choice,
    no published figure."""

    sessions: int = 200  # top-level sessions (subagents come on top)
    seed: int = 0
    session_rate: float = 0.05  # top-level session arrivals per second, Poisson [S]; replays rescale it
    block_size: int = 128  # tokens per hashed block (vLLM's CPU default; a replay may coarsen, never refine)
    model: str = "synthetic"
    keys: int = 3  # API keys sessions are spread over (Zipf), for per-key shares [S]
    # The harness prompt: Claude Code's system prompt and tools are about 20K tokens [A]; ~25K with MCP tools [C].
    harnesses: int = 4  # distinct system prompts, Zipf popularity [S]
    system_tokens: tuple[int, int] = (8_000, 24_000)
    first_user_tokens: tuple[int, int] = (300, 3_000)  # the task as typed or pasted [S]
    # Turns: median 33 [M]; 30-40 [I]. Short sessions: the targets compare them [I]; their share is [S].
    short_share: float = 0.3
    short_turns: tuple[int, int] = (3, 12)
    long_turns: tuple[int, int, int] = (24, 44, 33)  # triangular (low, high, mode)
    # Context at turn 30: ~80K, up to >180K at the end [M]; 80-140K [I]. Drawn per session, growth is linear.
    context_at_30: tuple[int, int] = (80_000, 140_000)
    tool_result_sigma: float = 0.8  # lognormal spread of one tool result around the session's mean [S]
    # Output per request, lognormal: sized so that input:output over the whole trace is ~131:1 [M].
    output_median: int = 240
    output_sigma: float = 1.0
    # Tool gaps: "seconds-long" [I]; llm-d's benchmark used 15 s tool latency [L]. Lognormal, median 3 s [S].
    tool_gap_median_s: float = 3.0
    tool_gap_sigma: float = 1.0
    tool_gap_max_s: float = 120.0
    # Now and then the next request is the user's, after a human's think time [S].
    user_turn_share: float = 0.1
    think_median_s: float = 20.0
    think_sigma: float = 0.8
    # Subagents in about half the sessions [I]; spawns, fan-out and their size [S].
    subagent_share: float = 0.5
    spawns_per_session: tuple[int, int] = (1, 2)
    subagents_per_spawn: tuple[int, int] = (1, 3)
    subagent_turns: tuple[int, int] = (4, 16)
    subagent_task_tokens: tuple[int, int] = (300, 1_500)
    subagent_answer_tokens: tuple[int, int] = (300, 2_000)  # its last output, the parent's tool result
    # Compaction: sessions run close to the window (max >180K [M]); a 200K window compacting at 150-180K [S].
    compact_at_tokens: tuple[int, int] = (150_000, 180_000)
    compact_prompt_tokens: int = 120  # the "summarise the conversation" instruction appended
    summary_tokens: tuple[int, int] = (2_000, 6_000)  # the compaction's output, the new context's start
    # The nominal unloaded server that lays out timestamps [S]: the simulator's replica model's rates.
    nominal_overhead_s: float = 0.05
    nominal_prefill_tokens_per_s: float = 10_000.0
    nominal_itl_s: float = 0.02


def block_hash(salt: bytes, parent: int, pieces: list[tuple[int, int, int]]) -> int:
    """A full block's 63-bit hash: its parent's hash and the (segment, start, end) pieces it holds, keyed."""
    h = hashlib.blake2b(struct.pack("<q", parent), digest_size=8, key=salt)
    for piece in pieces:
        h.update(struct.pack("<qii", *piece))
    return int.from_bytes(h.digest(), "little") & _MASK


@dataclass(slots=True)
class _Stream:
    """A growing token stream as segments, hashed block by block as blocks fill."""

    salt: bytes
    block_size: int
    hashes: list[int] = field(default_factory=list)
    tokens: int = 0
    pending: list[tuple[int, int, int]] = field(default_factory=list)

    def append(self, segment: int, n: int) -> None:
        off = 0
        while n > 0:
            take = min(self.block_size - self.tokens % self.block_size, n)
            self.pending.append((segment, off, off + take))
            off, n, self.tokens = off + take, n - take, self.tokens + take
            if self.tokens % self.block_size == 0:
                self.hashes.append(block_hash(self.salt, self.hashes[-1] if self.hashes else 0, self.pending))
                self.pending = []


@dataclass(slots=True)
class _Gen:
    shape: TraceShape
    rng: random.Random
    salt: bytes
    records: list[TraceRecord] = field(default_factory=list)
    next_segment: int = 1
    systems: list[tuple[int, int]] = field(default_factory=list)  # (segment, tokens) per harness

    def segment(self) -> int:
        self.next_segment += 1
        return self.next_segment

    def lognormal(self, median: float, sigma: float) -> float:
        return median * math.exp(self.rng.gauss(0.0, sigma))

    def tool_gap(self) -> float:
        p = self.shape
        return min(self.lognormal(p.tool_gap_median_s, p.tool_gap_sigma), p.tool_gap_max_s)

    def output_tokens(self) -> int:
        return max(1, round(self.lognormal(self.shape.output_median, self.shape.output_sigma)))

    def tool_result_tokens(self, mean: float) -> int:
        sigma = self.shape.tool_result_sigma  # lognormal with this mean
        return max(1, round(mean * math.exp(self.rng.gauss(-sigma * sigma / 2, sigma))))

    def new_stream(self, harness: int) -> _Stream:
        stream = _Stream(self.salt, self.shape.block_size)
        stream.append(*self.systems[harness])
        return stream

    def session(
        self, sid: str, parent: str | None, key: str, harness: int, t: float, turns: int, task_tokens: int,
        last_output: int | None, may_spawn: bool,
    ) -> float:
        """Write one session's records (and its subagents') from arrival `t`; return its last response's end."""
        p, rng = self.shape, self.rng
        stream = self.new_stream(harness)
        warm = len(stream.hashes)  # blocks an unloaded server already holds: the shared system prompt
        stream.append(self.segment(), task_tokens)
        per_turn = max(0.0, (rng.uniform(*p.context_at_30) - stream.tokens) / 30)  # prompt growth per request
        # A tool result's mean, so the mean growth (user messages grow it less) meets the draw.
        user_mean = sum(p.first_user_tokens) / 6
        tool_mean = max(1.0, (per_turn - p.output_median * math.exp(p.output_sigma**2 / 2)
                              - p.user_turn_share * user_mean) / (1 - p.user_turn_share))
        compact_at = rng.randint(*p.compact_at_tokens)
        spawn_at: set[int] = set()
        if may_spawn and turns > 2:
            spawn_at = set(rng.sample(range(turns - 1), min(rng.randint(*p.spawns_per_session), turns - 1)))
        kind: str = "subagent_spawn" if parent else "user_message"
        gap: float | None = None
        n_req, k, end, added = 0, 0, t, task_tokens
        while k < turns:
            compaction = stream.tokens > compact_at
            if compaction:
                stream.append(self.segment(), p.compact_prompt_tokens)
            final = k == turns - 1 and not compaction
            spawning = k in spawn_at and not final and not compaction
            prompt, inputs = stream.tokens, tuple(stream.hashes)
            if compaction:
                out = rng.randint(*p.summary_tokens)
            elif final and last_output is not None:
                out = last_output
            else:
                out = self.output_tokens()
            stream.append(self.segment(), out)
            cached = min(warm, (prompt - 1) // p.block_size) * p.block_size
            ttft = p.nominal_overhead_s + (prompt - cached) / p.nominal_prefill_tokens_per_s
            duration = ttft + out * p.nominal_itl_s
            n_children = rng.randint(*p.subagents_per_spawn) if spawning else 0
            calls: tuple[str, ...] = ()
            if not final and not compaction:
                calls = (SPAWN_TOOL,) * n_children if spawning else (rng.choice(TOOLS),)
            self.records.append(TraceRecord(
                request_id=f"{sid}-{n_req}", t=t, session=sid, parent_session=parent,
                kind="compaction" if compaction else kind, key=key, model=p.model, prompt_tokens=prompt,
                cached_tokens=cached, output_tokens=out, queue_s=0.0, ttft_s=ttft, duration_s=duration,
                finish_reason="tool_calls" if calls else "stop", tool_calls=calls, block_size=p.block_size,
                input_blocks=inputs, output_blocks=tuple(stream.hashes[len(inputs):]), gap_s=gap,
            ))
            n_req, end = n_req + 1, t + duration
            if compaction:  # the turn is sent again on a context of the system prompt and the summary
                stream = self.new_stream(harness)
                warm = len(stream.hashes)
                stream.append(self.segment(), out)
                stream.append(self.segment(), added)  # what the turn had to say, after the summary
                t = end + rng.uniform(0.0, 0.5)
                gap = t - end
                continue  # one more request, not one more turn
            warm = len(stream.hashes)  # this request's input and output, as the next one finds them
            k += 1
            if final:
                break
            ready = end
            if spawning:  # the subagents run from this request's end; the parent waits for the last answer
                answers = 0
                for c in range(n_children):
                    answer = rng.randint(*p.subagent_answer_tokens)
                    ready = max(ready, self.session(
                        f"{sid}.t{k}.{c}", sid, key, harness, end, rng.randint(*p.subagent_turns),
                        rng.randint(*p.subagent_task_tokens), answer, False,
                    ))
                    answers += answer
                kind, added, wait = "tool_result", answers, 0.1 * self.tool_gap()
            elif rng.random() < p.user_turn_share:
                kind, added = "user_message", rng.randint(*p.first_user_tokens) // 3
                wait = self.lognormal(p.think_median_s, p.think_sigma)
            else:
                kind, added, wait = "tool_result", self.tool_result_tokens(tool_mean), self.tool_gap()
            stream.append(self.segment(), added)
            t = ready + wait
            gap = t - end
        return end


def generate(shape: TraceShape = TraceShape()) -> list[TraceRecord]:
    """A seeded trace: every request of `shape.sessions` top-level sessions and their subagents, grouped by session
    in arrival order (so gzip finds most of each record's block chain in the record before it: ~20x smaller)."""
    rng = random.Random(shape.seed)
    gen = _Gen(shape, rng, salt=hashlib.blake2b(f"synthetic:{shape.seed}".encode(), digest_size=16).digest())
    for _ in range(shape.harnesses):
        gen.systems.append((gen.segment(), rng.randint(*shape.system_tokens)))
    zipf = [1 / (k + 1) for k in range(shape.harnesses)]
    key_weights = [1 / (k + 1) for k in range(shape.keys)]
    t = 0.0
    for i in range(shape.sessions):
        t += rng.expovariate(shape.session_rate)
        harness = rng.choices(range(shape.harnesses), zipf)[0]
        if rng.random() < shape.short_share:
            turns = rng.randint(*shape.short_turns)
        else:
            lo, hi, mode = shape.long_turns
            turns = round(rng.triangular(lo, hi, mode))
        key = f"k{rng.choices(range(shape.keys), key_weights)[0]}"
        gen.session(f"s{i:05d}", None, key, harness, t, turns, rng.randint(*shape.first_user_tokens), None,
                    rng.random() < shape.subagent_share)
    return sorted(gen.records, key=lambda r: (r.session or "", r.t))

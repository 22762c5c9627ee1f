"""A discrete-event simulator of multi-turn agent sessions on N engine replicas with finite KV caches.

Why a simulator: routing quality shows at 4-64 replicas and thousands of sessions, far beyond what
this machine can run for real. The engine model is deliberately simple and stated here:

* each replica prefills one request at a time, in chunks of `prefill_chunk_tokens` (vLLM's chunked prefill,
  max_num_batched_tokens 8192); a prefill costs `prefill_overhead_ms + uncached tokens * prefill_ms_per_token`,
  with the cache hit taken when it starts (vLLM reuses only leading full blocks, and always recomputes the last
  token);
* decoding runs beside prefill: `osl * itl`, where itl grows with the replica's decode batch (fixed per run);
* KV, as vLLM v1's scheduler and block pool hold it (vllm/v1/core/sched/scheduler.py, kv_cache_manager.py,
  block_pool.py): a fixed pool of `kv_blocks` blocks (`KvPool`). A running request (prefilling or decoding)
  holds its prompt's blocks, those of the chunks it has computed, and one more per `block_size` tokens it
  generates; blocks of the same hash are shared. Cached blocks no running request holds are evictable, LRU
  (a finished or preempted request's blocks freed tail-first, so its tail goes first). The waiting queue is
  FCFS: its head starts when the prefill slot is free and its first chunk's blocks fit (evicting LRU blocks);
  when they do not, nothing behind it starts (vLLM stops at that head). When a running request cannot get a
  block (the next chunk, or its next generated block), the last admitted running request is preempted
  (vLLM's FCFS `self.running.pop()`, which may be the request itself), repeatedly until it fits: the victim
  frees its blocks (its computed full blocks stay cached as evictable, until evicted), goes back to the front of
  the waiting queue, and is recomputed when it starts again: a prefill of its prompt and the tokens generated
  so far, cache hits allowed, then the rest of its output. Counted: preemptions, and recomputed tokens (KV a
  victim had and had to compute again). A victim preempted mid-chunk keeps (cached) the part of the chunk computed so far;
  a request alone on its replica that cannot fit is shed (prefill) or ends at the pool's size (decode), which
  only tiny pools see. Simplifications: one prefill at a time (vLLM batches several chunks per step);
  output blocks are hashed (cached) when the request ends or is preempted rather than as each fills; no
  watermark or max_num_seqs bound. `pin_running=False` is the model before this one: running requests hold no
  blocks, only finished ones occupy an LRU, nothing is preempted or waits for KV;
* stores and evictions are reported to the router as KV events would be;
* a replica sheds (rejects: 529) a request when the prefill work queued on it exceeds `shed_after_s`; the session
  flow retries a shed turn as a harness does (offline/session_flow.RetryPolicy) and ends the session when its
  retries are spent.

Sessions: a shared system prompt (one of a few), then turns that each append the assistant output
and a tool result, with a tool-call gap between turns. Block ids stand in for chained hashes.
"""

from __future__ import annotations

import heapq
import itertools
import random
import statistics
import zlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from agentserve.offline.session_flow import SessionFlow
from agentserve.protocol import AgentHints, RouteRequest
from agentserve.protocol.errors import RequestError
from agentserve.routing.approx import ApproxIndex
from agentserve.routing.cost import CostConfig
from agentserve.routing.kv_router import KvRouter, RouterConfig
from agentserve.routing.policies import PolicyName
from agentserve.routing.scheduling import SchedulingConfig


@dataclass(frozen=True, slots=True)
class Workload:
    sessions: int = 1000
    system_prompts: int = 6
    system_blocks: tuple[int, int] = (16, 64)  # shared system prompt + tools, in blocks
    first_user_tokens: tuple[int, int] = (200, 2000)
    turns: tuple[int, int] = (3, 16)
    tool_result_tokens: tuple[int, int] = (100, 2500)
    output_tokens: tuple[int, int] = (30, 400)
    gap_s: float = 3.0  # mean tool-call gap between a turn's end and the next request
    block_size: int = 128  # vLLM's CPU default; coarse blocks keep the simulation fast
    seed: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaModel:
    kv_blocks: int = 1024  # 131K tokens per replica
    prefill_ms_per_token: float = 0.1
    prefill_overhead_ms: float = 5.0
    itl_ms: float = 20.0
    itl_batch_slope: float = 1 / 32  # itl *= 1 + slope * decoding requests
    shed_after_s: float = 20.0
    # Running requests hold their blocks and are preempted when the pool runs out (vLLM v1); False: the model
    # before, where only finished blocks occupy the cache and nothing is ever preempted.
    pin_running: bool = True
    # A prefill runs in chunks of this many tokens, each allocating its blocks when it starts: vLLM's chunked
    # prefill under max_num_batched_tokens (8192, its default for the API server on >= 70 GiB GPUs). Only with
    # pin_running (before, a prefill was one piece).
    prefill_chunk_tokens: int = 8192


@dataclass(slots=True)
class Turn:
    prompt_tokens: int
    output_tokens: int
    gap_s: float  # after this turn's response, before the next turn
    # From a trace (offline/trace_workload.py): the prompt's full blocks and those of prompt + output; None: cut
    # from the session's one block stream.
    blocks: list[int] | None = None
    written: list[int] | None = None
    kind: str = "other"  # protocol RequestKind


@dataclass(slots=True)
class Session:
    sid: int
    start_s: float  # a subagent's: after the end of the parent request that spawned it
    blocks: list[int]  # block ids of the whole session stream (system prompt ids shared)
    turns: list[Turn]
    parent: int | None = None  # the spawning session (offline/session_flow.py)
    spawns: dict[int, list[int]] = field(default_factory=dict)  # turn -> subagents started when it ends
    joins: dict[int, tuple[list[int], float]] = field(default_factory=dict)  # turn -> (subagents awaited, gap)
    key: str | None = None  # the API key's short id (a trace's `key`), for per-key shares


def make_sessions(w: Workload, session_rate: float) -> list[Session]:
    rng = random.Random(w.seed)
    bs = w.block_size
    systems = []
    for k in range(w.system_prompts):
        n = rng.randint(*w.system_blocks)
        systems.append([(1 << 40) + (k << 20) + i for i in range(n)])
    weights = [1 / (k + 1) for k in range(w.system_prompts)]  # a few popular harness prompts
    out, t = [], 0.0
    for sid in range(w.sessions):
        t += rng.expovariate(session_rate)
        sys_ids = rng.choices(systems, weights)[0]
        length = len(sys_ids) * bs + rng.randint(*w.first_user_tokens)
        turns = []
        for k in range(rng.randint(*w.turns)):
            osl = rng.randint(*w.output_tokens)
            turns.append(Turn(length, osl, rng.expovariate(1 / w.gap_s)))
            length += osl + rng.randint(*w.tool_result_tokens)
        total_blocks = length // bs + 1
        own = [((sid + 1) << 20) + i for i in range(len(sys_ids), total_blocks)]
        out.append(Session(sid, t, sys_ids + own, turns))
    return out


@dataclass(slots=True)
class Request:
    rid: int
    session: Session
    turn: int
    arrival: float
    prompt_tokens: int
    output_tokens: int
    blocks: list[int]  # full prompt blocks
    replica: int = -1
    cached_tokens: int = 0  # cache hit of its first prefill (vLLM's num_cached_tokens)
    ttft: float = 0.0
    est_prefill_s: float = 0.0
    # Engine state (simulate): output tokens produced before the current run, the run's start, its prefill
    # duration or decode itl, what the request holds of the replica's KV pool, and what preemption cost it.
    generated: int = 0
    first_token: bool = False
    epoch: int = 0  # bumped by a preemption: events of the run it ended are stale
    t_run: float = 0.0
    run_s: float = 0.0
    itl: float = 0.0
    hit_blocks: int = 0
    computed: int = 0  # tokens of KV its current prefill has (hit or computed) before the running chunk
    chunk: int = 0  # tokens of the running prefill chunk
    hashed: int = 0  # of its held blocks' ids, how many are cached (hit or hashed when computed)
    blocks_held: int = 0
    hold_ids: list[int] = field(default_factory=list)
    hold_private: int = 0
    kv_tokens: int = 0  # tokens of KV it had when last preempted
    preemptions: int = 0
    recomputed_tokens: int = 0  # of those, prefilled again on resumption (not found in the cache)


class KvPool:
    """A replica's KV blocks as vLLM v1's block pool holds them (`pin_running`), or the old LRU of finished blocks.

    Cached blocks carry a hash (a block id of the session stream). Blocks held by running requests are pinned:
    hashed ones reference-counted in `ref` (a shared prefix is held once), the rest (blocks not computed yet, the
    last partial block, and output blocks until the request ends) counted in `private`. Hashed blocks no running
    request holds are evictable, LRU in `blocks` (tail-first on release, as vLLM frees a request's blocks in
    reverse order). `len(ref) + private + len(blocks) <= capacity` always: pinning or allocating evicts LRU
    blocks first. A lookup hits pinned and evictable blocks alike.

    Without `pin_running` (the model before), running requests hold nothing: blocks enter the LRU when stored and
    every allocation succeeds."""

    def __init__(self, capacity: int, pin_running: bool = True) -> None:
        self.capacity = capacity
        self.pin_running = pin_running
        self.blocks: OrderedDict[int, None] = OrderedDict()  # evictable, least recently used first
        self.ref: dict[int, int] = {}
        self.private = 0

    def __contains__(self, h: int) -> bool:
        return h in self.ref or h in self.blocks

    @property
    def used(self) -> int:
        return len(self.ref) + self.private + len(self.blocks)

    def peek(self, ids: list[int], usable: int) -> int:
        n = 0
        for h in ids[:usable]:
            if h not in self.ref and h not in self.blocks:
                break
            n += 1
        return n

    def hit(self, ids: list[int], usable: int) -> int:
        n = self.peek(ids, usable)
        for h in reversed(ids[:n]):
            if h in self.blocks:
                self.blocks.move_to_end(h)
        return n

    def free_for(self, hit_ids: list[int]) -> int:
        """Blocks a request could allocate after pinning `hit_ids`: all but the pinned and private ones, the hit
        blocks that are evictable now counting as pinned."""
        if not self.pin_running:
            return self.capacity
        return self.capacity - len(self.ref) - self.private - sum(1 for h in hit_ids if h in self.blocks)

    def pin(self, ids: list[int], new_private: int) -> list[int]:
        """Hold `ids` (cached) and `new_private` fresh blocks; returns the evicted ids."""
        if not self.pin_running:
            return []
        for h in ids:
            if h in self.blocks:
                del self.blocks[h]
            self.ref[h] = self.ref.get(h, 0) + 1
        self.private += new_private
        return self._evict()

    def hash_private(self, ids: list[int], hit: int) -> tuple[list[int], list[int], list[int]]:
        """A prefill of the blocks `ids` ended, the first `hit` of them cache hits: each computed block becomes a
        pinned cached block unless a block of that hash is cached already (then it stays a private duplicate).
        Returns (ids newly cached, ids now held, ids evicted). With pin_running off, stores all of `ids` in the LRU."""
        if not self.pin_running:
            new, evicted = self.store(ids)
            return new, [], evicted
        new, held = [], []
        for h in ids[hit:]:
            if h in self.ref or h in self.blocks:
                continue
            self.private -= 1
            self.ref[h] = 1
            new.append(h)
            held.append(h)
        return new, held, []

    def release(self, held: list[int], private: int, cache: list[int]) -> tuple[list[int], list[int]]:
        """A request ends or is preempted: unpin `held`, free its `private` blocks, and cache the full blocks
        `cache` (its prompt and output so far; already cached ones are touched), tail first. Returns (new, evicted)."""
        if self.pin_running:
            for h in held:
                left = self.ref[h] - 1
                if left:
                    self.ref[h] = left
                else:
                    del self.ref[h]
            self.private -= private
        return self.store(cache)

    def grow(self, n: int = 1) -> list[int] | None:
        """`n` more private blocks for a running request (evicting LRU blocks for them); None when the pinned
        blocks leave no room (then it gets none). Returns the ids evicted."""
        if not self.pin_running:
            return []
        if len(self.ref) + self.private + n > self.capacity:
            return None
        self.private += n
        return self._evict()

    def store(self, ids: list[int]) -> tuple[list[int], list[int]]:
        """Cache `ids` as evictable (pinned ones stay pinned), touched tail-first so the head stays most recent;
        returns (new ids, evicted ids)."""
        new = []
        for h in reversed(ids):
            if h in self.ref:
                continue
            if h in self.blocks:
                self.blocks.move_to_end(h)
            else:
                self.blocks[h] = None
                new.append(h)
        return new, self._evict()

    def _evict(self) -> list[int]:
        evicted = []
        while self.blocks and self.used > self.capacity:
            evicted.append(self.blocks.popitem(last=False)[0])
        return evicted


@dataclass
class Replica:
    idx: int
    cache: KvPool
    queue: deque = field(default_factory=deque)  # waiting (vLLM's waiting queue); the preempted go to its front
    running: list[Request] = field(default_factory=list)  # admitted (prefilling or decoding), in admission order
    prefilling: Request | None = None
    prefill_end: float = 0.0
    decoding: int = 0
    busy_s: float = 0.0
    served: int = 0
    preemptions: int = 0

    @property
    def ongoing(self) -> int:
        return len(self.queue) + (self.prefilling is not None) + self.decoding

    def pending_work_s(self, now: float) -> float:
        left = max(0.0, self.prefill_end - now) if self.prefilling else 0.0
        return left + sum(r.est_prefill_s for r in self.queue)


class SimRouter(Protocol):
    name: str

    def route(self, req: Request, replicas: list[Replica], now: float) -> int: ...
    def stored(self, replica: int, ids: list[int]) -> None: ...
    def removed(self, replica: int, ids: list[int]) -> None: ...
    def first_token(self, req: Request) -> None: ...
    def release(self, req: Request) -> None: ...


class _Base:
    name = "base"

    def stored(self, replica: int, ids: list[int]) -> None: ...
    def removed(self, replica: int, ids: list[int]) -> None: ...
    def first_token(self, req: Request) -> None: ...
    def release(self, req: Request) -> None: ...


class RoundRobin(_Base):
    name = "round-robin"

    def __init__(self) -> None:
        self._next = itertools.count()

    def route(self, req, replicas, now):
        return next(self._next) % len(replicas)


class PowerOfTwo(_Base):
    """Serve's default: two random replicas, the one with fewer ongoing requests."""

    name = "power-of-two"

    def __init__(self, seed: int = 1) -> None:
        self._rng = random.Random(seed)

    def route(self, req, replicas, now):
        a, b = self._rng.sample(range(len(replicas)), 2) if len(replicas) > 1 else (0, 0)
        return a if replicas[a].ongoing <= replicas[b].ongoing else b


class SessionAffinity(_Base):
    """The baseline that knows sessions as ours does (the session id): a session stays on one replica, its id
    hashed to start, and moves (power-of-two) only when that replica has more than `imbalance` ongoing requests
    over the least loaded one (Ray's prefix router's threshold)."""

    name = "session affinity"

    def __init__(self, imbalance: int = 10, seed: int = 3) -> None:
        self._imbalance = imbalance
        self._p2c = PowerOfTwo(seed)
        self._home: dict[int, int] = {}

    def route(self, req, replicas, now):
        sid = req.session.sid
        home = self._home.get(sid, zlib.crc32(str(sid).encode()) % len(replicas))
        q = [r.ongoing for r in replicas]
        if q[home] - min(q) > self._imbalance:
            home = self._p2c.route(req, replicas, now)
        self._home[sid] = home
        return home


class PrefixAffinity(_Base):
    """Ray Serve's PrefixCacheAffinityRouter, at block rather than character granularity (its defaults:
    imbalance threshold 10 ongoing requests, match rate 0.1, per-tenant eviction at 400K characters).
    `events`: its tree holds what each replica's cache really stores and evicts (the KV events ours gets) instead
    of what it routed there, which is the most it could know."""

    def __init__(self, block_size: int, seed: int = 2, chars_per_token: float = 4.0, events: bool = False) -> None:
        cap = int(400_000 / chars_per_token / block_size)
        self.name = "prefix-affinity (Ray, KV events)" if events else "prefix-affinity (Ray)"
        self._events = events
        self._tree = ApproxIndex(ttl_s=float("inf"), max_blocks=cap, clock=lambda: 0.0)
        self._p2c = PowerOfTwo(seed)
        self._names: list[str] = []

    def stored(self, replica: int, ids: list[int]) -> None:
        if self._events:
            self._tree.index.add(f"r{replica}", ids)

    def removed(self, replica: int, ids: list[int]) -> None:
        if self._events:
            self._tree.index.remove(f"r{replica}", ids)

    def route(self, req, replicas, now):
        if not self._names:
            self._names = [f"r{i}" for i in range(len(replicas))]
            for n in self._names:
                self._tree.add_replica(n)
        q = [r.ongoing for r in replicas]
        if max(q) - min(q) > 10:
            pick = self._p2c.route(req, replicas, now)
        else:
            match = self._tree.index.overlaps(req.blocks)
            best = max(match.values(), default=0)
            if req.blocks and best / len(req.blocks) >= 0.1:
                tenants = [i for i, n in enumerate(self._names) if match.get(n, 0) == best]
                pick = min(tenants, key=lambda i: q[i])
            else:
                sizes = [self._tree.index.size(n) for n in self._names]
                small = [i for i, s in enumerate(sizes) if s == min(sizes)]
                pick = min(small, key=lambda i: q[i])
        if not self._events:
            self._tree.learn(self._names[pick], req.blocks)
        return pick


class Oracle(_Base):
    """Perfect, instant knowledge of every cache; longest cached prefix wins, load ignored but for ties."""

    name = "greedy max-hit (load-blind)"

    def route(self, req, replicas, now):
        usable = max(0, (req.prompt_tokens - 1) // BLOCK_SIZE_HINT[0])
        return max(
            range(len(replicas)), key=lambda i: (replicas[i].cache.peek(req.blocks, usable), -replicas[i].ongoing)
        )


BLOCK_SIZE_HINT = [128]


QUEUE_AT_PREFILL_TOKENS = 32768  # with scheduling on, a replica takes no request past this much pending prefill (~3 s)


class Ours(_Base):
    """agentserve's KvRouter, fed by the simulated replicas' store/evict reports.

    With `scheduling` (routing/scheduling SchedulingConfig, even all off) its admission queue is in the loop, as
    the Router deployment runs it under a saturation bound: a replica takes requests while it has less than
    `max_prefill_tokens` of pending prefill (QUEUE_AT_PREFILL_TOKENS unless another bound is given), the rest wait
    in the router in the scheduling order, and a full queue or a wait past `max_wait_s` sheds the turn (a 529
    before any byte). The simulated replicas register with their KV capacity (`attach`), as engines do. Without
    it, every request is placed at once and waits in its replica's FIFO (today's default: the engine's queue).

    Requests carry what the Preprocessor gives the Router: session, parent session, kind, whether the
    conversation continues, the API key (a trace's `key`). The synthetic workload's turns carry no kind: a session's first turn counts as a user
    message, later ones as tool results."""

    def __init__(
        self, block_size: int, policy: PolicyName = "kv", scheduling: SchedulingConfig | None = None, *,
        max_wait_s: float = 30.0, max_waiting: int = 1024, **cost: Any,
    ) -> None:  # fmt: skip
        self.name = f"agentserve {policy}"
        self.queues = scheduling is not None
        if self.queues and not any(cost.get(k) for k in ("max_prefill_tokens", "max_in_flight", "max_active_tokens")):
            cost["max_prefill_tokens"] = QUEUE_AT_PREFILL_TOKENS
        # Leases never lapse: the simulated engines run every request to its end, as a heartbeat would renew it.
        cfg = RouterConfig(
            cost=CostConfig(block_size=block_size, **cost), policy=policy, expire_after_s=1e18, lease_s=1e18,
            max_wait_s=max_wait_s, max_waiting=max_waiting, scheduling=scheduling or SchedulingConfig(),
        )  # fmt: skip
        self._now = [0.0]
        self._r = KvRouter(cfg, clock=lambda: self._now[0])
        self._names: list[str] = []
        self._kv_blocks: int | None = None
        self._admit: Callable[[Request, int], None] = lambda req, i: None
        self._shed: Callable[[Request], None] = lambda req: None

    def attach(self, admit: Callable[[Request, int], None], shed: Callable[[Request], None], kv_blocks: int) -> None:
        """The loop's callbacks for requests the queue admits or sheds later, and the replicas' KV capacity."""
        self._admit, self._shed, self._kv_blocks = admit, shed, kv_blocks

    def tick(self, now: float) -> None:
        self._now[0] = now
        self._r.expire_waiting()

    def route(self, req, replicas, now):
        self._now[0] = now
        if not self._names:
            self._names = [f"r{i}" for i in range(len(replicas))]
            for n in self._names:
                self._r.register(n, events=True, kv_blocks=self._kv_blocks)
        pre = self._request(req)
        if not self.queues:
            d = self._r.try_route(pre)
            assert d is not None and d.replica_id is not None
            return int(d.replica_id[1:])
        try:
            d = self._r.offer(pre, lambda d: self._admit(req, int(d.replica_id[1:])), lambda e: self._shed(req))
        except RequestError:
            self._shed(req)
            return -1
        return -1 if d is None else int(d.replica_id[1:])

    def _request(self, req: Request) -> RouteRequest:
        s = req.session
        kind = s.turns[req.turn].kind
        if kind == "other":
            kind = "user_message" if req.turn == 0 and s.parent is None else "tool_result"
        if req.turn == 0 and s.parent is not None and kind == "tool_result":
            kind = "subagent_spawn"
        return RouteRequest.model_construct(
            request_id=str(req.rid), model="m", block_hashes=req.blocks, prompt_tokens=req.prompt_tokens,
            hints=AgentHints(session_id=str(s.sid), kind=kind), max_tokens=4096, session_key=str(s.sid),
            parent_session_key=str(s.parent) if s.parent is not None else "", tenant=s.key or "",
            continues=req.turn > 0,
        )  # fmt: skip

    def kv_use(self, replica: int) -> tuple[float, float, float | None]:
        return self._r.kv_use(f"r{replica}")

    def stored(self, replica, ids):
        self._r.stored_hashes(f"r{replica}", ids)

    def removed(self, replica, ids):
        self._r.removed_hashes(f"r{replica}", ids)

    def first_token(self, req):
        self._r.first_token(str(req.rid))

    def release(self, req):
        self._r.release(str(req.rid))


@dataclass(frozen=True)
class Result:
    router: str
    replicas: int
    sessions: int
    requests: int
    served: int
    rejected: int
    hit_rate: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    util_mean: float
    util_max_over_mean: float
    served_max_over_mean: float
    upper_bound_hit_rate: float
    preemptions: int = 0
    recomputed_tokens: int = 0


ARRIVE, PREFILLED, DECODED, GROW = 0, 1, 2, 3  # event kinds


def simulate(
    router: SimRouter, n_replicas: int, sessions: list[Session], w: Workload, m: ReplicaModel,
    flow: SessionFlow | None = None,
) -> Result:
    """`flow` says when turns arrive (and when a shed one is retried) and records what each session saw (a fresh
    one per call when None)."""
    bs = w.block_size
    BLOCK_SIZE_HINT[0] = bs
    replicas = [Replica(i, KvPool(m.kv_blocks, m.pin_running)) for i in range(n_replicas)]
    heap: list = []
    seq = itertools.count()
    rids = itertools.count()
    done: list[Request] = []
    rejected = 0
    seen_blocks: set[int] = set()
    ub_cached = ub_total = 0

    def push(t: float, kind: int, obj) -> None:
        heapq.heappush(heap, (t, next(seq), kind, obj))

    def ids_of(req: Request, tokens: int) -> list[int]:
        """The hashes of the first tokens // bs blocks of the request's stream (prompt, then its output)."""
        n = tokens // bs
        if n <= len(req.blocks):
            return req.blocks[:n]
        written = req.session.turns[req.turn].written
        src = written if written is not None else req.session.blocks
        return req.blocks + src[len(req.blocks) : n]

    def est_prefill(rep: Replica, req: Request) -> float:
        tokens = req.prompt_tokens + req.generated
        ids = ids_of(req, tokens)
        hit = rep.cache.peek(ids, max(0, (tokens - 1) // bs))
        return (m.prefill_overhead_ms + (tokens - hit * bs) * m.prefill_ms_per_token) / 1000

    def report(rep: Replica, new: list[int], evicted: list[int]) -> None:
        if evicted:
            router.removed(rep.idx, evicted)
        if new:
            router.stored(rep.idx, new)

    def try_admit(rep: Replica, now: float) -> None:
        """The head of the waiting queue starts its prefill when the prefill slot is free and the blocks of its
        first chunk fit (vLLM stops at a head that does not fit); a resumed request prefills its prompt and its
        output so far, cache hits allowed."""
        if rep.prefilling is not None or not rep.queue:
            return
        req = rep.queue[0]
        tokens = req.prompt_tokens + req.generated
        ids = ids_of(req, tokens)
        usable = max(0, (tokens - 1) // bs)
        hit = rep.cache.peek(ids, usable)
        first = min(chunk_tokens, tokens - hit * bs)
        need = max(1, -(-(hit * bs + first) // bs)) - hit
        if m.pin_running and need > rep.cache.free_for(ids[:hit]):
            if not rep.running:  # nothing will ever free enough: larger than the whole pool
                rep.queue.popleft()
                shed(req)
                router.release(req)
                try_admit(rep, now)
            return
        rep.queue.popleft()
        rep.cache.hit(ids, usable)
        report(rep, [], rep.cache.pin(ids[:hit], need))
        req.hold_ids, req.hold_private, req.blocks_held = ids[:hit], need, hit + need
        req.hit_blocks = req.hashed = hit
        req.computed = hit * bs
        if req.preemptions == 0:
            req.cached_tokens = hit * bs
        else:
            req.recomputed_tokens += max(0, req.kv_tokens - hit * bs)
        rep.running.append(req)
        rep.prefilling = req
        run_chunk(rep, req, now, first, first_chunk=True)

    def run_chunk(rep: Replica, req: Request, now: float, n: int, first_chunk: bool = False) -> None:
        over = m.prefill_overhead_ms if first_chunk else 0.0
        dur = (over + n * m.prefill_ms_per_token) / 1000
        left = req.prompt_tokens + req.generated - req.computed
        rep.prefill_end = now + (over + left * m.prefill_ms_per_token) / 1000
        req.chunk, req.t_run, req.run_s = n, now, dur
        rep.busy_s += dur
        push(now + dur, PREFILLED, (req, req.epoch))

    def allocate(rep: Replica, req: Request, n: int, now: float) -> bool:
        """`n` more blocks for a running request, preempting the last admitted running requests (vLLM's FCFS
        `self.running.pop()`) until they fit; False when the request preempted itself (or, alone and still short,
        can never fit: then the caller ends it)."""
        while (evicted := rep.cache.grow(n)) is None:
            victim = rep.running[-1]
            if victim is req and len(rep.running) == 1:
                return False
            preempt(rep, victim, now)
            if victim is req:
                return False
        report(rep, [], evicted)
        req.blocks_held += n
        req.hold_private += n
        return True

    def decode(req: Request, now: float) -> None:
        """Schedule the request's next event: the token that needs a new block, or its last token."""
        left = req.output_tokens - req.generated
        k = req.blocks_held * bs - (req.prompt_tokens + req.generated) + 1
        req.t_run = now
        if m.pin_running and k <= left:
            push(now + k * req.itl, GROW, (req, req.epoch))
        else:
            push(now + left * req.itl, DECODED, (req, req.epoch))

    def preempt(rep: Replica, victim: Request, now: float) -> None:
        """vLLM's recompute preemption: the victim frees its blocks (its computed full blocks stay cached, evictable)
        and goes back to the front of the waiting queue, to prefill its prompt and output so far again."""
        if rep.running[-1] is victim:
            rep.running.pop()
        else:
            rep.running.remove(victim)
        victim.epoch += 1
        victim.preemptions += 1
        rep.preemptions += 1
        if victim is rep.prefilling:  # its prefill's computed part so far
            frac = min(1.0, (now - victim.t_run) / victim.run_s) if victim.run_s > 0 else 1.0
            computed = victim.computed + int(frac * victim.chunk)
            rep.busy_s -= max(0.0, victim.t_run + victim.run_s - now) if victim.chunk else 0.0
            victim.chunk = 0
            rep.prefilling = None
        else:
            rep.decoding -= 1
            victim.generated = min(victim.output_tokens, victim.generated + int((now - victim.t_run) / victim.itl))
            computed = victim.prompt_tokens + victim.generated
        victim.kv_tokens = computed
        report(rep, *rep.cache.release(victim.hold_ids, victim.hold_private, ids_of(victim, computed)))
        victim.hold_ids, victim.hold_private, victim.blocks_held = [], 0, 0
        victim.est_prefill_s = est_prefill(rep, victim)
        rep.queue.appendleft(victim)

    def finish(rep: Replica, req: Request, now: float) -> None:
        rep.decoding -= 1
        rep.served += 1
        rep.running.remove(req)
        req.generated = req.output_tokens
        end = (req.prompt_tokens + req.output_tokens) // bs
        written = req.session.turns[req.turn].written
        cache = written if written is not None else req.session.blocks[:end]
        report(rep, *rep.cache.release(req.hold_ids, req.hold_private, cache))
        req.hold_ids, req.hold_private = [], 0
        router.release(req)
        done.append(req)
        for t1, s1, k1 in flow.ended(req, now):
            push(t1, ARRIVE, (s1, k1))

    def admit(req: Request, i: int) -> None:
        """The router placed `req` on replica `i` (at once, or later from its admission queue)."""
        rep = replicas[i]
        req.replica = i
        req.est_prefill_s = est_prefill(rep, req)
        if rep.pending_work_s(now) > m.shed_after_s:
            shed(req)
            router.release(req)
            return
        rep.queue.append(req)
        try_admit(rep, now)

    def shed(req: Request) -> None:
        """Turned away (by a replica's backlog, or the router's full or timed-out queue): a 529, which the flow
        retries after its backoff or, retries spent, ends the session with."""
        nonlocal rejected
        rejected += 1
        for t1, s1, k1 in flow.shed(req, now):
            push(t1, ARRIVE, (s1, k1))

    chunk_tokens = m.prefill_chunk_tokens if m.pin_running else 1 << 62
    tick = _attach_queue(router, admit, shed, m.kv_blocks)
    flow = flow or SessionFlow(sessions, bs)
    for t0, s, k in flow.starts():
        push(t0, ARRIVE, (s, k))
    now = 0.0
    while heap:
        now, _, kind, obj = heapq.heappop(heap)
        if kind != ARRIVE and obj[1] != obj[0].epoch:
            continue  # an event of a run a preemption ended
        if tick is not None:
            tick(now)
        if kind == ARRIVE:
            s, k = obj
            t = s.turns[k]
            blocks = t.blocks if t.blocks is not None else s.blocks[: t.prompt_tokens // bs]
            req = Request(next(rids), s, k, now, t.prompt_tokens, t.output_tokens, blocks)
            usable = (t.prompt_tokens - 1) // bs
            hit = 0
            for h in blocks[:usable]:
                if h not in seen_blocks:
                    break
                hit += 1
            ub_cached += hit * bs
            ub_total += t.prompt_tokens
            seen_blocks.update(blocks)
            flow.arrived(req, now)
            i = router.route(req, replicas, now)
            if i >= 0:  # else it waits in the router's queue (Ours with scheduling)
                admit(req, i)
        elif kind == PREFILLED:  # a chunk's end; after the last, its first token (or, resumed, its next one)
            req = obj[0]
            rep = replicas[req.replica]
            tokens = req.prompt_tokens + req.generated
            req.computed += req.chunk
            req.chunk = 0
            ids = ids_of(req, req.computed)
            new, held, evicted = rep.cache.hash_private(ids, req.hashed)
            req.hashed = len(ids)
            report(rep, new, evicted)
            req.hold_ids = req.hold_ids + held
            req.hold_private -= len(held)
            if req.computed < tokens:  # the next chunk, if its blocks can be had
                n = min(chunk_tokens, tokens - req.computed)
                more = max(0, -(-(req.computed + n) // bs) - req.blocks_held)
                if allocate(rep, req, more, now):
                    run_chunk(rep, req, now, n)
                elif req in rep.running:  # alone and longer than the pool: it can never run
                    rep.running.remove(req)
                    rep.prefilling = None
                    report(rep, *rep.cache.release(req.hold_ids, req.hold_private, ids))
                    req.hold_ids, req.hold_private = [], 0
                    shed(req)
                    router.release(req)
                try_admit(rep, now)
                continue
            if not req.first_token:
                req.first_token = True
                req.ttft = now - req.arrival + m.itl_ms / 1000
                router.first_token(req)
            rep.prefilling = None
            req.itl = m.itl_ms * (1 + m.itl_batch_slope * rep.decoding) / 1000
            rep.decoding += 1
            decode(req, now)
            try_admit(rep, now)
        elif kind == GROW:  # the next token needs a block
            req = obj[0]
            rep = replicas[req.replica]
            req.generated += req.blocks_held * bs - (req.prompt_tokens + req.generated) + 1
            req.t_run = now
            if allocate(rep, req, 1, now):
                decode(req, now)
            elif req in rep.running:  # alone and out of blocks: it ends at the pool's size
                req.output_tokens = req.generated
                finish(rep, req, now)
            try_admit(rep, now)
        else:  # its last token
            req = obj[0]
            rep = replicas[req.replica]
            finish(rep, req, now)
            try_admit(rep, now)

    span = max(now - flow.t0, 1e-9)
    utils = [r.busy_s / span for r in replicas]
    served = [r.served for r in replicas]
    ttfts = sorted(r.ttft for r in done)
    prompt = sum(r.prompt_tokens for r in done) or 1
    mean_u = statistics.fmean(utils)
    mean_s = statistics.fmean(served) or 1
    return Result(
        router=router.name,
        replicas=n_replicas,
        sessions=len(sessions),
        requests=len(done) + rejected,
        served=len(done),
        rejected=rejected,
        hit_rate=sum(r.cached_tokens for r in done) / prompt,
        ttft_p50_ms=_pct(ttfts, 0.50) * 1000,
        ttft_p99_ms=_pct(ttfts, 0.99) * 1000,
        util_mean=mean_u,
        util_max_over_mean=max(utils) / mean_u if mean_u else 0.0,
        served_max_over_mean=max(served) / mean_s,
        upper_bound_hit_rate=ub_cached / max(ub_total, 1),
        preemptions=sum(r.preemptions for r in replicas),
        recomputed_tokens=sum(r.recomputed_tokens for r in done),
    )


def _attach_queue(
    router: SimRouter, admit: Callable[[Request, int], None], shed: Callable[[Request], None], kv_blocks: int
) -> Callable[[float], None] | None:
    """A router that queues (Ours with scheduling) gets the loop's admit and shed callbacks and the replicas' KV
    capacity; its `tick` runs at every event (its clock, its queue's timeouts). None for routers that place every
    request at once."""
    if not getattr(router, "queues", False):
        return None
    router.attach(admit, shed, kv_blocks)  # type: ignore[attr-defined]
    return router.tick  # type: ignore[attr-defined]


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def routers(block_size: int, **ours_cost: Any) -> list[Callable[[], SimRouter]]:
    return [
        RoundRobin,
        PowerOfTwo,
        SessionAffinity,
        lambda: PrefixAffinity(block_size),
        lambda: PrefixAffinity(block_size, events=True),
        lambda: Ours(block_size, "approx", **ours_cost),
        lambda: Ours(block_size, "kv", **ours_cost),
        Oracle,
    ]

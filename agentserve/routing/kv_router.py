"""The KV-aware router: prefix index + load + admission, with replicas joining and leaving.

Plain Python (asyncio only for admission waits); `serve/deployments/router.py` wraps it as the Router deployment
and feeds it KV events. It keeps the state (the index from engine KV events, the index learned from its own
decisions, load leases, sessions, the admission queue) and asks its routing policy (routing/policies: kv, approx,
least_loaded, round_robin) which replica takes each request. Session-aware scheduling (routing/scheduling: the
admission order; routing/kv_pressure.py: which idle sessions keep their KV) is off unless configured.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from agentserve.protocol import RouteDecision, RouteRequest
from agentserve.protocol.cluster import ReplicaStats
from agentserve.routing.admission import DEFER, AdmissionQueue, Deferred
from agentserve.routing.approx import ApproxIndex
from agentserve.routing.cost import Candidate, Choice, CostConfig, request_blocks, saturated
from agentserve.routing.index import ApplyStats, EventIndex
from agentserve.kv_events.format import KvEvent
from agentserve.routing.holds import Holds
from agentserve.routing.kv_pressure import KvPressure
from agentserve.routing.load import LoadTracker, ReplicaLoad
from agentserve.routing.policies import Placement, PolicyName, PrefixIndexes, RoutingPolicy, make_policy
from agentserve.routing.scheduling import SchedulingConfig, make_terms
from agentserve.routing.sessions import SessionTable


@dataclass(frozen=True, slots=True)
class RouterConfig:
    cost: CostConfig
    policy: PolicyName = "kv"
    expire_after_s: float = 10.0  # a replica silent this long is dropped
    provisional_ttl_s: float = 30.0  # kv: routed prompts count as cached until events confirm
    approx_ttl_s: float = 120.0
    approx_max_blocks: int = 1 << 20
    max_waiting: int = 1024
    max_wait_s: float = 30.0
    retry_after_s: float = 2.0
    max_sessions: int = 100_000
    resident_s: float = 30.0  # a session counts toward its replica's carried sessions this long after a turn
    lease_s: float = 15.0  # a routed request nobody renews (engine heartbeat) for this long is released
    scheduling: SchedulingConfig = SchedulingConfig()  # all off: FCFS admission, the engine's LRU decides


@dataclass
class _Replica:
    last_seen: float
    events: bool  # fed by KV events (else approximate even in kv mode)


class KvRouter:
    def __init__(
        self, cfg: RouterConfig, *, clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None
    ) -> None:
        self.cfg = cfg
        self._clock = clock
        self._rng = rng or random.Random(0)
        self._policies: dict[str, RoutingPolicy] = {}  # each used so far: switching back keeps its state
        self._policy = self._policy_named(cfg.policy)
        self._events = EventIndex(cfg.cost.block_size)
        # The learned index is the whole view of a policy that learns without events (approx), else provisional.
        learned_only = self._policy.learns and not self._policy.uses_events
        ttl = cfg.approx_ttl_s if learned_only else cfg.provisional_ttl_s
        self._learned = ApproxIndex(ttl_s=ttl, max_blocks=cfg.approx_max_blocks, clock=clock)
        self._indexes = PrefixIndexes(reported=self._events.index, learned=self._learned)
        self._load = LoadTracker(foreign_blocks=request_blocks(0, None, 1 << 30, cfg.cost))
        self._replicas: dict[str, _Replica] = {}
        self._sessions = SessionTable(resident_s=cfg.resident_s, max_sessions=cfg.max_sessions)
        sched = cfg.scheduling
        self._terms = make_terms(sched)
        self._queue: AdmissionQueue[RouteDecision] = AdmissionQueue(
            max_waiting=cfg.max_waiting, max_wait_s=cfg.max_wait_s, retry_after_s=cfg.retry_after_s, clock=clock,
            terms=self._terms, shed_lowest=sched.shed_lowest, on_drop=self._dropped,
            rank_after_s=sched.rank_after_wait_s,
        )  # fmt: skip
        # wait_for_cache: the cost rule over every replica, saturation aside (a saturated best one means wait).
        self._unbounded = replace(
            cfg.cost, max_in_flight=None, max_active_tokens=None, max_prefill_tokens=None
        ) if sched.wait_for_cache else None  # fmt: skip
        self._holds = Holds(max_held=2 * cfg.max_waiting)  # requests held back while replicas have room
        self._kv = KvPressure(
            high_watermark=sched.kv_high_watermark, keep_gap_s=sched.kv_keep_gap_s, max_sessions=cfg.max_sessions
        ) if sched.kv_pressure else None  # fmt: skip
        self._next_sweep = 0.0
        self.counters = {"routed": 0, "prefix": 0, "affinity": 0, "queued": 0, "lapsed": 0}

    # -- membership -----------------------------------------------------------
    def register(self, replica: str, *, events: bool, kv_blocks: int | None = None) -> None:
        """A replica joined (or restarted under the same id: its cache is empty again). `kv_blocks`: its KV
        capacity in blocks, where the engine says (KV-pressure awareness needs it)."""
        if replica in self._replicas:
            self._events.clear(replica)
            self._learned.clear(replica)
        self._replicas[replica] = _Replica(self._clock(), events)
        for part in (self._events, self._learned, self._load):
            part.add_replica(replica)
        if self._kv is not None:
            self._kv.set_capacity(replica, kv_blocks)
        self._pump()

    def heartbeat(self, replica: str) -> bool:
        """False if the replica is unknown (the router restarted): it should register again."""
        rep = self._replicas.get(replica)
        if rep is None:
            return False
        rep.last_seen = self._clock()
        return True

    def remove(self, replica: str) -> list[str]:
        """Forget a replica (left, died, or stopped reporting); returns the requests it had."""
        if self._replicas.pop(replica, None) is None:
            return []
        self._events.remove_replica(replica)
        self._learned.remove_replica(replica)
        self._sessions.forget_replica(replica)
        if self._kv is not None:
            self._kv.forget_replica(replica)
        return self._load.remove_replica(replica)

    def expire(self) -> list[str]:
        now = self._clock()
        stale = [r for r, rep in self._replicas.items() if now - rep.last_seen > self.cfg.expire_after_s]
        for r in stale:
            self.remove(r)
        return stale

    def replicas(self) -> list[str]:
        return sorted(self._replicas)

    # -- cache state ---------------------------------------------------------
    def apply_events(self, replica: str, events: list[KvEvent]) -> ApplyStats:
        return self._events.apply(replica, events)

    def stored_hashes(self, replica: str, hashes: list[int]) -> None:
        """Index blocks reported directly in the preprocessor's hashes (simulated engines)."""
        self._events.index.add(replica, hashes)

    def removed_hashes(self, replica: str, hashes: list[int]) -> None:
        self._events.index.remove(replica, hashes)

    def forget_cache(self, replica: str) -> None:
        """The event stream had a gap we could not replay: start the replica's index afresh."""
        self._events.clear(replica)

    def overlaps(self, block_hashes: list[int]) -> dict[str, int]:
        """Cached leading blocks per replica, as the policy reads the indexes."""
        return self._policy.overlaps(self._indexes, block_hashes)

    # -- routing -------------------------------------------------------------
    def try_route(self, req: RouteRequest) -> RouteDecision | None:
        """Route now, or None when it must wait (every replica saturated, or none with KV room for it)."""
        decision = self._place(req)
        return decision if isinstance(decision, RouteDecision) else None

    def _place(self, req: RouteRequest) -> RouteDecision | None | Deferred:
        """Route now; None when every replica is saturated; Deferred when some have slots but not for it (its
        best replica is saturated, or none has KV room for it)."""
        self.expire()
        self.sweep_leases()
        if not self._replicas:
            return RouteDecision(replica_id=None, reason="no_replica")
        policy = self._policy
        overlaps = policy.overlaps(self._indexes, req.block_hashes)
        resident = self._sessions.resident(self._clock())
        cands = tuple([  # a list first: tuple() of a generator costs more
            Candidate(r, overlaps.get(r, 0), self._load.load(r), self._index_size(r), resident[r])
            for r in self._replicas
        ])
        new_blocks = request_blocks(req.prompt_tokens, req.hints.osl, req.max_tokens, self.cfg.cost)
        session = req.session_key if policy.uses_sessions else ""
        home = self._home(req, session)
        continuing = bool(session) and req.continues and req.hints.kind != "compaction"
        if home is None and continuing and overlaps:
            # A later turn this Router never placed (its own Router replica died, or Serve sent it elsewhere): its
            # home is where its prefix is, as its own Router would have kept it, not a new session's spread.
            best = max(overlaps, key=overlaps.__getitem__)
            home = best if overlaps[best] > 0 else None
        if self._kv is not None and policy.uses_sessions:
            kv = self._kv_candidates(req, session, home, cands, overlaps, new_blocks)
            if not isinstance(kv, tuple):
                return kv
            cands, home = kv
        new_session = bool(session) and home is None and not continuing
        placement = Placement(cands, req.prompt_tokens, new_blocks, home, new_session)
        if self._unbounded is not None and policy.uses_sessions and not self._held_long(req, "cache"):
            choice = self._best_for_cache(req, placement)
            if isinstance(choice, Deferred) or choice is None:
                return choice
        else:
            choice = policy.pick(placement, self.cfg.cost, self._rng)
        if choice is None:
            return None
        self._commit(req, choice, new_blocks, session)
        return RouteDecision(replica_id=choice.replica, overlap_blocks=choice.overlap_blocks, reason=choice.reason)

    async def route(self, req: RouteRequest) -> RouteDecision:
        decision = self._place(req)
        if isinstance(decision, RouteDecision):
            return decision
        self.counters["queued"] += 1
        return await self._queue.wait(req, _jump(req))

    def offer(
        self, req: RouteRequest, admitted: Callable[[RouteDecision], None], rejected: Callable[[Exception], None]
    ) -> RouteDecision | None:
        """`route` without asyncio (the simulator's virtual clock): the decision now, or None and later one of
        the callbacks (`expire_waiting` rejects waits past max_wait_s). Raises RequestError('overloaded') when
        the queue is full."""
        decision = self._place(req)
        if isinstance(decision, RouteDecision):
            return decision
        self.counters["queued"] += 1
        self._queue.offer(req, _jump(req), admitted, rejected)
        return None

    def expire_waiting(self) -> int:
        return self._queue.expire()

    def route_to(self, req: RouteRequest, replica: str) -> RouteDecision | None:
        """Account a request pinned to a replica by the caller (speculative prefill); None if the replica is
        unknown or saturated: optional work never takes a slot a real request would wait for."""
        if replica not in self._replicas or saturated(self._load.load(replica), self.cfg.cost):
            return None
        overlap = self.overlaps(req.block_hashes).get(replica, 0)
        cfg = self.cfg.cost
        blocks = request_blocks(req.prompt_tokens, req.hints.osl, req.max_tokens, cfg)
        choice = Choice(replica, overlap, 0.0, "affinity")
        self._commit(req, choice, blocks, req.session_key)
        return RouteDecision(replica_id=replica, overlap_blocks=overlap, reason="affinity")

    def first_token(self, request_id: str) -> None:
        self._load.first_token(request_id)
        self._pump()

    def release(self, request_id: str) -> None:
        self._load.release(request_id)
        self._ended(request_id)
        self._pump()

    def report(self, first_tokens: Iterable[str] = (), finished: Iterable[str] = (), replica: str | None = None) -> None:
        """An engine replica's batched signals: these requests produced their first token / ended (`replica`: whose;
        those another Router leased are counted in its load until they end)."""
        for rid in first_tokens:
            if self._load.replica_of(rid) is not None:
                self._load.first_token(rid)
            elif replica is not None:
                self._load.foreign_started(replica, rid)
        for rid in finished:
            if self._load.release(rid) is None and replica is not None:
                self._load.foreign_ended(replica, rid)
            self._ended(rid)
        self._pump()

    def renew(self, request_ids: Iterable[str], replica: str | None = None) -> None:
        """The serving replica still runs these requests (all it runs, when `replica` names it): extend their leases,
        and count those another Router replica leased in its load."""
        ids = list(request_ids)
        self._load.renew(ids, self._clock() + self.cfg.lease_s)
        if replica is not None:
            self._load.running(replica, ids)

    def sweep_leases(self, *, force: bool = False) -> list[str]:
        """Release leases nobody renewed in time (checked at most once a second)."""
        now = self._clock()
        if not force and now < self._next_sweep:
            return []
        self._next_sweep = now + 1.0
        gone = self._load.lapsed(now)
        for rid in gone:
            self._ended(rid)
        if gone:
            self.counters["lapsed"] += len(gone)
            self._pump()
        return gone

    @property
    def in_flight(self) -> int:
        return len(self._load)

    def load(self, replica: str) -> ReplicaLoad:
        return self._load.load(replica)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def rejected(self) -> int:
        return self._queue.rejected

    def snapshot(self) -> dict[str, ReplicaStats]:
        """Each replica's load and index sizes, by replica id (the model left to the caller: this router has one)."""
        out = {}
        for r in sorted(self._replicas):
            ld = self._load.load(r)
            out[r] = ReplicaStats(
                in_flight=ld.in_flight,
                prefill_tokens=ld.prefill_tokens,
                active_blocks=round(ld.active_blocks, 2),
                indexed_blocks=self._events.index.size(r),
                learned_blocks=self._learned.index.size(r),
            )
        return out

    def kept_sessions(self, replica: str) -> dict[str, float]:
        """KV-pressure awareness: the idle sessions whose blocks `replica` keeps (session key -> own blocks);
        empty when it is off. What an engine eviction hook would protect."""
        return self._kv.kept(replica, self._clock()) if self._kv is not None else {}

    def kv_use(self, replica: str) -> tuple[float, float, float | None]:
        """(running requests' blocks, kept idle sessions' blocks, capacity) as KV-pressure awareness counts them."""
        return self._kv.used(replica, self._clock()) if self._kv is not None else (0.0, 0.0, None)

    # -- internals -----------------------------------------------------------
    def _kv_candidates(
        self, req: RouteRequest, session: str, home: str | None, cands: tuple[Candidate, ...],
        overlaps: dict[str, int], new_blocks: float,
    ) -> tuple[tuple[Candidate, ...], str | None] | None | Deferred:
        """The candidates with KV room for this request, and its home (none when its home gave its blocks up and
        they are gone); None / DEFER when none has room (every replica saturated / some have slots)."""
        kv, now = self._kv, self._clock()
        assert kv is not None
        if home is not None and kv.gave_up(session, now):
            if overlaps.get(home, 0) * self.cfg.cost.block_size < req.prompt_tokens // 2:
                home = None  # its blocks are gone: placed where there is room, not sent back to evict others'
        own = kv.own_blocks(session, new_blocks, max(overlaps.values(), default=0))
        if self._held_long(req, "kv"):
            return cands, home  # held long enough: placed by the cost, the engine's LRU evicts what it must
        fits = tuple(c for c in cands if kv.admits(c.replica, session, own, c.load.in_flight, now))
        if fits:
            return fits, home
        if all(saturated(c.load, self.cfg.cost) for c in cands):
            return None
        self._hold(req, "kv")
        return DEFER

    def _best_for_cache(self, req: RouteRequest, placement: Placement) -> Choice | Deferred | None:
        """wait_for_cache: the best replica by the cost over every replica, saturation aside; if it is saturated,
        wait for it (None: every replica is saturated)."""
        choice = self._policy.pick(placement, self._unbounded, self._rng)
        if choice is None or not saturated(self._load.load(choice.replica), self.cfg.cost):
            return choice
        since = self._hold(req, "cache")  # its wait counts from its first try
        if all(saturated(c.load, self.cfg.cost) for c in placement.candidates):
            return None
        return Deferred(choice.replica, since + self.cfg.scheduling.max_cache_wait_s)

    def _hold(self, req: RouteRequest, why: str) -> float:
        """`req` is held back (kv: no KV room; cache: waits for its saturated best replica); since when."""
        self.counters[f"{why}_deferred"] = self.counters.get(f"{why}_deferred", 0) + 1
        return self._holds.hold(req.request_id, why, self._clock())

    def _held_long(self, req: RouteRequest, why: str) -> bool:
        sched = self.cfg.scheduling
        limit = sched.kv_max_defer_s if why == "kv" else sched.max_cache_wait_s
        waited = self._holds.waited(req.request_id, why, self._clock())
        return waited > 0 and waited >= limit

    def _dropped(self, req: RouteRequest) -> None:
        """The queue turned `req` away (full, or it waited max_wait_s) or its caller left: it holds nothing."""
        self._holds.drop(req.request_id)

    def _ended(self, request_id: str) -> None:
        if self._kv is not None:
            self._kv.ended(request_id, self._clock())

    def _index_size(self, replica: str) -> int:
        return self._events.index.size(replica) + self._learned.index.size(replica)

    def _home(self, req: RouteRequest, session: str) -> str | None:
        """Where the session's next turn belongs: its last turn's replica; a subagent's first request goes where
        its parent is (it starts from the parent's context). A compaction starts a new prefix (the summary of the
        history, not the history): it is placed like a new session's first turn, and its replica becomes home."""
        if not session or req.hints.kind == "compaction":
            return None
        home = self._sessions.replica_of(session)
        if home is None and req.parent_session_key:
            home = self._sessions.replica_of(req.parent_session_key)
        return home

    def _commit(self, req: RouteRequest, choice: Choice, new_blocks: float, session: str) -> None:
        uncached = max(0, req.prompt_tokens - choice.overlap_blocks * self.cfg.cost.block_size)
        now = self._clock()
        self._load.start(req.request_id, choice.replica, uncached, new_blocks, now + self.cfg.lease_s)
        if self._terms:
            cost = self.cfg.cost
            served = uncached + min(req.hints.osl if req.hints.osl is not None else cost.default_osl, req.max_tokens)
            for term in self._terms:
                term.charge(req, served, now)
        if self._kv is not None:
            self._kv.started(req.request_id, session, choice.replica, new_blocks, choice.overlap_blocks)
        if self._policy.learns:
            self._learned.learn(choice.replica, req.block_hashes)
        if session:
            self._sessions.touch(session, choice.replica, self._clock())
        self.counters["routed"] += 1
        if len(self._holds):
            self._holds.drop(req.request_id)
        if choice.reason in ("prefix", "affinity"):
            self.counters[choice.reason] += 1

    def _pump(self) -> None:
        if len(self._queue):
            self._queue.pump(self._place, self._open)

    def _open(self, replica: str) -> bool:
        """Worth placing a waiter deferred for `replica` again: it has room, or it left (placed anew)."""
        return replica not in self._replicas or not saturated(self._load.load(replica), self.cfg.cost)

    def _policy_named(self, name: str) -> RoutingPolicy:
        policy = self._policies.get(name)
        if policy is None:
            policy = self._policies[name] = make_policy(name)
        return policy

    # -- policy ----------------------------------------------------------------
    @property
    def policy(self) -> RoutingPolicy:
        return self._policy

    def set_policy(self, name: PolicyName) -> None:
        """Switch policy in place (benchmarks interleave policies on the same engines): the indexes, leases and
        sessions stay; a policy used before comes back with its own state (round robin's turn). ValueError for an
        unknown name."""
        self._policy = self._policy_named(name)
        self.cfg = replace(self.cfg, policy=name)


def _jump(req: RouteRequest) -> float:
    """The FCFS overtaking a request's priority hints buy it, in seconds."""
    return float(req.hints.priority) + float(req.hints.latency_sensitivity or 0.0)

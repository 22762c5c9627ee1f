"""Session-aware admission order (routing/scheduling, routing/admission.py): switches off is exactly FCFS; a short
interactive session overtakes a long session's backlog; per-key shares hold; nothing waits past max_wait_s; rank
terms order only requests that have waited rank_after_wait_s (before that, FCFS)."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.config import RouterSpec, SchedulingSpec
from agentserve.protocol import AgentHints, RouteRequest
from agentserve.protocol.errors import RequestError
from agentserve.routing.admission import AdmissionQueue
from agentserve.routing.cost import CostConfig
from agentserve.routing.kv_router import KvRouter, RouterConfig
from agentserve.routing.scheduling import SchedulingConfig, make_terms

BS = 16
KINDS = ("user_message", "tool_result", "compaction", "subagent_spawn", "other")


def req(i: int, session: str = "", *, kind: str = "other", tenant: str = "", tokens: int = 64, priority: int = 0,
        osl: int = 16) -> RouteRequest:
    return RouteRequest.model_construct(
        request_id=f"r{i}", model="m", block_hashes=[hash((session, i, k)) for k in range(tokens // BS)],
        prompt_tokens=tokens, max_tokens=64, hints=AgentHints(session_id=session or None, kind=kind,
                                                              priority=priority, osl=osl),
        session_key=session, parent_session_key="", tenant=tenant, continues=False,
    )  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def router(clock: Clock, sched: SchedulingConfig = SchedulingConfig(), *, slots: int = 1, replicas: int = 1,
           max_waiting: int = 1024, max_wait_s: float = 30.0) -> KvRouter:
    cfg = RouterConfig(cost=CostConfig(block_size=BS, max_in_flight=slots), max_waiting=max_waiting,
                       max_wait_s=max_wait_s, expire_after_s=1e9, lease_s=1e9, scheduling=sched)
    r = KvRouter(cfg, clock=clock)
    for k in range(replicas):
        r.register(f"e{k}", events=True, kv_blocks=None)
    return r



def run_order(r: KvRouter, first: RouteRequest, waiters: list[RouteRequest], clock: Clock,
              waited: float = 2.0) -> list[str]:
    """One slot busy with `first`; `waiters` queue (1 ms apart) and wait `waited` s (by default past the default
    rank_after_wait_s, 1 s: a saturated queue); the slot is handed on one release at a time."""
    order: list[str] = []
    assert r.offer(first, order.append, pytest.fail) is not None
    for w in waiters:
        clock.t += 0.001
        assert r.offer(w, lambda d, rid=w.request_id: order.append(rid), pytest.fail) is None
    clock.t += waited
    del order[:]
    current = first.request_id
    while len(order) < len(waiters):
        r.release(current)
        current = order[-1]
    return order


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(KINDS), st.integers(0, 3), st.integers(16, 400)),
                min_size=1, max_size=25))
def test_with_every_switch_off_the_order_is_exactly_fcfs_with_priority_jumps(spec):
    clock = Clock()
    r = router(clock)
    waiters = [req(i + 1, f"s{s}", kind=k, priority=p, tokens=t) for i, (s, k, p, t) in enumerate(spec)]
    order = run_order(r, req(0, "busy"), waiters, clock)
    # arrival - priority (arrivals 1 ms apart), then arrival order: Dynamo's fcfs key, as before scheduling existed
    expected = sorted(range(len(waiters)), key=lambda i: (0.001 * (i + 1) - waiters[i].hints.priority, i))
    assert order == [waiters[i].request_id for i in expected]


def test_the_default_spec_is_every_switch_off():
    spec = RouterSpec().scheduling
    assert not (spec.session_fairness or spec.interactive_first or spec.key_shares or spec.kv_pressure)
    assert make_terms(SchedulingConfig(**spec.model_dump())) == ()


def _long_backlog_then_short(sched: SchedulingConfig, kind_long: str, kind_short: str,
                             waited: float = 2.0) -> list[str]:
    clock = Clock()
    r = router(clock, sched)
    # The long session has been served for a while (20 turns of 4K tokens) ...
    for i in range(20):
        clock.t += 1
        r.release(r.try_route(req(100 + i, "long", tokens=4096, kind="tool_result")).replica_id and f"r{100 + i}")
    # ... and has 8 requests waiting (a subagent fan-out) when a short session's user turn arrives.
    backlog = [req(200 + i, "long", kind=kind_long, tokens=4096) for i in range(8)]
    short = req(300, "short", kind=kind_short, tokens=512)
    return run_order(r, req(0, "busy"), [*backlog, short], clock, waited)


def test_a_short_interactive_session_overtakes_a_long_sessions_backlog_at_saturation():
    fcfs = _long_backlog_then_short(SchedulingConfig(), "tool_result", "user_message")
    assert fcfs[-1] == "r300"  # today: behind all eight
    for sched in (SchedulingConfig(session_fairness=True), SchedulingConfig(interactive_first=True)):
        assert _long_backlog_then_short(sched, "tool_result", "user_message")[0] == "r300", sched
    # Fairness alone also lifts a short session's background turn over the long session's.
    assert _long_backlog_then_short(SchedulingConfig(session_fairness=True), "tool_result", "tool_result")[0] == "r300"


def test_interactive_first_puts_user_messages_before_background_within_fairness():
    clock = Clock()
    r = router(clock, SchedulingConfig(session_fairness=True, interactive_first=True))
    waiters = [req(1, "a", kind="tool_result"), req(2, "b", kind="compaction"), req(3, "c", kind="user_message"),
               req(4, "d", kind="other"), req(5, "e", kind="user_message")]
    order = run_order(r, req(0, "busy"), waiters, clock)
    assert order[:2] == ["r3", "r5"] and sorted(order[2:]) == ["r1", "r2", "r4"]


# ranked on arrival; ranked after 1 s, each release 0.5 s apart (the backlog's waits: ~4 s)
@pytest.mark.parametrize("rank_after, step", [(0.0, 0.01), (1.0, 0.5)])
@settings(max_examples=25, deadline=None)
@given(st.floats(0.25, 4.0), st.integers(16, 1024), st.integers(16, 1024))
def test_per_key_shares_hold_within_tolerance(rank_after, step, weight, size_a, size_b):
    """Two keys always backlogged: service (tokens) splits as their weights, whatever their request sizes."""
    ka, kb = "a" * 64, "b" * 64
    clock = Clock()
    r = router(clock, SchedulingConfig(key_shares=True, key_weights={ka: weight, kb: 1.0}, service_half_life_s=1e9,
                                       rank_after_wait_s=rank_after))
    served = {ka: 0, kb: 0}
    sizes = {ka: size_a, kb: size_b}
    n = itertools.count(1)
    running = ["r0"]
    assert r.offer(req(0, "x"), lambda d: None, pytest.fail)

    def submit(key: str) -> None:
        i = next(n)
        rq = req(i, f"{key[0]}{i}", tenant=key, tokens=sizes[key], osl=0)
        r.offer(rq, lambda d, rq=rq: (running.append(rq.request_id), served.__setitem__(key, served[key] + rq.prompt_tokens),
                                     submit(key)), pytest.fail)  # fmt: skip

    for _ in range(4):
        submit(ka), submit(kb)
    for _ in range(400):
        clock.t += step
        r.release(running.pop(0))
    ratio = served[ka] / served[kb]
    # within one request of each key's size of the exact split
    total = served[ka] + served[kb]
    exact_a = total * weight / (weight + 1)
    assert abs(served[ka] - exact_a) <= max(size_a, size_b) * 1.5, (ratio, weight)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from(KINDS), st.floats(0, 3), st.booleans()),
                min_size=1, max_size=60),
       st.sampled_from([SchedulingConfig(), SchedulingConfig(session_fairness=True, interactive_first=True),
                        SchedulingConfig(session_fairness=True, interactive_first=True, key_shares=True),
                        SchedulingConfig(session_fairness=True, interactive_first=True, rank_after_wait_s=0.0)]))
def test_nothing_starves_every_waiter_is_admitted_or_told_to_retry_within_max_wait(events, sched):
    clock = Clock()
    r = router(clock, sched, slots=2, replicas=2, max_waiting=8, max_wait_s=5.0)
    outcome: dict[str, tuple[str, float]] = {}
    arrived: dict[str, float] = {}
    running: list[str] = []
    for i, (session, kind, dt, release) in enumerate(events):
        clock.t += dt
        r.expire_waiting()
        if release and running:
            r.release(running.pop(0))
        rq = req(i, f"s{session}", kind=kind, tenant=f"{session % 2}" * 64)
        arrived[rq.request_id] = clock.t

        def ok(d, rid=rq.request_id):
            outcome[rid] = ("admitted", clock.t)
            running.append(rid)

        def no(e, rid=rq.request_id):
            assert isinstance(e, RequestError) and e.kind == "overloaded" and e.retry_after
            outcome[rid] = ("retry", clock.t)

        try:
            if r.offer(rq, ok, no) is not None:
                ok(None)
        except RequestError as e:
            no(e)
    for _ in range(4):  # time runs on with nothing released
        clock.t += 2.0
        r.expire_waiting()
    assert set(outcome) == set(arrived)
    for rid, (_, at) in outcome.items():
        assert at - arrived[rid] <= 5.0 + 2.0 + 3.0  # within max_wait (checked at the next step)
    assert r.waiting == 0


def test_a_full_queue_turns_away_its_lowest_ranked_waiter_not_a_higher_ranked_newcomer():
    clock = Clock()
    r = router(clock, SchedulingConfig(interactive_first=True), max_waiting=2)
    r.offer(req(0, "busy"), lambda d: None, pytest.fail)
    got: dict[str, object] = {}
    for i, kind in ((1, "tool_result"), (2, "tool_result")):
        r.offer(req(i, f"s{i}", kind=kind), lambda d, i=i: got.__setitem__(f"r{i}", d),
                lambda e, i=i: got.__setitem__(f"r{i}", e))
    # (every waiter is younger than rank_after_wait_s: shedding goes by rank whatever the waits)
    r.offer(req(3, "s3", kind="user_message"), lambda d: got.__setitem__("r3", d), pytest.fail)
    assert isinstance(got["r2"], RequestError) and got["r2"].retry_after  # the newest background waiter
    with pytest.raises(RequestError):  # a background newcomer ranks below every waiter: it is the one turned away
        r.offer(req(4, "s4", kind="tool_result"), pytest.fail, pytest.fail)
    clock.t += 2.0  # past rank_after_wait_s: the user message goes first
    r.release("r0")
    assert "r3" in got and not isinstance(got["r3"], RequestError)


def test_the_async_path_orders_the_same_way():
    async def go() -> list[str]:
        clock = Clock()
        r = router(clock, SchedulingConfig(session_fairness=True))
        for i in range(5):
            r.release(r.try_route(req(50 + i, "long", tokens=4096)).replica_id and f"r{50 + i}")
        assert r.try_route(req(0, "busy")) is not None
        done: list[str] = []

        async def one(rq):
            await r.route(rq)
            done.append(rq.request_id)

        tasks = [asyncio.create_task(one(req(1 + i, "long"))) for i in range(3)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(one(req(9, "short"))))
        await asyncio.sleep(0)
        clock.t += 2.0  # they have waited past rank_after_wait_s
        current = "r0"
        for k in range(4):
            r.release(current)
            while len(done) <= k:
                await asyncio.sleep(0.001)
            current = done[-1]
        await asyncio.gather(*tasks)
        return done

    assert asyncio.run(go())[0] == "r9"


def test_scheduling_spec_checks_its_key_weights():
    with pytest.raises(ValueError):
        SchedulingSpec(key_weights={"not-a-digest": 1.0})
    with pytest.raises(ValueError):
        SchedulingSpec(key_weights={"a" * 64: 0.0})


def test_admission_queue_alone_is_fcfs_without_terms():
    clock = Clock()
    q: AdmissionQueue[str] = AdmissionQueue(max_waiting=10, max_wait_s=1, retry_after_s=1, clock=clock)
    got: list[str] = []
    for i, jump in enumerate([0, 0, 5, 0]):
        clock.t += 1
        q.offer(req(i), jump, got.append, pytest.fail)
    q.pump(lambda item: item.request_id)
    assert got == ["r2", "r0", "r1", "r3"]


def test_a_subagents_first_request_follows_its_parent_and_later_ones_its_own_session():
    """Issue 30's lineage placement, checked under scheduling: the first by the parent's session (shared prefix),
    later ones by the subagent's own, even after the parent moved."""
    clock = Clock()
    r = router(clock, SchedulingConfig(session_fairness=True, interactive_first=True, wait_for_cache=True),
               slots=8, replicas=2)
    parent_home = r.try_route(req(0, "p", kind="user_message")).replica_id
    r.release("r0")
    spawn = req(1, "p/agent", kind="subagent_spawn").model_copy(update={"parent_session_key": "p"})
    assert r.try_route(spawn).replica_id == parent_home
    r.release("r1")
    other = next(x for x in r.replicas() if x != parent_home)
    assert r.route_to(req(2, "p", kind="tool_result"), other) is not None  # the parent moves
    r.release("r2")
    later = req(3, "p/agent", kind="tool_result").model_copy(update={"parent_session_key": "p", "continues": True})
    assert r.try_route(later).replica_id == parent_home  # its own home, not where its parent went


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 5000)), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 4), st.integers(0, 20000)), max_size=6), st.integers(1, 30))
def test_one_pump_admits_in_the_order_of_ranking_afresh_before_each_admission(waiters, history, room):
    """The pump ranks lazily; the order must be that of re-ranking every waiter before each admission."""
    from agentserve.routing.scheduling.session_las import SessionLas

    def build():
        clock = Clock()
        las = SessionLas(half_life_s=60.0, max_sessions=100, aging_tokens_per_s=500.0)
        for s, tokens in history:
            las.charge(req(0, f"s{s}"), tokens, 0.0)
        q: AdmissionQueue[str] = AdmissionQueue(max_waiting=100, max_wait_s=100, retry_after_s=1, clock=clock,
                                               terms=(las,))
        reqs = []
        for i, (s, tokens) in enumerate(waiters):
            clock.t += 0.01
            reqs.append((req(i + 1, f"s{s}", tokens=tokens), tokens))
        return clock, las, q, reqs

    clock, las, q, reqs = build()
    got: list[str] = []
    for r, _ in reqs:
        q.offer(r, 0.0, got.append, pytest.fail)
    size = {r.request_id: t for r, t in reqs}
    left = [room]

    def admit(item):
        if left[0] == 0:
            return None
        left[0] -= 1
        las.charge(item, size[item.request_id], clock.t)
        return item.request_id

    q.pump(admit)
    # the reference: every waiter ranked afresh before each admission
    clock2, las2, _, reqs2 = build()
    from agentserve.routing.scheduling.base import Waiting

    pending = list(enumerate(reqs2))
    expected = []
    while pending and len(expected) < room:
        # every waiter was offered at the same instant (clock2.t): ties go by arrival sequence
        best = min(pending, key=lambda p: (las2.value(Waiting(p[1][0], clock2.t, 0.0, p[0]), clock2.t), p[0]))
        pending.remove(best)
        las2.charge(best[1][0], best[1][1], clock2.t)
        expected.append(best[1][0].request_id)
    assert got == expected


# -- rank_after_wait_s: rank terms order only requests that have waited that long --------------------------------


def _queue(clock: Clock, terms, rank_after: float, **kw) -> AdmissionQueue[str]:
    kw = {"max_waiting": 100, "max_wait_s": 30.0, "retry_after_s": 1.0} | kw
    return AdmissionQueue(clock=clock, terms=terms, rank_after_s=rank_after, **kw)


def _terms(kind: str):
    from agentserve.routing.scheduling.interactive_first import InteractiveFirst
    from agentserve.routing.scheduling.session_las import SessionLas

    if kind == "static":
        return (InteractiveFirst(),)
    las = SessionLas(half_life_s=60.0, max_sessions=100, aging_tokens_per_s=500.0)
    las.charge(req(0, "long"), 50_000, 0.0)  # the long session has been served: its turns rank last
    return (InteractiveFirst(), las)


def _offer_all(q: AdmissionQueue[str], clock: Clock, plan, got: list[str]) -> None:
    for at, rq, jump in plan:
        clock.t = at
        q.offer(rq, jump, got.append, pytest.fail)


def _four(times):
    """A long session's tool results and two user messages (rank puts the user messages first), at `times`."""
    rqs = [req(1, "long", kind="tool_result"), req(2, "short", kind="user_message"), req(3, "long", kind="tool_result"),
           req(4, "s4", kind="user_message")]
    return [(at, rq, 0.0) for at, rq in zip(times, rqs)]


def _four_waiting(terms: str, times) -> tuple[AdmissionQueue[str], Clock, list[str]]:
    """_four offered at `times` to a queue that ranks after 1 s; the queue, its clock and the admitted ids."""
    clock = Clock()
    q = _queue(clock, _terms(terms), 1.0)
    got: list[str] = []
    _offer_all(q, clock, _four(times), got)
    return q, clock, got


@pytest.mark.parametrize("terms", ["static", "dynamic"])
def test_below_rank_after_wait_s_waiters_keep_arrival_order_even_when_rank_says_otherwise(terms):
    # rank would put the user messages first; none has waited 1 s yet
    q, clock, got = _four_waiting(terms, (0.1, 0.2, 0.3, 0.4))
    clock.t = 1.05  # r1 waited 0.95 s
    assert q.pump(lambda item: item.request_id) == 4
    assert got == ["r1", "r2", "r3", "r4"]


@pytest.mark.parametrize("terms", ["static", "dynamic"])
def test_past_rank_after_wait_s_rank_order_applies(terms):
    q, clock, got = _four_waiting(terms, (0.1, 0.2, 0.3, 0.4))
    clock.t = 1.5  # every one has waited past 1 s
    q.pump(lambda item: item.request_id)
    assert got[:2] == ["r2", "r4"] and sorted(got[2:]) == ["r1", "r3"]


@pytest.mark.parametrize("terms", ["static", "dynamic"])
def test_those_past_rank_after_wait_s_go_by_rank_ahead_of_the_young_in_arrival_order(terms):
    q, clock, got = _four_waiting(terms, (0.0, 0.2, 1.0, 1.1))
    clock.t = 1.25  # r1 and r2 have waited 1 s, r3 and r4 have not: r4 (a user message) does not overtake r3
    q.pump(lambda item: item.request_id)
    assert got == ["r2", "r1", "r3", "r4"]


def test_a_priority_jump_counts_as_time_waited_for_rank_after_wait_s():
    clock = Clock()
    q = _queue(clock, _terms("static"), 1.0)
    got: list[str] = []
    # FCFS (arrival - jump): r2, r3, r1. Ranked at once: r3, r1, r2. r2 and r3 jump 5 s: they have "waited" 5 s.
    _offer_all(q, clock, [(0.0, req(1, "a", kind="user_message"), 0.0), (0.1, req(2, "b", kind="tool_result"), 5.0),
                          (0.2, req(3, "c", kind="user_message"), 5.0)], got)
    clock.t = 0.3
    q.pump(lambda item: item.request_id)
    assert got == ["r3", "r2", "r1"]


def test_rank_after_wait_s_zero_ranks_on_arrival_as_before_and_the_default_keeps_short_waits_fcfs():
    # A long session's backlog and a short session's user turn, 1 ms apart, admitted at once (a queue below saturation)
    ranked = _long_backlog_then_short(SchedulingConfig(session_fairness=True, rank_after_wait_s=0.0),
                                      "tool_result", "user_message", waited=0.0)
    assert ranked[0] == "r300"
    default = _long_backlog_then_short(SchedulingConfig(session_fairness=True, interactive_first=True),
                                       "tool_result", "user_message", waited=0.0)
    assert default[-1] == "r300"  # FCFS: nothing has waited rank_after_wait_s (1 s)


def test_rank_after_wait_s_is_wired_from_the_spec_and_every_default_matches_the_internal_config():
    assert SchedulingSpec().rank_after_wait_s == SchedulingConfig().rank_after_wait_s == 1.0
    spec = SchedulingSpec(rank_after_wait_s=2.5)
    assert SchedulingConfig(**spec.model_dump()).rank_after_wait_s == 2.5
    assert RouterSpec.model_validate({"scheduling": {"rank_after_wait_s": 0}}).scheduling.rank_after_wait_s == 0.0
    with pytest.raises(ValueError):
        SchedulingSpec(rank_after_wait_s=-1.0)
    internal = SchedulingConfig()
    for name, value in SchedulingSpec().model_dump().items():
        assert getattr(internal, name) == value, name


STEP = st.tuples(
    st.floats(0.0, 1.5),  # time passes
    st.one_of(st.none(), st.tuples(st.integers(0, 4), st.sampled_from(KINDS), st.integers(16, 4096),
                                   st.sampled_from([0.0, 0.0, 0.0, 2.0, -1.0]), st.booleans())),  # an arrival
    st.integers(0, 3),  # then a pump with room for this many (0: no pump)
)


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=50), st.sampled_from([0.0, 0.5, 1.0, 2.5, 100.0]),
       st.sampled_from(["static", "dynamic", "keys"]), st.booleans(), st.integers(1, 8))
def test_admission_order_is_always_valid_under_random_arrivals_ranks_and_times(steps, rank_after, terms_kind,
                                                                               shed_lowest, max_waiting):
    """Against a reference that ranks every waiter afresh before each admission: each admission is the best waiter
    by (those that have waited rank_after_s by rank, the rest FCFS) among those not yet passed over in this pump;
    no request is admitted, rejected or lost twice or never; none waits past max_wait_s (checked at each step)."""
    from agentserve.routing.admission import DEFER
    from agentserve.routing.scheduling.base import Waiting
    from agentserve.routing.scheduling.interactive_first import InteractiveFirst
    from agentserve.routing.scheduling.key_shares import KeyShares
    from agentserve.routing.scheduling.session_las import SessionLas

    las = SessionLas(half_life_s=30.0, max_sessions=100, aging_tokens_per_s=500.0)
    terms = {"static": (InteractiveFirst(),), "dynamic": (InteractiveFirst(), las),
             "keys": (KeyShares({}, default_weight=1.0, half_life_s=30.0, max_keys=10), las)}[terms_kind]
    max_wait, max_dt = 5.0, 1.5
    clock = Clock()
    q = _queue(clock, terms, rank_after, max_waiting=max_waiting, max_wait_s=max_wait, shed_lowest=shed_lowest)
    waiting: dict[str, Waiting] = {}  # the reference's view: offered, not yet out
    picky: set[str] = set()  # deferred once (Deferred: try the next), admitted on a later pump
    tokens: dict[str, int] = {}
    outcome: dict[str, tuple[str, float]] = {}
    arrived: dict[str, float] = {}
    seq = itertools.count()

    def out(rid: str, how: str) -> None:
        assert rid not in outcome, f"{rid} left the queue twice"
        outcome[rid] = (how, clock.t)
        waiting.pop(rid, None)

    def rank(w: Waiting, now: float) -> tuple:
        fcfs = w.arrival - w.jump
        if rank_after > 0 and now - fcfs < rank_after:
            return (1, fcfs, w.seq)
        return (0, *(t.value(w, now) for t in terms), fcfs, w.seq)

    def pump(room: int) -> None:
        left = [room]
        passed: set[str] = set()
        deferred = [0]

        def admit(item: RouteRequest):
            rid = item.request_id
            now = clock.t
            best = min((w for r, w in waiting.items() if r not in passed), key=lambda w: rank(w, now))
            assert best.req.request_id == rid, "admitted out of order"
            if rid in picky:
                picky.discard(rid)
                passed.add(rid)
                deferred[0] += 1
                return DEFER
            if left[0] == 0:
                return None
            left[0] -= 1
            for t in terms:
                t.charge(item, tokens[rid], now)
            out(rid, "admitted")
            return rid

        q.pump(admit)
        if left[0] and deferred[0] < 32:  # room left: everyone not deferred was admitted
            assert set(waiting) <= passed

    def offer(rq: RouteRequest, jump: float) -> None:
        rid = rq.request_id
        arrived[rid] = clock.t
        w = Waiting(rq, clock.t, jump, next(seq))
        def resolved(result, rid=rid):
            assert result == rid and outcome[rid][0] == "admitted"  # its own placement, given in `admit`

        try:
            q.offer(rq, jump, resolved, lambda e, rid=rid: out(rid, "retry"))
        except RequestError as e:
            assert e.retry_after
            out(rid, "retry")
            return
        waiting[rid] = w

    for i, (dt, arrival, room) in enumerate(steps):
        clock.t += dt
        q.expire()
        if arrival is not None:
            session, kind, size, jump, is_picky = arrival
            rq = req(i, f"s{session}", kind=kind, tenant=f"{session % 2}" * 64, tokens=size)
            tokens[rq.request_id] = size
            if is_picky:
                picky.add(rq.request_id)
            offer(rq, jump)
        if room:
            pump(room)
        assert len(q) == len(waiting)
        for rid in waiting:
            assert clock.t - arrived[rid] < max_wait + max_dt  # none left waiting past max_wait_s
    for _ in range(6):  # time runs on with no room: the rest are told to retry within max_wait_s
        clock.t += 1.0
        q.expire()
    assert set(outcome) == set(arrived) and not waiting and len(q) == 0
    for rid, (_, at) in outcome.items():
        assert at - arrived[rid] <= max_wait + max_dt

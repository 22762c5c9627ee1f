"""Warm start (serve/warm_start.py): which sessions a new engine replica prefills, that it prefills exactly what the
sessions' next turns extend, in their own cache partitions, and that its bounds hold."""

from __future__ import annotations

import asyncio
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.config import EngineSpec, WarmStartSpec
from agentserve.engines.scripted import ScriptedEngine
from agentserve.protocol import EngineRequest, SamplingParams
from agentserve.serve.warm_start import WarmPrompt, choose, prefill, prompts_of, warm_start
from agentserve.state.backend import StoreBounds
from agentserve.state.kept_turns import KeptTurnStore, SessionHead
from agentserve.state.sqlite import SQLiteBackend

BLOCK = 4


def store() -> KeptTurnStore:
    return KeptTurnStore(SQLiteBackend(":memory:"), StoreBounds(1000, 1 << 24, 3600.0))


def engine(capacity_blocks: int = 4096, prefill_ms_per_token: float = 0.0) -> ScriptedEngine:
    spec = EngineSpec.model_validate({
        "kind": "scripted", "block_size": BLOCK, "rules": [{"reply": "ok"}],
        "cache": {"capacity_blocks": capacity_blocks, "prefill_ms_per_token": prefill_ms_per_token},
    })
    return ScriptedEngine(spec.rules, lambda t: [ord(c) for c in t], 0, BLOCK, spec.cache)


def cached_tokens(e: ScriptedEngine, ids, salt=None) -> int:
    """What a request with this prompt would find cached (it runs one: the probe itself is then cached too)."""
    req = EngineRequest(request_id="probe", model="m", token_ids=ids, sampling=SamplingParams(), max_tokens=1,
                        cache_salt=salt)  # fmt: skip

    async def go():
        return [d async for d in e.generate(req)][0].num_cached_tokens

    return asyncio.run(go())


def session(s: KeptTurnStore, name: str, turns: int, salt: str | None = None) -> array:
    """A session of `turns` kept turns, chained as the ingress writes them; its head; the prompt its next turn
    extends (the last prompt and output)."""
    prompt: list[int] = [hash((name, i)) % 1000 + 1 for i in range(12)]
    base, key = "", ""
    for t in range(turns):
        output = [2000 + t, 2001 + t, 0]
        key = f"{name}-{t}"
        s.put(key, list(prompt), output, base=base, tail_from=0 if not base else len(prompt) - 5).result(5)
        base = key
        prompt = prompt + output + [3000 + t] * 5  # the next turn: this one replayed, then a new message
    s.put_head(name, "m", SessionHead(key, salt, None, len(prompt) - 5))
    flush(s)
    return array("I", prompt[:-5])


def flush(s: KeptTurnStore) -> None:
    """Wait until what was queued before is committed (the writer keeps queue order)."""
    s.put("flush", [1], [2]).result(5)


@given(
    st.lists(st.tuples(st.integers(1, 500), st.sampled_from([None, "lora-a", "lora-b"])), max_size=30),
    st.one_of(st.none(), st.integers(0, 3000)),
    st.integers(1, 600),
)
@settings(max_examples=200, deadline=None)
def test_the_chosen_heads_fit_every_bound_and_keep_recency_order(sizes, budget, window):
    heads = [SessionHead(f"t{i}", None, adapter, n) for i, (n, adapter) in enumerate(sizes)]
    chosen = choose(heads, token_budget=budget, context_window=window, adapters={"lora-a"})
    assert [heads.index(h) for h in chosen] == sorted(heads.index(h) for h in chosen)  # the most recent first
    assert budget is None or sum(h.tokens for h in chosen) <= budget
    assert all(h.tokens < window and h.adapter in (None, "lora-a") for h in chosen)
    # greedy: a head left out (that this replica could serve) did not fit what was left of the budget
    for h in heads:
        if h not in chosen and h.tokens < window and h.adapter in (None, "lora-a"):
            assert budget is not None
            before = sum(c.tokens for c in chosen if heads.index(c) < heads.index(h))
            assert before + h.tokens > budget


def test_a_head_rebuilds_to_the_prefix_its_next_turn_extends():
    s = store()
    expected = session(s, "a", turns=4)
    (head,) = s.heads("m", 10)
    (prompt,) = prompts_of(s, [head])
    assert prompt.token_ids == expected
    s.close()


def test_a_head_whose_chain_lost_a_turn_is_left_out():
    s = store()
    kept_b = session(s, "b", turns=3)
    s.put("a-1", list(range(1, 20)), [5, 0], base="a-0 (evicted)", tail_from=10).result(5)
    s.put_head("a", "m", SessionHead("a-1", None, None, 21))
    flush(s)
    heads = s.heads("m", 10)
    assert [h.turn for h in heads] == ["a-1", "b-2"]
    assert [p.token_ids for p in prompts_of(s, heads)] == [kept_b]  # no partial prompt for "a"
    s.close()


def test_heads_are_per_model_most_recent_first_and_bounded():
    s = KeptTurnStore(SQLiteBackend(":memory:"), StoreBounds(1000, 1 << 24, 3600.0), max_heads=3)
    for i in range(5):
        s.put_head(f"s{i}", "m" if i != 2 else "other", SessionHead(f"k{i}", None, None, 10 + i))
        flush(s)  # one batch each: a recency order to check
    s.put_head("s0", "m", SessionHead("k0-new", None, None, 99))  # the session's newest turn replaces its head
    flush(s)
    assert [h.turn for h in s.heads("m", 10)] == ["k0-new", "k4", "k3"]  # k1 went past max_heads
    assert [h.turn for h in s.heads("other", 10)] == []
    s.close()


def test_warm_start_prefills_each_session_in_its_own_partition_the_most_recent_first():
    s = store()
    old = session(s, "old", turns=2, salt="salt-x")
    new = session(s, "new", turns=3, salt="salt-y")
    e = engine()
    report = asyncio.run(warm_start(e, "m", WarmStartSpec(max_sessions=1), s, context_window=4096, adapters=()))
    assert (report.sessions, report.warmed, report.tokens, report.cut) == (1, 1, len(new), False)
    assert cached_tokens(e, new, "salt-y") == len(new) // BLOCK * BLOCK
    assert cached_tokens(e, new, "salt-x") == 0  # another key's partition holds nothing of it
    assert cached_tokens(e, old, "salt-x") == 0  # past max_sessions
    s.close()


def test_the_kv_share_bounds_what_is_prefilled():
    s = store()
    session(s, "a", turns=2)
    b = session(s, "b", turns=2)
    e = engine(capacity_blocks=(len(b) // BLOCK + 1) * 2)  # room for both; a share of 0.5 holds one
    report = asyncio.run(warm_start(e, "m", WarmStartSpec(max_kv_share=0.5), s, context_window=4096, adapters=()))
    assert (report.sessions, report.warmed) == (1, 1)
    s.close()


def test_the_time_bound_cuts_the_prompt_running_and_keeps_the_rest_for_traffic():
    e = engine(prefill_ms_per_token=50.0)  # 40 tokens: 2 s each
    prompts = [WarmPrompt(array("I", range(i * 100, i * 100 + 40)), None, None) for i in range(3)]
    report = asyncio.run(prefill(e, "m", prompts, max_seconds=0.5))
    assert (report.warmed, report.cut) == (0, True)
    assert report.seconds < 1.5
    assert e.stats().active == 0 and e.stats().aborted == 1  # the cut prompt was aborted, not left running


def test_an_unreadable_state_backend_means_a_cold_start_not_a_failure():
    class Down(SQLiteBackend):
        def session_heads(self, *a, **k):
            raise OSError("database is down")

    s = KeptTurnStore(Down(":memory:"), StoreBounds(10, 1 << 20, 60.0))
    report = asyncio.run(warm_start(engine(), "m", WarmStartSpec(), s, context_window=4096, adapters=()))
    assert (report.sessions, report.warmed) == (0, 0)
    s.close()

"""The doctor's session memory stays within its byte budget whatever the traffic."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from agentserve.doctor.sessions import ENTRY_OVERHEAD_BYTES, SessionMemory

turns = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 3000), st.integers(0, 500)),  # session, prompt, output sizes
    max_size=120,
)


def cost(key: str, tokens: int) -> int:
    return 4 * tokens + 32 + ENTRY_OVERHEAD_BYTES  # sessions are held under a 16-byte keyed digest, in hex


@settings(max_examples=150, deadline=None)
@given(max_bytes=st.integers(0, 60_000), traffic=turns)
def test_bytes_bound_holds_and_the_latest_turn_is_remembered(max_bytes, traffic):
    memory = SessionMemory(max_bytes)
    for session, p, o in traffic:
        key = f"key-{session}"
        prompt, output = list(range(p)), list(range(o))
        memory.put(key, prompt, output)
        assert memory.nbytes <= max_bytes
        last = memory.get(key)
        if cost(key, p + o) <= max_bytes:  # a turn that fits is always kept, as the most recent
            assert last is not None and last.tokens.tolist() == prompt + output and last.prompt_len == p
        else:
            assert last is None  # too large for the whole budget: neither it nor its predecessor is kept


def test_many_long_sessions_stay_within_budget_least_recent_out():
    budget = 64 * 1024 * 1024
    memory = SessionMemory(budget)
    prompt = list(range(100_000))
    for s in range(400):  # 400 sessions at 100K tokens would be 160 MB
        memory.put(f"s{s}", prompt, [1, 2, 3])
        memory.get("s0")  # one session stays in use
    assert memory.nbytes <= budget
    assert len(memory) == budget // cost("s100", 100_003)
    assert memory.get("s0") is not None and memory.get("s399") is not None and memory.get("s1") is None


def test_tokens_are_stored_at_four_bytes_each():
    memory = SessionMemory(10**9)
    memory.put("s", list(range(100_000)), list(range(1000)))
    assert memory.get("s").nbytes == 4 * 101_000

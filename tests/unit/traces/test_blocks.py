"""Salted chained block hashes (traces/blocks.py): what a replay reads from them, and what nobody can."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.traces.blocks import MASK_63, BlockHasher, trace_salt

ids = st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=200)
sizes = st.sampled_from([1, 2, 4, 16])
HASHER = BlockHasher(trace_salt("secret-key-one-abcdefghijklmnop"))


@settings(max_examples=200, deadline=None)
@given(prompt=ids, output=ids, extra=ids, block_size=sizes)
def test_a_turns_output_blocks_are_the_next_turns_input_blocks(prompt, output, extra, block_size):
    """The next prompt extends prompt + output token for token: its input blocks start with this turn's input
    blocks and then its output blocks, every full block of prompt + output."""
    inp, out = HASHER.request_blocks(prompt, output, block_size, model="m")
    assert len(inp) == len(prompt) // block_size
    assert len(inp) + len(out) == (len(prompt) + len(output)) // block_size
    nxt, _ = HASHER.request_blocks(prompt + output + extra, [], block_size, model="m")
    assert nxt[: len(inp) + len(out)] == inp + out
    assert all(0 <= h <= MASK_63 for h in inp + out)


@settings(max_examples=100, deadline=None)
@given(prompt=st.lists(st.integers(0, 50_000), min_size=16, max_size=200), at=st.integers(0, 199),
       block_size=sizes)
def test_a_changed_token_changes_its_block_and_every_later_one(prompt, at, block_size):
    at %= len(prompt)
    changed = list(prompt)
    changed[at] = (changed[at] + 1) % 50_000
    a, _ = HASHER.request_blocks(prompt, [], block_size, model="m")
    b, _ = HASHER.request_blocks(changed, [], block_size, model="m")
    first = at // block_size
    assert a[:first] == b[:first]
    assert all(x != y for x, y in zip(a[first:], b[first:]))


@settings(max_examples=100, deadline=None)
@given(prompt=st.lists(st.integers(0, 2**32 - 1), min_size=4, max_size=200), output=ids, block_size=sizes)
def test_different_salts_share_no_hash(prompt, output, block_size):
    other = BlockHasher(trace_salt("secret-key-two-abcdefghijklmnop"))
    a = HASHER.request_blocks(prompt, output, block_size, model="m")
    b = other.request_blocks(prompt, output, block_size, model="m")
    assert not (set(a[0] + a[1]) & set(b[0] + b[1]))


def test_the_salt_is_the_deployments_key_so_every_replica_hashes_alike():
    prompt = list(range(64))
    one = BlockHasher(trace_salt("the-deployments-secret-key-0123456789"))
    two = BlockHasher(trace_salt("the-deployments-secret-key-0123456789"))  # another Ingress replica
    assert one.request_blocks(prompt, [], 16, model="m") == two.request_blocks(prompt, [], 16, model="m")
    assert trace_salt("a-key") != trace_salt("b-key")


def test_model_adapter_and_cache_partition_start_separate_chains():
    prompt = list(range(32))
    base = HASHER.request_blocks(prompt, [], 16, model="m")[0]
    for other in (
        HASHER.request_blocks(prompt, [], 16, model="m2")[0],
        HASHER.request_blocks(prompt, [], 16, model="m", adapter="pirate")[0],
        HASHER.request_blocks(prompt, [], 16, model="m", cache_salt="key-a")[0],
    ):
        assert not set(base) & set(other)

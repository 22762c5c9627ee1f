from hypothesis import given, strategies as st

from agentserve.kv_events.block_hash import block_hashes, cache_salt

tokens = st.lists(st.integers(0, 50_000), max_size=200)
adapters = st.one_of(st.none(), st.text(min_size=1, max_size=20))


@given(tokens, tokens, adapters, st.sampled_from([1, 4, 16]))
def test_hashes_agree_exactly_on_shared_full_blocks(a, b, adapter, bs):
    """Under one adapter (None: the base model), two prompts share exactly their common full blocks' hashes."""
    ha, hb = block_hashes(a, bs, adapter), block_hashes(b, bs, adapter)
    assert len(ha) == len(a) // bs
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    shared = common // bs
    assert ha[:shared] == hb[:shared]
    if shared < min(len(ha), len(hb)):
        assert ha[shared] != hb[shared]


def test_hashes_fit_int64():
    assert all(0 <= h < 2**63 for h in block_hashes(list(range(1000)), 16))



@given(st.lists(st.integers(0, 50_000), min_size=1, max_size=200), adapters, adapters, st.sampled_from([1, 4, 16]))
def test_blocks_under_different_adapters_never_share_a_hash(a, x, y, bs):
    """A prefix cached under one LoRA adapter (or the base model, None) is never a hit for another."""
    hx, hy = block_hashes(a, bs, x), block_hashes(a, bs, y)
    if x == y:
        assert hx == hy  # the same adapter: stable
    else:
        assert not set(hx) & set(hy)


def test_the_base_model_keeps_its_hashes():
    """No adapter: the same chain as before adapters existed (the router and engines agree across versions)."""
    assert block_hashes(list(range(64)), 16, None) == block_hashes(list(range(64)), 16)


salts = st.one_of(st.none(), st.text(min_size=1, max_size=40))


@given(st.lists(st.integers(0, 50_000), min_size=1, max_size=200), adapters, salts, salts, st.sampled_from([1, 4, 16]))
def test_blocks_under_different_cache_salts_never_share_a_hash(a, adapter, x, y, bs):
    """Two callers' partitions (a salt each, None: the shared cache) never share a block, whatever the prompt;
    one partition's prompts share their common prefix as before."""
    hx, hy = block_hashes(a, bs, adapter, x), block_hashes(a, bs, adapter, y)
    if x == y:
        assert hx == hy
    else:
        assert not set(hx) & set(hy)


def test_no_salt_keeps_the_shared_chain():
    assert block_hashes(list(range(64)), 16, None, None) == block_hashes(list(range(64)), 16)


def test_a_callers_salt_is_stable_and_fits_vllm():
    """Derived from the caller's identity (the same on every replica), never equal to it, and a salt vLLM accepts:
    at most 128 characters, none of '@', '/', '\\', NUL."""
    s = cache_salt("ab" * 32)
    assert s == cache_salt("ab" * 32) and s != cache_salt("cd" * 32) and "ab" * 32 not in s
    assert len(s) <= 128 and not set(s) & set("@/\\\x00")

from hypothesis import given, strategies as st

from agentserve.preprocess.block_hash import block_hashes

tokens = st.lists(st.integers(0, 50_000), max_size=200)


@given(tokens, tokens, st.sampled_from([1, 4, 16]))
def test_hashes_agree_exactly_on_shared_full_blocks(a, b, bs):
    ha, hb = block_hashes(a, bs), block_hashes(b, bs)
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

"""Prefix index: bitmask matching, KV-event re-keying, approximate mode, wire format."""

from __future__ import annotations

from collections import Counter

import msgspec
from hypothesis import given, settings, strategies as st

from agentserve.kv_events.block_hash import block_hashes
from agentserve.routing.approx import ApproxIndex
from agentserve.routing.index import EventIndex, PrefixIndex
from agentserve.kv_events.format import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    decode_batch,
    encode_batch,
)

BS = 4


def stored(hashes, parent, tokens, **kw) -> BlockStored:
    return BlockStored(
        block_hashes=hashes, parent_block_hash=parent, token_ids=tokens, block_size=BS,
        **{"lora_id": None, "medium": "GPU", "lora_name": None, **kw},
    )


def test_overlaps_are_leading_blocks_per_replica():
    idx = PrefixIndex()
    for r in "abc":
        idx.add_replica(r)
    idx.add("a", [1, 2, 3])
    idx.add("b", [1, 2])
    idx.add("c", [2, 3])  # holds later blocks but not the first: unusable
    assert idx.overlaps([1, 2, 3, 4]) == {"a": 3, "b": 2}
    idx.remove("a", [2])
    assert idx.overlaps([1, 2, 3]) == {"a": 1, "b": 2}
    idx.remove_replica("b")
    assert idx.overlaps([1, 2, 3]) == {"a": 1}
    idx.add_replica("d")  # reuses b's slot: must start empty
    assert idx.overlaps([1, 2]) == {"a": 1}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.lists(st.integers(0, 9), max_size=8)), max_size=30),
       st.lists(st.integers(0, 9), max_size=10))
def test_overlaps_match_a_naive_model(ops, query):
    idx, model = PrefixIndex(), {}
    for r in range(6):
        idx.add_replica(str(r))
        model[str(r)] = Counter()  # the index reference-counts blocks
    for r, hashes in ops:
        if hashes and hashes[0] % 3 == 0:
            idx.remove(str(r), hashes)
            for h in hashes:
                if model[str(r)][h]:
                    model[str(r)][h] -= 1
        else:
            idx.add(str(r), hashes)
            model[str(r)].update(hashes)
    expect = {}
    for r, held in model.items():
        n = 0
        while n < len(query) and held[query[n]] > 0:
            n += 1
        if n:
            expect[r] = n
    assert idx.overlaps(query) == expect


def test_events_rekey_engine_hashes_to_preprocessor_hashes():
    tokens = list(range(100, 116))  # 4 blocks
    ours = block_hashes(tokens, BS)
    ev = EventIndex(BS)
    ev.add_replica("a")
    # The engine stores its blocks in two events with its own (opaque) hashes, chained by parent.
    s1 = ev.apply("a", [stored([b"e0", b"e1"], None, tokens[:8])])
    s2 = ev.apply("a", [stored([b"e2", b"e3"], b"e1", tokens[8:16])])
    assert (s1.stored, s2.stored) == (2, 2)
    assert ev.index.overlaps(ours) == {"a": 4}
    ev.apply("a", [BlockRemoved(block_hashes=[b"e2"], medium="GPU")])
    assert ev.index.overlaps(ours) == {"a": 2}
    # vLLM re-reports cache hits as stores: counted once, and one removal still removes it.
    ev.apply("a", [stored([b"e0"], None, tokens[:4])])
    ev.apply("a", [BlockRemoved(block_hashes=[b"e0"], medium="GPU")])
    assert ev.index.overlaps(ours) == {}
    ev.apply("a", [AllBlocksCleared()])
    assert ev.index.size("a") == 0


def test_unkeyable_blocks_are_skipped_not_guessed():
    tokens = list(range(8))
    ev = EventIndex(BS)
    ev.add_replica("a")
    assert ev.apply("a", [stored([b"x"], b"never-seen", tokens[:4])]).skipped == 1
    assert ev.apply("a", [stored([b"y"], None, tokens[:4], extra_keys=[[["mm-hash", 0]]])]).skipped == 1  # an image
    assert ev.apply("a", [stored([b"z"], None, tokens[:3])]).skipped == 1  # partial block
    assert ev.apply("a", [stored([b"w"], None, tokens[:4], group_idx=1)]).skipped == 1
    # A salt is a first block's key only: on a later block it is something the preprocessor does not hash by.
    assert ev.apply("a", [stored([b"u1", b"u2"], None, tokens, extra_keys=[None, ["salt"]])]).skipped == 2
    assert ev.index.size("a") == 0


def test_salted_blocks_are_keyed_under_their_salt():
    """vLLM keys a salted prompt's first block by its `cache_salt` and publishes the salt as that block's extra key
    (after the LoRA name): the router finds the blocks for that salt only, as the engine's cache does."""
    tokens = list(range(12))
    ev = EventIndex(BS)
    ev.add_replica("a")
    ev.add_replica("b")
    head = stored([b"s1", b"s2"], None, tokens[:8], extra_keys=[["k1"], None])
    tail = stored([b"s3"], b"s2", tokens[8:])  # a later run of the same sequence: no salt, chained to its parent
    assert ev.apply("a", [head, tail]).stored == 3
    lora = stored([b"p1"], None, tokens[:4], lora_id=1, lora_name="p", extra_keys=[["p", "k1"]])
    assert ev.apply("b", [lora]).stored == 1
    assert ev.index.overlaps(block_hashes(tokens, BS, salt="k1")) == {"a": 3}
    assert ev.index.overlaps(block_hashes(tokens, BS, "p", "k1")) == {"b": 1}
    assert ev.index.overlaps(block_hashes(tokens, BS)) == {}
    assert ev.index.overlaps(block_hashes(tokens, BS, salt="k2")) == {}


def test_lora_blocks_are_keyed_under_their_adapter():
    """vLLM publishes a LoRA request's blocks with its name as lora_name and as each block's extra key."""
    tokens = list(range(8))
    ev = EventIndex(BS)
    ev.add_replica("a")
    run = stored([b"p1", b"p2"], None, tokens, lora_id=1, lora_name="pirate", extra_keys=[["pirate"], ["pirate"]])
    assert ev.apply("a", [run]).stored == 2
    assert ev.index.overlaps(block_hashes(tokens, BS, "pirate")) == {"a": 2}
    assert ev.index.overlaps(block_hashes(tokens, BS)) == {}
    assert ev.index.overlaps(block_hashes(tokens, BS, "poet")) == {}


def test_approx_index_ttl_and_cap():
    now = [0.0]
    ap = ApproxIndex(ttl_s=10, max_blocks=10, clock=lambda: now[0])
    ap.add_replica("a")
    ap.learn("a", [1, 2, 3])
    assert ap.overlaps([1, 2, 3]) == {"a": 3}
    now[0] = 11
    assert ap.overlaps([1, 2, 3]) == {}
    ap.learn("a", list(range(100, 112)))  # over the cap: pruned to 80%, the tail first
    assert ap.index.size("a") == 8
    assert ap.overlaps(list(range(100, 112))) == {"a": 8}


# msgspec.msgpack.encode of vLLM 0.32's KVEventBatch(ts=1.0, events=[BlockStored(block_hashes=[b"h"],
# parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=4, lora_id=None, medium="GPU", lora_name=None),
# BlockRemoved(block_hashes=[7], medium=None), AllBlocksCleared()], data_parallel_rank=0): pinned so the unit
# test needs no vLLM import (slow); re-generate it from vllm.distributed.kv_events when vLLM is upgraded.
VLLM_WIRE = bytes.fromhex(
    "93cb3ff00000000000009388a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391c40168b170617265"
    "6e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f73697a6504a76c6f72615f6964c0"
    "a66d656469756da3475055a96c6f72615f6e616d65c083a474797065ac426c6f636b52656d6f766564ac626c6f636b5f6861"
    "736865739107a66d656469756dc081a474797065b0416c6c426c6f636b73436c656172656400"
)


def test_wire_format_is_byte_identical_to_vllm():
    batch = EventBatch(ts=1.0, events=[stored([b"h"], None, [1, 2, 3, 4]), BlockRemoved(block_hashes=[7], medium=None),
                                       AllBlocksCleared()], data_parallel_rank=0)
    assert encode_batch(batch) == VLLM_WIRE
    assert decode_batch(VLLM_WIRE) == batch

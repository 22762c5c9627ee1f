"""The scripted engine's prefix cache behaves as vLLM's: prompt and generated full blocks are cached."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from agentserve.engines.scripted_cache import PrefixCache
from agentserve.kv_events.format import BlockStored, KvEvent
from agentserve.kv_events.block_hash import block_hashes
from agentserve.routing.index import EventIndex


def run_turn(cache: PrefixCache, prompt: list[int], output: list[int], steps: int | None = None) -> int:
    """Prefill, then `steps` decode steps (all of them by default), as the scripted engine drives it."""
    kv = cache.admit(prompt, block_hashes(prompt, cache.block_size), output)
    kv.compute(len(prompt))
    for i in range(1, len(output) if steps is None else steps):
        kv.compute(len(prompt) + i)
    kv.free()
    return kv.cached_tokens


tokens = st.lists(st.integers(1, 50), min_size=0, max_size=60)


@settings(max_examples=200, deadline=None)
@given(bs=st.integers(1, 8), prompt=tokens.filter(bool), output=tokens, new=tokens.filter(bool))
def test_next_turn_hits_every_full_block_of_prompt_and_output(bs, prompt, output, new):
    events: list[KvEvent] = []
    cache = PrefixCache(10_000, bs, events.extend)
    first = run_turn(cache, prompt, output)
    assert first == 0
    turn2 = prompt + output + new
    # vLLM computes KV for every token but the last one sampled; only full blocks are cached.
    computed = len(prompt) + max(len(output) - 1, 0)
    expect = min(computed // bs, (len(turn2) - 1) // bs) * bs
    kv = cache.admit(turn2, block_hashes(turn2, bs), [])
    assert kv.cached_tokens == expect
    assert kv.cached_tokens <= len(turn2) - 1 and kv.cached_tokens % bs == 0  # never the whole prompt

    # The router's index, fed the published events, sees the same blocks (output blocks included).
    index = EventIndex(bs)
    index.add_replica("r")
    index.apply("r", events)
    assert index.index.overlaps(block_hashes(turn2, bs)).get("r", 0) == computed // bs
    stored = [t for e in events if isinstance(e, BlockStored) for t in e.token_ids]
    assert stored == (prompt + output)[: computed // bs * bs]


@settings(max_examples=100, deadline=None)
@given(bs=st.integers(1, 8), prompt=tokens.filter(bool), output=tokens.filter(lambda o: len(o) > 1), data=st.data())
def test_an_aborted_request_keeps_the_blocks_it_computed(bs, prompt, output, data):
    steps = data.draw(st.integers(1, len(output) - 1))  # the client left after `steps` tokens
    cache = PrefixCache(10_000, bs)
    run_turn(cache, prompt, output, steps=steps)
    computed = len(prompt) + steps - 1
    turn2 = prompt + output
    hit = cache.admit(turn2, block_hashes(turn2, bs), []).cached_tokens
    assert hit == min(computed // bs, (len(turn2) - 1) // bs) * bs


def test_eviction_takes_a_finished_sequence_tail_first():
    events: list[KvEvent] = []
    cache = PrefixCache(4, 2, events.extend)
    a = [1, 2, 3, 4]
    run_turn(cache, a, [5, 6, 7])  # computes 1..6: three blocks
    run_turn(cache, [9, 9, 9], [])  # one more block: the cache is full
    run_turn(cache, [8, 8, 8], [])  # evicts the oldest: the tail of a's sequence, not its head
    removed = [h for e in events if not isinstance(e, BlockStored) for h in e.block_hashes]
    assert removed == [block_hashes(a + [5, 6], 2)[-1]]
    assert cache.admit(a + [5, 6, 0], block_hashes(a + [5, 6, 0], 2), []).cached_tokens == 4


@settings(max_examples=100, deadline=None)
@given(
    bs=st.integers(1, 8),
    prompt=tokens.filter(lambda p: len(p) > 8),
    output=tokens,
    first=st.sampled_from([None, "pirate", "poet"]),
    second=st.sampled_from([None, "pirate", "poet"]),
)
def test_blocks_cached_under_one_adapter_are_hits_for_that_adapter_only(bs, prompt, output, first, second):
    """The cache and the router's index (fed the engine's KV events, which name the LoRA as vLLM's do) count a
    prefix cached under adapter `first` as a hit under `first` alone."""
    events: list[KvEvent] = []
    cache = PrefixCache(10_000, bs, events.extend)
    lora = {None: None, "pirate": ("pirate", 1), "poet": ("poet", 2)}
    kv = cache.admit(prompt, block_hashes(prompt, bs, first), output, lora[first])
    kv.compute(len(prompt))
    for i in range(1, len(output)):
        kv.compute(len(prompt) + i)
    kv.free()
    stored = [e for e in events if isinstance(e, BlockStored)]
    assert stored and all(e.lora_name == first for e in stored)

    again = prompt + output
    hit = cache.admit(again, block_hashes(again, bs, second), [], lora[second]).cached_tokens
    index = EventIndex(bs)
    index.add_replica("r")
    index.apply("r", events)
    seen = index.index.overlaps(block_hashes(again, bs, second)).get("r", 0)
    if first == second:
        assert hit > 0 and seen == (len(prompt) + max(len(output) - 1, 0)) // bs
    else:
        assert hit == 0 and seen == 0

import asyncio

from agentserve.config import EngineSpec
from agentserve.engines.scripted import ScriptedEngine
from agentserve.preprocess.block_hash import block_hashes
from agentserve.protocol import PreprocessedRequest, SamplingParams


def _engine(**cache):
    spec = EngineSpec.model_validate(
        {"kind": "scripted", "block_size": 4, "rules": [{"match": "x", "reply": "abc"}, {"reply": "zz"}],
         "cache": {"capacity_blocks": 3, **cache}}
    )
    # A toy tokenizer: one token per character.
    return ScriptedEngine(spec.rules, lambda t: [ord(c) for c in t], 0, 4, spec.cache)


def _req(tokens, match="x", max_tokens=100):
    return PreprocessedRequest(
        request_id="r", model="m", token_ids=tokens, block_hashes=block_hashes(tokens, 4),
        sampling=SamplingParams(), max_tokens=max_tokens, match_text=match,
    )


def _run(engine, req):
    async def go():
        return [d async for d in engine.generate(req)]
    return asyncio.run(go())


def test_replies_by_first_matching_rule_then_eos():
    e = _engine()
    out = _run(e, _req([1] * 5, match="say x"))
    assert [t for d in out for t in d.token_ids] == [ord("a"), ord("b"), ord("c"), 0]
    assert out[-1].finish_reason == "stop" and out[0].prompt_tokens == 5
    assert [t for d in _run(e, _req([2] * 5, match="other")) for t in d.token_ids] == [ord("z"), ord("z"), 0]


def test_max_tokens_is_length():
    out = _run(_engine(), _req([1] * 5, max_tokens=2))
    assert len(out) == 2 and out[-1].finish_reason == "length"


def test_prefix_cache_counts_whole_blocks_and_evicts_lru():
    e = _engine()
    a = list(range(1, 10))  # 9 tokens: 2 full blocks
    assert _run(e, _req(a))[0].num_cached_tokens == 0
    assert _run(e, _req(a))[0].num_cached_tokens == 8
    assert _run(e, _req(a + [99, 98, 97]))[0].num_cached_tokens == 8
    # Fully cached prompt of exactly 2 blocks: the last token is always recomputed, like vLLM.
    assert _run(e, _req(a[:8]))[0].num_cached_tokens == 4
    for i in range(3):
        _run(e, _req([100 + i] * 8))  # push `a` out (capacity 3 blocks)
    assert _run(e, _req(a))[0].num_cached_tokens == 0


def test_closing_early_counts_as_abort():
    e = _engine()

    async def go():
        gen = e.generate(_req([1] * 5))
        await gen.__anext__()
        await gen.aclose()

    asyncio.run(go())
    s = e.stats()
    assert s.aborted == 1 and s.active == 0

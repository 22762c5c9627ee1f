import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.config import EngineSpec, LoraAdapterSpec
from agentserve.engines.scripted import ScriptedEngine
from agentserve.kv_events.block_hash import block_hashes
from agentserve.protocol import EngineRequest, SamplingParams


def _engine(**cache):
    spec = EngineSpec.model_validate(
        {"kind": "scripted", "block_size": 4, "rules": [{"match": "x", "reply": "abc"}, {"reply": "zz"}],
         "cache": {"capacity_blocks": 3, **cache}}
    )
    # A toy tokenizer: one token per character.
    return ScriptedEngine(spec.rules, lambda t: [ord(c) for c in t], 0, 4, spec.cache)


def _req(tokens, match="x", max_tokens=100):
    return EngineRequest(
        request_id="r", model="m", token_ids=tokens, sampling=SamplingParams(), max_tokens=max_tokens, match_text=match,
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


AGENT_REPLY = (
    "<think>\nThe user wants the bug fixed; I should read the file before changing anything.\n</think>\n\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
)


def test_agent_loop_turn_two_is_served_from_turn_one_prompt_and_output(model_path):
    """Turn 2 = turn 1's prompt + its output + a tool result: vLLM caches the generated blocks too, so the
    hit covers every full block of what turn 1 computed (prompt + output but the last sampled token), and
    the router's index learns those blocks from the KV events."""
    from agentserve.config import ModelSpec
    from agentserve.kv_events.publisher import KvEventPublisher
    from agentserve.preprocess.preprocessor import Preprocessor
    from agentserve.protocol import (
        Conversation, GenerationRequest, ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, ToolSpec, Turn,
    )
    from agentserve.routing.index import EventIndex
    from agentserve.routing.kv_subscriber import Events, KvEventSubscriber

    bs = 16
    pre = Preprocessor(ModelSpec(replay_family="agentserve_default"), str(model_path), bs)
    tok = pre._tok
    spec = EngineSpec.model_validate({"kind": "scripted", "block_size": bs, "rules": [{"reply": AGENT_REPLY}]})
    publisher = KvEventPublisher(host="127.0.0.1")
    engine = ScriptedEngine(
        spec.rules, lambda t: tok.encode(t, add_special_tokens=False), tok.eos_token_id, bs, spec.cache, publisher
    )
    tools = (ToolSpec(name="read_file", parameters={"type": "object", "properties": {"path": {"type": "string"}}}),)
    system = Turn(role="system", blocks=(TextBlock(text="You are a coding agent."),))
    user = Turn(role="user", blocks=(TextBlock(text="Fix the bug in a.py"),))

    def turn(turns, rid):
        conv = Conversation(turns=(system, *turns), tools=tools)
        req = pre.preprocess(GenerationRequest(request_id=rid, model="m", conversation=conv))
        return req, _run(engine, req.engine)

    sub = KvEventSubscriber()
    index = EventIndex(bs)
    index.add_replica("e")
    sub.add("e", f"tcp://127.0.0.1:{publisher.port}", f"tcp://127.0.0.1:{publisher.replay_port}")
    time.sleep(0.5)  # let SUB connect (a batch lost before that is replayed on the next one)
    try:
        first, out = turn([user], "t1")
        output = [t for d in out for t in d.token_ids]
        assistant = Turn(role="assistant", blocks=(
            ReasoningBlock(text="The user wants the bug fixed; I should read the file before changing anything."),
            ToolCallBlock(id="c1", name="read_file", arguments='{"path": "a.py"}'),
        ))
        result = Turn(role="tool", blocks=(ToolResultBlock(tool_call_id="c1", content="print('hi')"),))
        second_conv = Conversation(turns=(system, user, assistant, result), tools=tools)
        second_ids = pre.render(second_conv).token_ids
        history = [*first.engine.token_ids, *output]
        assert second_ids[: len(history)].tolist() == history  # the template replays turn 1 exactly (doctor: 1.000)

        computed = len(history) - 1  # the last sampled token (EOS) is never fed back
        assert computed // bs > len(first.engine.token_ids) // bs  # the reply fills blocks of its own

        # The router's index, fed over ZMQ, holds those blocks.
        hashes = block_hashes(second_ids, bs)
        deadline = time.time() + 10
        while index.index.overlaps(hashes).get("e", 0) < computed // bs and time.time() < deadline:
            for update in sub.drain():
                assert isinstance(update, Events)
                index.apply("e", update.events)
            time.sleep(0.02)
        assert index.index.overlaps(hashes) == {"e": computed // bs}

        second, out2 = turn([user, assistant, result], "t2")
        assert second.engine.token_ids == second_ids
        assert out2[0].num_cached_tokens == computed // bs * bs
    finally:
        sub.close()
        asyncio.run(engine.shutdown())


def _lora_req(tokens, adapter):
    return EngineRequest(
        request_id="r", model="m", token_ids=tokens, sampling=SamplingParams(), max_tokens=100, match_text="x",
        adapter=adapter,
    )


def test_cached_prefixes_are_per_adapter():
    spec = EngineSpec.model_validate({"kind": "scripted", "block_size": 4, "rules": [{"reply": "ok"}]})
    e = ScriptedEngine(spec.rules, lambda t: [ord(c) for c in t], 0, 4, spec.cache,
                       adapters=(LoraAdapterSpec(id="pirate", path="/p"), LoraAdapterSpec(id="poet", path="/q")))
    a = list(range(1, 10))
    assert _run(e, _lora_req(a, "pirate"))[0].num_cached_tokens == 0
    assert _run(e, _lora_req(a, "pirate"))[0].num_cached_tokens == 8
    assert _run(e, _lora_req(a, "poet"))[0].num_cached_tokens == 0
    assert _run(e, _lora_req(a, None))[0].num_cached_tokens == 0
    assert _run(e, _lora_req(a, None))[0].num_cached_tokens == 8


def _salted(tokens, salt):
    return EngineRequest(
        request_id="r", model="m", token_ids=tokens, sampling=SamplingParams(), max_tokens=100, match_text="x",
        cache_salt=salt,
    )


def test_cached_prefixes_are_per_cache_salt():
    """As vLLM's `cache_salt`: a prompt cached under one salt is a miss under another or none, a hit under its own."""
    spec = EngineSpec.model_validate({"kind": "scripted", "block_size": 4, "rules": [{"reply": "ok"}]})
    e = ScriptedEngine(spec.rules, lambda t: [ord(c) for c in t], 0, 4, spec.cache)
    a = list(range(1, 10))
    assert _run(e, _salted(a, "key-a"))[0].num_cached_tokens == 0
    assert _run(e, _salted(a, "key-b"))[0].num_cached_tokens == 0
    assert _run(e, _salted(a, None))[0].num_cached_tokens == 0
    assert _run(e, _salted(a, "key-a"))[0].num_cached_tokens == 8
    assert _run(e, _salted(a, "key-b"))[0].num_cached_tokens == 8


def test_an_adapter_it_does_not_hold_is_an_error_until_loaded():
    e = _engine()
    out = _run(e, _lora_req([1] * 5, "pirate"))
    assert len(out) == 1 and out[0].finish_reason == "error" and "'pirate' is not loaded" in out[0].error
    assert e.stats().active == 0

    assert asyncio.run(e.load_adapter(LoraAdapterSpec(id="pirate", path="/p"))) is True
    assert asyncio.run(e.load_adapter(LoraAdapterSpec(id="pirate", path="/p"))) is False  # already there
    with pytest.raises(ValueError, match="already loaded from /p"):  # re-pointing an id would change its weights
        asyncio.run(e.load_adapter(LoraAdapterSpec(id="pirate", path="/other")))
    assert [a.id for a in e.adapters()] == ["pirate"]
    assert _run(e, _lora_req([1] * 5, "pirate"))[-1].finish_reason == "stop"


def test_a_rule_naming_an_adapter_answers_under_that_adapter_only():
    spec = EngineSpec.model_validate({"kind": "scripted", "block_size": 4, "rules": [
        {"reply": "arr", "adapter": "pirate"}, {"reply": "verse", "adapter": "poet"}, {"reply": "plain"}]})
    e = ScriptedEngine(spec.rules, lambda t: [ord(c) for c in t], 0, 4, spec.cache,
                       adapters=(LoraAdapterSpec(id="pirate", path="/p"), LoraAdapterSpec(id="poet", path="/q")))

    def said(adapter):
        return "".join(chr(t) for d in _run(e, _lora_req([1] * 5, adapter)) for t in d.token_ids if t)  # 0: EOS

    assert (said("pirate"), said("poet"), said(None)) == ("arr", "verse", "plain")


@settings(max_examples=60, deadline=None)
@given(
    turns=st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 50_000), max_size=70)), min_size=1, max_size=12),
    adapter=st.sampled_from([None, "a"]),
    salt=st.sampled_from([None, "s"]),
)
def test_prompt_hashes_equal_hashing_each_prompt_afresh(turns, adapter, salt):
    """The engine double's hash memo (an agent's next prompt extends its previous one) is exact: whatever the prompts,
    a fork or an unrelated one included, the hashes are the chain's from scratch."""
    from agentserve.engines.scripted_cache import PromptHashes
    from agentserve.kv_events.block_hash import block_hashes

    memo = PromptHashes(4, max_blocks=40)
    prompts: list[list[int]] = [[]]
    for base, extra in turns:
        prompt = prompts[min(base, len(prompts) - 1)] + extra  # extend one of the earlier prompts
        prompts.append(prompt)
        assert memo.hashes(prompt, adapter, salt) == block_hashes(prompt, 4, adapter, salt)

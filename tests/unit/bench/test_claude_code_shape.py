"""The long-session benchmark's Claude Code-shaped session: deterministic, valid Anthropic bodies, sized as documented,
and scripted rules whose replies the graph's parsers read back as the turns the session sends."""

from __future__ import annotations

import functools
import json

import pytest
from pydantic import TypeAdapter

from agentserve.apis import anthropic
from agentserve.apis.anthropic.schema import MessagesRequest
from agentserve.bench import claude_code_shape as shape
from agentserve.config import ModelSpec
from agentserve.preprocess.preamble import strip_anthropic_preamble
from agentserve.protocol import ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock
from tests.support.keys import signing_key

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))
CALLER = "caller"
SIGN = functools.partial(anthropic.sign_thinking, signer=SIGNER, caller=CALLER)


def test_the_same_seed_gives_the_same_bytes_and_another_seed_differs():
    a = json.dumps(shape.body(12, seed=3))
    assert a == json.dumps(shape.body(12, seed=3))
    assert a != json.dumps(shape.body(12, seed=4))


def test_a_short_session_is_the_start_of_a_long_one():
    short, long = shape.messages(5), shape.messages(40)
    assert long[: len(short) - 1] == short[:-1]  # all but the last tool result, whose marker is the same anyway
    assert long[len(short) - 1] == short[-1]


def test_the_body_is_what_the_anthropic_sdk_and_the_server_accept():
    from anthropic.types import MessageParam, TextBlockParam, ToolParam

    body = shape.body(6, sign=SIGN)
    TypeAdapter(list[MessageParam]).validate_python(body["messages"], strict=False)
    TypeAdapter(list[ToolParam]).validate_python(body["tools"])
    TypeAdapter(list[TextBlockParam]).validate_python(body["system"])
    assert [t["name"] for t in body["tools"]][:7] == ["Agent", "Bash", "Glob", "Grep", "ExitPlanMode", "EnterPlanMode",
                                                      "Read"]
    assert len(body["tools"]) == 20 and all(t["input_schema"]["$schema"].endswith("2020-12/schema") for t in body["tools"])

    gen = anthropic.decode(MessagesRequest.model_validate(body), request_id="r", model="m", signer=SIGNER,
                           caller=CALLER)
    roles = [t.role for t in gen.conversation.turns]
    assert roles[:2] == ["system", "user"] and roles[2:] == ["assistant", "user"] * 6
    for i, turn in enumerate(gen.conversation.turns[2::2], start=1):
        assert [type(b) for b in turn.blocks] == [ReasoningBlock, TextBlock, ToolCallBlock]
        assert turn.blocks[2].name == shape.step(i).tool
    result = gen.conversation.turns[-1].blocks[0]
    assert isinstance(result, ToolResultBlock) and result.content.endswith(shape.marker(6))
    assert strip_anthropic_preamble(gen.conversation)[1]  # the billing preamble is there, as Claude Code sends it


def test_an_unsigned_thinking_block_is_refused_as_from_any_client():
    with pytest.raises(Exception, match="signature"):
        anthropic.decode(MessagesRequest.model_validate(shape.body(2)), request_id="r", model="m", signer=SIGNER,
                         caller=CALLER)


def test_a_fork_changes_only_the_marker_of_that_turn():
    base, fork = shape.messages(8), shape.messages(8, variants={7: 5})
    diff = [i for i, (a, b) in enumerate(zip(base, fork)) if a != b]
    assert diff == [14]  # turn 7's tool result
    a, b = base[14]["content"][0]["content"], fork[14]["content"][0]["content"]
    assert len(a) == len(b) and a.endswith(shape.marker(7)) and b.endswith(shape.marker(7, 5))
    assert shape.rule_match(7) in b


def test_each_request_matches_exactly_the_rule_of_its_next_turn():
    from agentserve.config import EngineSpec

    rules = shape.scripted_rules(30)
    EngineSpec(kind="scripted", rules=rules)  # a valid engine config
    for turns in (0, 1, 9, 10, 29, 30):
        gen = anthropic.decode(MessagesRequest.model_validate(shape.body(turns, sign=SIGN)),
                               request_id="r", model="m", signer=SIGNER, caller=CALLER)
        last = gen.conversation.last_user_text()
        assert [r["reply"] for r in rules if r["match"] in last] == [shape.step(turns + 1).reply()]


def test_the_scripted_reply_parses_back_into_the_turn():
    from agentserve.parsers import ReasoningDelta, StreamParser, TextDelta, ToolCallEnd, ToolCallStart

    for i in (1, 2, 3, 4, 5):
        s = shape.step(i)
        parser = StreamParser("qwen3", "hermes", tools=shape.tools())
        events = parser.feed(s.reply()) + parser.finish()
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        (start,) = [e for e in events if isinstance(e, ToolCallStart)]
        (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
        assert reasoning.strip() == s.thinking and text.strip() == s.text
        assert start.name == s.tool and json.loads(end.arguments) == s.input


def test_prompt_tokens_grow_as_documented(model_path):
    from agentserve.preprocess.preprocessor import Preprocessor

    pre = Preprocessor(ModelSpec(context_window=1 << 20, replay_family="agentserve_default"), str(model_path), 128)
    counts = {}
    for turns in (0, 10, 40):
        gen = anthropic.decode(MessagesRequest.model_validate(shape.body(turns, sign=SIGN)),
                               request_id="r", model="m", signer=SIGNER, caller=CALLER)
        counts[turns] = len(pre.render(strip_anthropic_preamble(gen.conversation)[0]).token_ids)
    for turns, n in counts.items():
        assert n == pytest.approx(shape.BASE_TOKENS + shape.TURN_TOKENS * turns, rel=0.05), counts
    per_turn = (counts[40] - counts[10]) / 30
    assert per_turn == pytest.approx(shape.TURN_TOKENS, rel=0.1)
    results = [len(pre.tokenize_text(shape.step(i).result, False)) for i in range(1, 41)]
    assert sum(results) / len(results) == pytest.approx(shape.RESULT_TOKENS, rel=0.1)
    system = sum(len(pre.tokenize_text(b["text"], False)) for b in shape.system_blocks())
    assert system == pytest.approx(12_000, rel=0.1)

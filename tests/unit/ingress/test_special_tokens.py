"""Formats whose markers are special tokens: the decode path keeps them for the parsers and shows none to the client.

Each tokenizer here is the embedded SmolLM2 tokenizer with the format's markers (and its end-of-turn tokens) added
as special tokens, so a model output encodes to the special ids a real gpt-oss / Mistral / Llama 3 / Kimi / DeepSeek
model would sample; the ids go through the ingress's RequestState exactly as engine deltas do.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tokenizers import AddedToken

from agentserve.ingress.output.detokenize import Detokenizer, SpecialTokens
from agentserve.parsers import parser_markers
from agentserve.ingress.output.request_state import RequestState
from agentserve.protocol import EngineDelta
from agentserve.protocol.events import (
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
    Usage,
)
from tests.unit.parsers.helpers import check_protocol

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
PARIS = {"city": "Paris"}


@dataclass(frozen=True)
class Case:
    name: str
    reasoning: str | None
    tool_calls: str
    extra_special: tuple[str, ...]  # the format's other special tokens (end of turn, ...): never shown, never kept
    output: str  # what the model writes, markers included
    reasoning_text: str
    text: str
    calls: list[tuple[str, dict]] = field(default_factory=list)
    call_ids: tuple[str, ...] = ()  # formats that write the call id themselves (Kimi)


CASES = [
    Case(
        "harmony-call", "gpt_oss", "harmony", (),
        "<|channel|>analysis<|message|>The user wants the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris"}<|call|>',
        "The user wants the weather.", "", [("get_weather", PARIS)],
    ),
    Case(
        "harmony-final", "gpt_oss", "harmony", (),
        "<|channel|>analysis<|message|>Just answer.<|end|><|start|>assistant<|channel|>final<|message|>"
        "It is sunny in Paris.<|return|>",
        "Just answer.", "It is sunny in Paris.",
    ),
    Case(
        "mistral", "mistral", "mistral", ("</s>", "[INST]"),
        '[THINK]Need the weather.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}</s>',
        "Need the weather.", "Checking.", [("get_weather", PARIS)],
    ),
    Case(
        "llama3_json", None, "llama3_json", ("<|eom_id|>", "<|eot_id|>"),
        'Looking it up.<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>',
        "", "Looking it up.", [("get_weather", PARIS)],
    ),
    Case(
        "kimi_k2", "qwen3", "kimi_k2", ("<|im_end|>",),
        "<think>Look it up.</think>One moment.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
        "Look it up.", "One moment.", [("get_weather", PARIS)], ("functions.get_weather:0",),
    ),
    Case(
        "deepseek_v3", "deepseek_r1", "deepseek_v3", ("<｜end▁of▁sentence｜>",),
        "Plan the call.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
        "Plan the call.", "", [("get_weather", PARIS)],
    ),
    Case(
        "deepseek_v31", "deepseek_r1", "deepseek_v31", ("<｜end▁of▁sentence｜>",),
        "Plan.</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
        "Plan.", "Sure.", [("get_weather", PARIS)],
    ),
    Case(
        "hermes", "qwen3", "hermes", (),
        '<think>Use the tool.</think>Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call>",
        "Use the tool.", "Let me check.", [("get_weather", PARIS)],
    ),
]


def special_tokenizer(base: Any, case: Case) -> Any:
    """The embedded tokenizer with the case's markers and end tokens added as special tokens."""
    tok = copy.deepcopy(base)
    added = sorted(parser_markers(case.reasoning, case.tool_calls)) + list(case.extra_special)
    tok.add_tokens([AddedToken(m, special=True, normalized=False) for m in added], special_tokens=True)
    return tok


@pytest.fixture(scope="module")
def tokenizers(tokenizer) -> dict[str, Any]:
    return {c.name: special_tokenizer(tokenizer, c) for c in CASES}


def post_for(tok: Any, case: Case, *, tools=TOOLS, stop=(), skip_special_tokens=True) -> RequestState:
    counter = iter(range(1000))
    return RequestState(
        tok,
        reasoning_parser=case.reasoning,
        tool_call_parser=case.tool_calls,
        tools=tools,
        stop=stop,
        reasoning_started=False,
        skip_special_tokens=skip_special_tokens,
        id_factory=lambda: f"call_{next(counter)}",
    )


def run(post: RequestState, ids: list[int], chunk: int) -> list[Any]:
    events: list[Any] = []
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        events += post.feed(EngineDelta(token_ids=part, finish_reason="stop" if i + chunk >= len(ids) else None))
    assert not post._parser.internal_errors, post._parser.internal_errors
    return events


def visible(events: list[Any]) -> list[str]:
    """Every string a client is shown (answer text, reasoning, tool names, arguments, raw text of broken calls)."""
    out: list[str] = []
    for e in events:
        if isinstance(e, (TextDelta, ReasoningDelta)):
            out.append(e.text)
        elif isinstance(e, ToolCallStart):
            out.append(e.name)
        elif isinstance(e, ToolCallArgsDelta):
            out.append(e.fragment)
        elif isinstance(e, ToolCallEnd):
            out.append(e.arguments)
        elif isinstance(e, (ToolCallError, ToolCallTruncated)):
            out.append(e.raw)
    return out


def leaks(tok: Any, events: list[Any]) -> list[str]:
    specials = SpecialTokens.of(tok).by_id.values()
    return [f"{s!r} in {v!r}" for v in visible(events) for s in specials if s in v]


def outcome(events: list[Any]) -> tuple[str, str, list[tuple[str, dict]], list[str]]:
    check_protocol([e for e in events if not isinstance(e, (Usage, Finish))])
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    names = {e.index: e.name for e in events if isinstance(e, ToolCallStart)}
    calls = [(names[e.index], json.loads(e.arguments)) for e in events if isinstance(e, ToolCallEnd)]
    ids = [e.id for e in events if isinstance(e, ToolCallStart)]
    return reasoning, text, calls, ids


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_special_markers_parse_and_never_show(tokenizers, case: Case, chunk: int) -> None:
    tok = tokenizers[case.name]
    ids = tok.encode(case.output, add_special_tokens=False)
    special_ids = set(SpecialTokens.of(tok).by_id)
    markers_in_output = [m for m in parser_markers(case.reasoning, case.tool_calls) if m in case.output]
    # the markers really are single special ids of this tokenizer, as a model of that family samples them
    for m in markers_in_output:
        (mid,) = tok.encode(m, add_special_tokens=False)
        assert mid in special_ids and mid in ids, m
    events = run(post_for(tok, case), ids + [tok.eos_token_id], chunk)
    reasoning, text, calls, call_ids = outcome(events)
    assert (reasoning, text, calls) == (case.reasoning_text, case.text, case.calls)
    if case.call_ids:
        assert tuple(call_ids) == case.call_ids
    assert leaks(tok, events) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_markers_without_a_parser_to_consume_them_are_dropped(tokenizers, case: Case) -> None:
    """No tools in the request: the tool-call parser is off, so its special markers are skipped like any other
    special token (what the model wrote between them is text, as with any model that calls without tools)."""
    tok = tokenizers[case.name]
    ids = tok.encode(case.output, add_special_tokens=False)
    events = run(post_for(tok, case, tools=[]), ids, 2)
    assert not any(isinstance(e, ToolCallStart) for e in events)
    assert leaks(tok, events) == []


def test_skip_special_tokens_off_shows_them_as_text(tokenizers) -> None:
    """`skip_special_tokens: false` in the catalog keeps vLLM's meaning: every special token is text."""
    case = next(c for c in CASES if c.name == "llama3_json")
    tok = tokenizers[case.name]
    events = run(post_for(tok, case, tools=[], skip_special_tokens=False), tok.encode(case.output), 1)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == case.output


def test_stop_string_before_a_marker_ends_the_turn_and_none_spans_it(tokenizers) -> None:
    case = next(c for c in CASES if c.name == "hermes")
    tok = tokenizers[case.name]
    ids = tok.encode(case.output, add_special_tokens=False)
    # "check." is cut by the stop string "." before the tool call's marker ever reaches the parser
    events = run(post_for(tok, case, stop=(" check.",)), ids, 1)
    assert outcome(events)[:3] == ("Use the tool.", "Let me", [])
    # a stop string that only matches across the marker ("e<tool_call>" has no text between) does not stop
    events = run(post_for(tok, case, stop=(".\n{",)), ids, 4)
    assert outcome(events)[2] == case.calls


def test_special_tokens_are_read_once_per_tokenizer(tokenizers) -> None:
    case = next(c for c in CASES if c.name == "mistral")
    tok = tokenizers[case.name]
    special = SpecialTokens.of(tok)
    kept = special.kept("mistral", "mistral")
    assert set(kept.values()) == {"[ARGS]", "[CALL_ID]", "[THINK]", "[TOOL_CALLS]", "[/THINK]"}
    assert special.kept("mistral", "mistral") is kept  # one table per parser pair, built once
    assert "</s>" in special.by_id.values() and "</s>" not in kept.values()  # end of turn: dropped, never kept


# -- properties ---------------------------------------------------------------------------------------------------

# Ordinary pieces that cannot spell any marker or special token (no "<", "[", "|", "｜"): whatever special-token text
# the client could see must have come from a special id.
ORDINARY = [
    "{", "}", '"', ":", ",", " ", "\n", "name", "arguments", "parameters", "get_weather", "city", "Paris", "Hi",
    "analysis", "final", "commentary", " to=functions.get_weather", "json", "function", "```", "functions.x:0", "é",
]


@st.composite
def token_stream(draw, tok: Any, case: Case) -> tuple[list[int], list[int]]:
    special = SpecialTokens.of(tok).by_id
    kept = list(special.keys())
    ordinary = sorted({i for piece in ORDINARY for i in tok.encode(piece, add_special_tokens=False)})
    ids = draw(st.lists(st.one_of(st.sampled_from(ordinary), st.sampled_from(kept)), max_size=60))
    cuts = draw(st.lists(st.integers(0, len(ids)), max_size=8))
    return ids, sorted(set(cuts))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), case=st.sampled_from(CASES), with_tools=st.booleans())
def test_random_special_and_ordinary_ids_never_leak_special_text(tokenizers, data, case: Case, with_tools: bool):
    tok = tokenizers[case.name]
    ids, cuts = data.draw(token_stream(tok, case))
    post = post_for(tok, case, tools=TOOLS if with_tools else [])
    events: list[Any] = []
    bounds = [0, *cuts, len(ids)]
    for a, b in zip(bounds, bounds[1:]):
        events += post.feed(EngineDelta(token_ids=ids[a:b]))
    events += post.feed(EngineDelta(token_ids=[], finish_reason="length"))
    assert not post._parser.internal_errors
    check_protocol([e for e in events if not isinstance(e, (Usage, Finish))])
    assert leaks(tok, events) == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), case=st.sampled_from(CASES))
def test_detokenizer_equals_batch_decode_of_kept_ids(tokenizers, data, case: Case) -> None:
    """Step by step, the decode path gives what one batch decode gives once every special id that is not a marker
    of the parsers is removed: ordinary text is unchanged, kept markers are in place, nothing else special."""
    tok = tokenizers[case.name]
    ids, _ = data.draw(token_stream(tok, case))
    keep = SpecialTokens.of(tok).kept(case.reasoning, case.tool_calls)
    special = SpecialTokens.of(tok).by_id
    d = Detokenizer(tok, keep)
    got = "".join(piece for i in ids if (p := d.step(i)) is not None for piece in [p[0]])
    want = tok.decode([i for i in ids if i not in special or i in keep], skip_special_tokens=False)
    assert got == want

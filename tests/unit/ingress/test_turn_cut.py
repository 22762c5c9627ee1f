"""Turns the server ends itself: a loop (stop_repetition) and the model's output cap reported as a normal end.

The detector is checked against a brute-force definition on open-ended token streams, fed in any chunking; the
request state against the real tokenizer: what the client is told, and that such a turn is never kept as generated
(its tokens lack the end-of-turn token the next prompt's rendering adds)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentserve.config import RepetitionSpec
from agentserve.ingress.output.repetition import RepetitionDetector
from agentserve.ingress.output.request_state import RequestState
from agentserve.protocol import EngineDelta
from agentserve.protocol.events import Finish

SPEC = RepetitionSpec(min_tokens=24, max_period=8)


def first_loop_end(tokens: list[int], spec: RepetitionSpec) -> int | None:
    """By definition: the first length T at which the last min_tokens tokens are p-periodic for some p."""
    n = spec.min_tokens
    for t in range(n, len(tokens) + 1):
        window = tokens[t - n : t]
        if any(all(window[i] == window[i - p] for i in range(p, n)) for p in range(1, spec.max_period + 1)):
            return t
    return None


def chunked(tokens: list[int], cuts: list[int]) -> list[list[int]]:
    bounds = sorted({c % (len(tokens) + 1) for c in cuts} | {0, len(tokens)})
    return [tokens[a:b] for a, b in zip(bounds, bounds[1:])]


streams = st.one_of(
    st.lists(st.integers(0, 3), max_size=120),  # a small alphabet: loops happen by chance too
    st.builds(lambda head, unit, k: head + unit * k, st.lists(st.integers(0, 50), max_size=30),
              st.lists(st.integers(0, 50), min_size=1, max_size=12), st.integers(1, 12)),
)


@given(streams, st.lists(st.integers(0, 200), max_size=10))
@settings(max_examples=400, deadline=None)
def test_the_detector_finds_a_loop_exactly_when_and_where_the_definition_does(tokens, cuts):
    d = RepetitionDetector(SPEC)
    seen = 0
    hit_at = None
    for chunk in chunked(tokens, cuts):
        if d.feed(chunk):
            hit_at = seen + len(chunk)
            break
        seen += len(chunk)
    expected = first_loop_end(tokens, SPEC)
    if expected is None:
        assert hit_at is None and d.period is None
    else:  # found in the chunk that completed it
        assert hit_at is not None and seen < expected <= hit_at and 1 <= d.period <= SPEC.max_period


def test_a_loop_longer_than_the_longest_period_is_not_a_loop():
    unit = list(range(100, 110))  # 10 tokens > max_period 8
    assert not RepetitionDetector(SPEC).feed(unit * 10)


def test_min_tokens_must_cover_two_periods():
    with pytest.raises(ValidationError, match="twice max_period"):
        RepetitionSpec(min_tokens=20, max_period=16)


def state(tokenizer, **kw) -> RequestState:
    return RequestState(tokenizer, reasoning_parser=None, tool_call_parser=None, tools=[], **kw)


def finish_of(events) -> Finish:
    (f,) = [e for e in events if isinstance(e, Finish)]
    return f


def test_a_looping_turn_ends_as_stop_with_what_it_wrote_and_is_not_kept(tokenizer):
    s = state(tokenizer, repetition=RepetitionSpec(min_tokens=40, max_period=16))
    intro = tokenizer.encode("Sure, here is the answer.", add_special_tokens=False)
    loop = tokenizer.encode(" I am sorry.", add_special_tokens=False)
    events = s.feed(EngineDelta(token_ids=intro, prompt_tokens=10, num_cached_tokens=0))
    for _ in range(40):
        events += s.feed(EngineDelta(token_ids=loop))
        if s.finish_reason is not None:
            break
    assert finish_of(events).reason == "stop" and s.cut and s.loop_period == len(loop)
    text = "".join(getattr(e, "text", "") for e in events)
    assert text.startswith("Sure, here is the answer. I am sorry.")
    assert s.completion_tokens < len(intro) + 40 // len(loop) * len(loop) + 2 * len(loop)  # ended soon after
    assert not s.kept_as_generated


def test_the_cap_reported_as_stop_is_a_normal_end_but_not_kept(tokenizer):
    ids = tokenizer.encode("One two three four", add_special_tokens=False)
    capped = state(tokenizer, length_finish="stop")
    f = finish_of(capped.feed(EngineDelta(token_ids=ids, finish_reason="length", prompt_tokens=5, num_cached_tokens=0)))
    assert f.reason == "stop" and capped.cut and not capped.kept_as_generated and capped.loop_period is None
    plain = state(tokenizer)  # the default: the cut is reported as a cut
    f = finish_of(plain.feed(EngineDelta(token_ids=ids, finish_reason="length", prompt_tokens=5, num_cached_tokens=0)))
    assert f.reason == "length" and not plain.cut


def test_a_turn_the_model_ended_is_kept_with_both_on(tokenizer):
    ids = tokenizer.encode("Done.", add_special_tokens=False) + [tokenizer.eos_token_id]
    s = state(tokenizer, length_finish="stop", repetition=SPEC)
    f = finish_of(s.feed(EngineDelta(token_ids=ids, finish_reason="stop", prompt_tokens=5, num_cached_tokens=0)))
    assert f.reason == "stop" and not s.cut and s.kept_as_generated

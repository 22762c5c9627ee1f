"""Context accounting in the preprocessor: max_tokens past the window is clamped (or refused when clamping is off);
a prompt that alone fills the window is refused with its counts, whatever the switch; a model's server-side output
cap is granted and reported, never refused."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.apis.anthropic import errors as anthropic_errors
from agentserve.config import ModelSpec
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import Conversation, GenerationRequest, SamplingParams, TextBlock, Turn
from agentserve.protocol.errors import ContextWindowExceeded

WINDOW = 300


def _by_clamp(model_path, spec: ModelSpec) -> dict[bool, Preprocessor]:
    return {flag: Preprocessor(spec, str(model_path), 16, clamp_max_tokens=flag) for flag in (True, False)}


@pytest.fixture(scope="module")
def pres(model_path):
    return _by_clamp(model_path, ModelSpec(context_window=WINDOW))


def _request(words: int, max_tokens: int | None) -> GenerationRequest:
    turn = Turn(role="user", blocks=(TextBlock(text="lorem " * words),))
    return GenerationRequest(
        request_id="r", model="m", conversation=Conversation(turns=(turn,)),
        sampling=SamplingParams(max_tokens=max_tokens),
    )


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MAX_TOKENS = st.one_of(st.none(), st.integers(1, 40_000))


def _prompt_tokens(pre: Preprocessor, words: int) -> int:
    return len(pre.render(_request(words, None).conversation).token_ids)


@PROPERTY
@given(words=st.integers(0, 400), max_tokens=MAX_TOKENS, clamp=st.booleans())
def test_max_tokens_is_clamped_or_refused_by_what_the_window_leaves(pres, words, max_tokens, clamp):
    pre = pres[clamp]
    n = _prompt_tokens(pre, words)
    left = WINDOW - n
    if left <= 0:
        with pytest.raises(ContextWindowExceeded) as exc:
            pre.preprocess(_request(words, max_tokens))
        assert (exc.value.prompt_tokens, exc.value.window, exc.value.max_tokens) == (n, WINDOW, None)
        assert exc.value.code == "context_length_exceeded" and exc.value.status == 400
    elif max_tokens is not None and max_tokens > left and not clamp:
        with pytest.raises(ContextWindowExceeded) as exc:
            pre.preprocess(_request(words, max_tokens))
        assert (exc.value.prompt_tokens, exc.value.max_tokens) == (n, max_tokens)
        assert f"({n} in the messages, {max_tokens} in the completion)" in exc.value.message
    else:
        out = pre.preprocess(_request(words, max_tokens))
        assert out.prompt_tokens == n
        clamped = max_tokens is not None and max_tokens > left
        assert out.engine.max_tokens == (left if max_tokens is None or clamped else max_tokens)
        assert out.report.requested_max_tokens == (max_tokens if clamped else None)


CAP = 100


@pytest.fixture(scope="module")
def capped(model_path):
    return _by_clamp(model_path, ModelSpec(context_window=WINDOW, max_output_tokens=CAP))


@PROPERTY
@given(words=st.integers(0, 300), max_tokens=MAX_TOKENS, clamp=st.booleans())
def test_the_servers_output_cap_is_granted_and_reported_never_refused(capped, words, max_tokens, clamp):
    left = WINDOW - _prompt_tokens(capped[clamp], words)
    pre = capped[clamp]
    if left <= 0 or (max_tokens is not None and max_tokens > left and not clamp):
        with pytest.raises(ContextWindowExceeded):  # the window's rules are the window's, cap or not
            pre.preprocess(_request(words, max_tokens))
        return
    out = pre.preprocess(_request(words, max_tokens))
    granted = min(left, CAP, max_tokens if max_tokens is not None else CAP)
    assert out.engine.max_tokens == granted
    # A client that asked for more is told what it got (x-agentserve-max-tokens-clamped); one that asked nothing is not.
    assert out.report.requested_max_tokens == (max_tokens if max_tokens is not None and max_tokens > granted else None)
    # Only a turn the cap itself limited may be reported as a normal end (ModelSpec.max_output_tokens_finish).
    assert out.report.capped_by_server == (granted == CAP and (max_tokens is None or max_tokens > CAP))


def test_the_error_keeps_its_counts_across_a_pickle_hop():
    err = pickle.loads(pickle.dumps(ContextWindowExceeded(9000, 8192, 32000)))
    assert isinstance(err, ContextWindowExceeded)
    assert (err.prompt_tokens, err.window, err.max_tokens, err.param) == (9000, 8192, 32000, "max_tokens")


def test_anthropic_words_each_case_as_claude_code_parses_it():
    alone = anthropic_errors.context_exceeded(ContextWindowExceeded(9000, 8192))
    assert alone.message == "prompt is too long: 9000 tokens > 8192 maximum"
    both = anthropic_errors.context_exceeded(ContextWindowExceeded(8000, 8192, 32000))
    assert both.message.startswith("input length and `max_tokens` exceed context limit: 8000 + 32000 > 8192")
    assert anthropic_errors.error_type(both) == "invalid_request_error" and anthropic_errors.status(both) == 400

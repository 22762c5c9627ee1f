"""`stop`, `stop_sequences` and `logit_bias` are bounded as the hosted APIs bound them: past a cap is a 400 naming
the field, in the decoder (so in every API's envelope), before any of it reaches the stream or the engine."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.apis import anthropic, chat_completions
from agentserve.apis.sampling_caps import ANTHROPIC_MAX_STOP, CHAT_MAX_STOP, MAX_LOGIT_BIAS, MAX_STOP_CHARS
from agentserve.protocol.errors import RequestError

MESSAGES = [{"role": "user", "content": "hi"}]


def _chat(**extra):
    req = chat_completions.ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **extra})
    return chat_completions.decode(req, request_id="r", model="m")


def _anthropic(**extra):
    req = anthropic.MessagesRequest.model_validate({"model": "m", "max_tokens": 16, "messages": MESSAGES, **extra})
    return anthropic.decode(req, request_id="r", model="m", signer=None, caller="")


@settings(max_examples=40, deadline=None)
@given(stops=st.lists(st.text(min_size=1, max_size=8), max_size=40), api=st.sampled_from(["chat", "anthropic"]))
def test_stop_strings_up_to_the_cap_pass_and_past_it_are_refused(stops, api):
    cap, param = (CHAT_MAX_STOP, "stop") if api == "chat" else (ANTHROPIC_MAX_STOP, "stop_sequences")
    decode = _chat if api == "chat" else _anthropic
    if len(stops) <= cap:
        assert decode(**{param: stops}).sampling.stop == tuple(stops)
    else:
        with pytest.raises(RequestError) as refused:
            decode(**{param: stops})
        assert refused.value.status == 400 and refused.value.param == param and str(cap) in refused.value.message


@pytest.mark.parametrize("api, param", [("chat", "stop"), ("anthropic", "stop_sequences")])
def test_a_very_long_stop_string_is_refused(api, param):
    decode = _chat if api == "chat" else _anthropic
    decode(**{param: ["x" * MAX_STOP_CHARS]})
    with pytest.raises(RequestError) as refused:
        decode(**{param: ["ok", "x" * (MAX_STOP_CHARS + 1)]})
    assert refused.value.param == f"{param}[1]"


def test_a_single_stop_string_is_still_one():
    assert _chat(stop="END").sampling.stop == ("END",)


@pytest.mark.parametrize("n", [0, 1, MAX_LOGIT_BIAS, MAX_LOGIT_BIAS + 1, 50_000])
def test_logit_bias_takes_at_most_300_entries(n):
    bias = {str(i): 1.0 for i in range(n)}
    if n <= MAX_LOGIT_BIAS:
        assert len(_chat(logit_bias=bias).sampling.logit_bias) == n
    else:
        with pytest.raises(RequestError) as refused:
            _chat(logit_bias=bias)
        assert refused.value.param == "logit_bias" and "300" in refused.value.message

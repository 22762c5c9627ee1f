"""A session's next Messages request decodes only the messages it added (apis/anthropic/session_memo.py): whatever
the session sends (new turns, an edited or cleared earlier message, the same request again, a changed system
prompt, fewer messages), the request decodes to exactly what decoding it whole gives, conversation and reply
origin alike; a forged signature in a new message is refused as before; and another caller's requests never
decode against this caller's."""

from __future__ import annotations

import copy

import orjson
import pytest
from pydantic import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.apis import anthropic
from agentserve.apis.anthropic.decode import system_turns
from agentserve.apis.anthropic.session_memo import MessageMemo
from agentserve.apis.origin import Origins, origin_after
from agentserve.ingress.http import describe_validation
from agentserve.ingress.middleware.auth import hash_key
from agentserve.protocol.errors import RequestError
from tests.support.keys import signing_key

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))
ALICE, BOB = hash_key("alice key"), hash_key("bob key")


def _body(messages: list[dict], system: str = "You are Claude Code.") -> dict:
    return {"model": "m", "max_tokens": 4096, "system": [{"type": "text", "text": system}], "messages": messages}


def _through(memo: MessageMemo, body: dict, caller: str = ALICE, session: str = "s1"):
    """What the Messages handler does: validate (with the memo), decode, remember. (conversation, origin, reused)."""
    key = (caller, session)
    validated = memo.validate(orjson.loads(orjson.dumps(body)), key)
    origins = Origins(caller)
    gen = anthropic.decode(validated.request, request_id="r", model="m", signer=SIGNER, caller=caller,
                           origins=origins, known=validated.known)
    origin = origins.after(gen.conversation.turns)
    memo.remember(key, validated, gen.conversation, system_turns(validated.request), origins.state())
    return gen.conversation, origin, validated.known is not None


def _whole(body: dict, caller: str = ALICE):
    req = anthropic.MessagesRequest.model_validate(body)
    gen = anthropic.decode(req, request_id="r", model="m", signer=SIGNER, caller=caller)
    return gen.conversation, origin_after(caller, gen.conversation.turns)


def _assistant(messages: list[dict], n: int, caller: str = ALICE) -> dict:
    """The assistant turn this server would have sent after `messages`, its thinking signed where it stands."""
    msg = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": f"Thinking {n}.", "signature": ""},
        {"type": "text", "text": f"Reading file {n}."},
        {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": f"/f{n}"}},
    ]}
    return anthropic.sign_thinking([*messages, msg], SIGNER, caller=caller)[-1]


def _result(n: int, text: str | None = None) -> dict:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": text or f"contents of f{n}"},
        {"type": "text", "text": "<system-reminder>keep going</system-reminder>"},
    ]}


_steps = st.lists(st.one_of(
    st.tuples(st.just("turn"), st.integers(1, 3)),  # the harness's next request: n more tool loops
    st.tuples(st.just("clear"), st.integers(0, 50)),  # an earlier tool result cleared in place (microcompaction)
    st.tuples(st.just("again"), st.just(0)),  # the same request resent
    st.tuples(st.just("system"), st.integers(0, 3)),  # the system prompt changed (a model switch)
    st.tuples(st.just("back"), st.integers(1, 4)),  # fewer messages (a rewind)
), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps)
def test_a_session_decodes_as_it_would_whole(steps):
    memo = MessageMemo(1 << 24)
    messages: list[dict] = [{"role": "user", "content": "Fix the failing test."}]
    system = "You are Claude Code."
    n = 0
    for action, k in steps:
        if action == "turn":
            for _ in range(k):
                n += 1
                messages = [*messages, _assistant(messages, n), _result(n)]
        elif action == "clear" and len(messages) > 2:
            i = 2 + 2 * (k % ((len(messages) - 1) // 2)) if len(messages) > 2 else 0
            if i < len(messages) and messages[i]["role"] == "user":
                messages = copy.deepcopy(messages)
                messages[i]["content"][0]["content"] = "[Old tool result content cleared]"
        elif action == "system":
            system = f"You are Claude Code, model {k}."
        elif action == "back" and len(messages) > 1 + 2 * k:
            messages = messages[: len(messages) - 2 * k]
        body = _body(messages, system)
        got, origin, _ = _through(memo, body)
        want, want_origin = _whole(body)
        assert got == want and origin == want_origin


def test_the_next_turn_decodes_only_its_new_messages_and_a_forged_one_is_still_refused():
    memo = MessageMemo(1 << 24)
    messages = [{"role": "user", "content": "Fix the failing test."}]
    for n in range(1, 4):
        messages = [*messages, _assistant(messages, n), _result(n)]
    assert _through(memo, _body(messages))[2] is False  # the session's first request here: decoded whole
    nxt = [*messages, _assistant(messages, 4), _result(4)]
    assert _through(memo, _body(nxt))[2] is True
    forged = _assistant(nxt, 5)
    forged["content"][0]["thinking"] = "Thinking something else."  # not what was signed
    with pytest.raises(RequestError, match="Invalid `signature`"):
        _through(memo, _body([*nxt, forged, _result(5)]))


def test_a_malformed_new_message_is_named_where_it_stands_in_the_body():
    memo = MessageMemo(1 << 24)
    messages = [{"role": "user", "content": "Fix the failing test."}]
    messages = [*messages, _assistant(messages, 1), _result(1)]
    _through(memo, _body(messages))
    bad = [*messages, _assistant(messages, 2), {"role": "user", "content": [{"type": "tool_result"}]}]
    with pytest.raises(ValidationError) as refused:
        memo.validate(orjson.loads(orjson.dumps(_body(bad))), (ALICE, "s1"))
    assert describe_validation(refused.value.errors()).startswith("invalid request: messages.4.content")


def test_another_caller_never_decodes_against_this_callers_session():
    """Bob sends Alice's session id and Alice's history (her signed thinking): he is not decoded against her
    remembered request, so her signatures are checked for him, and refused."""
    memo = MessageMemo(1 << 24)
    messages = [{"role": "user", "content": "Fix the failing test."}]
    messages = [*messages, _assistant(messages, 1), _result(1)]
    _through(memo, _body(messages))
    nxt = [*messages, _assistant(messages, 2), _result(2)]
    with pytest.raises(RequestError, match="Invalid `signature`"):
        _through(memo, _body(nxt), caller=BOB)

"""A session's conversation crosses to the Preprocessor as its new turns (ingress/sent_conversations.py), with the
real Preprocessor replica, tokenizer and template: whatever the session does (extends, edits or drops turns, changes
its tools, lands on a replica that never saw it), every request is rendered from exactly its own conversation, the
same prompt as sending it whole; only a request that extends the last one sent crosses as a delta; and no caller's
delta can name another caller's conversation."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.config import ServeArgs
from agentserve.ingress.lifecycle import RequestPath
from agentserve.ingress.sent_conversations import SentConversations
from agentserve.protocol import (
    AgentHints, Conversation, ConversationDelta, GenerationRequest, KeepAs, SessionAffinity, TextBlock, ToolCallBlock,
    ToolResultBlock, ToolSpec, Turn, caller_session,
)
from agentserve.serve.deployments import preprocessor as deployment
from tests.unit.fake_handles import Method

TOOLS = (ToolSpec(name="read", parameters={"type": "object", "properties": {"path": {"type": "string"}}}),)


def _replica() -> Any:
    args = ServeArgs.from_any({"engine": {"kind": "scripted", "block_size": 16, "rules": [{"reply": "ok"}]}})
    cls = deployment.PreprocessorReplica.func_or_class
    return cls(args.model_dump(mode="json"), args.resolve_catalog().model_dump(mode="json"))


@pytest.fixture(scope="module")
def replicas(model_path):
    mp = pytest.MonkeyPatch()
    mp.setattr(deployment, "start_export", lambda: None)  # no Ray metrics agent here
    yield _replica(), _replica()
    mp.undo()


class Calls:
    """The request path's preprocess over real replicas: each call goes to the replica `pick()` names."""

    def __init__(self, replicas: tuple[Any, ...]) -> None:
        self.replicas = replicas
        self.next = 0
        self.forms: list[str] = []
        self.affinities: list[Any] = []

        def call(request: GenerationRequest, scope: str, model: str, delta: Any = None, keep: Any = None,
                 affinity: Any = None) -> Any:
            self.forms.append("delta" if delta is not None else "whole")
            self.affinities.append(affinity)
            return self.replicas[self.next].preprocess(request, scope, model, delta, keep, affinity=affinity)

        args = ServeArgs()
        self.path = RequestPath(args, preprocessor=SimpleNamespace(preprocess=Method(call)), router=None, engines={},
                                tokenizers={}, doctor=None)  # type: ignore[arg-type]  # only preprocess is used

    def send(self, conversation: Conversation, scope: str = "alice", session: str = "s1") -> Any:
        request = GenerationRequest(request_id="r", model=self.replicas[0]._default, conversation=conversation,
                                    hints=AgentHints(session_id=session))
        return asyncio.run(self.path.preprocess(request, scope, request.model))


def _turn(kind: str, n: int) -> Turn:
    if kind == "user":
        return Turn(role="user", blocks=(TextBlock(text=f"Question {n}?"),))
    if kind == "assistant":
        return Turn(role="assistant", blocks=(TextBlock(text=f"Let me read {n}."),
                                              ToolCallBlock(id=f"c{n}", name="read", arguments=f'{{"path": "f{n}"}}')))
    if kind == "system":
        return Turn(role="system", blocks=(TextBlock(text=f"Note {n}."),))
    return Turn(role="tool", blocks=(ToolResultBlock(tool_call_id=f"c{n}", content=f"contents of f{n}"),))


# What a session does between two requests: add turns (the usual next turn), edit an earlier one (compaction, a
# cleared tool result), drop the last ones (a retry), or change its tools.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("extend"), st.lists(st.sampled_from(["user", "assistant", "tool", "system"]), min_size=1,
                                              max_size=3)),
        st.tuples(st.just("edit"), st.integers(0, 20)),
        st.tuples(st.just("drop"), st.integers(1, 3)),
        st.tuples(st.just("tools"), st.booleans()),
        st.tuples(st.just("replica"), st.integers(0, 1)),
    ),
    min_size=1, max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(_steps)
def test_every_request_is_rendered_from_its_own_conversation(replicas, steps):
    calls = Calls(replicas)
    turns = [_turn("system", 0), _turn("user", 0)]
    tools = TOOLS
    last: Conversation | None = None
    for n, (action, arg) in enumerate(steps, 1):
        if action == "extend":
            turns += [_turn(kind, n) for kind in arg]
        elif action == "edit":
            i = arg % len(turns)
            turns[i] = Turn(role=turns[i].role, blocks=(TextBlock(text=f"edited {n}"),)) if turns[i].role != "tool" \
                else _turn("tool", 100 + n)
        elif action == "drop":
            turns = turns[: max(2, len(turns) - arg)]
        elif action == "tools":
            tools = TOOLS if arg else ()
        else:
            calls.next = arg
        conversation = Conversation(turns=tuple(turns), tools=tools)
        before = len(calls.forms)
        got = calls.send(conversation)
        whole = GenerationRequest(request_id="r", model=replicas[0]._default, conversation=conversation,
                                  hints=AgentHints(session_id="s1"))
        pre = replicas[calls.next]._served[whole.model][0]
        assert got.engine.token_ids == pre.preprocess(whole, "alice").engine.token_ids
        extends = (last is not None and last.tools == tools and turns[: len(last.turns)] == list(last.turns)
                   and len(last.turns) <= len(turns))
        assert (calls.forms[before] == "delta") == extends  # a delta exactly when it extends the last one sent
        last = conversation


def test_a_replica_that_never_saw_the_session_gets_it_whole_once(replicas):
    calls = Calls(replicas)
    turns = [_turn("user", 0), _turn("assistant", 1), _turn("tool", 1)]
    calls.send(Conversation(turns=tuple(turns), tools=TOOLS))
    calls.next = 1  # the next turn lands on the other replica
    turns += [_turn("assistant", 2), _turn("tool", 2)]
    calls.send(Conversation(turns=tuple(turns), tools=TOOLS))
    turns += [_turn("assistant", 3), _turn("tool", 3)]
    calls.send(Conversation(turns=tuple(turns), tools=TOOLS))
    # first whole; then a delta the new replica cannot apply, resent whole; then a delta it holds the base of
    assert calls.forms == ["whole", "delta", "whole", "delta"]


def test_every_call_of_a_session_names_it_for_the_request_router_and_per_caller(replicas):
    """The Preprocessor's request router keeps a session on one replica by the key each call carries: the same on
    every call of the session (the first whole, the deltas, a resend), and another for another caller's same
    session id."""
    calls = Calls(replicas)
    turns = [_turn("user", 0), _turn("assistant", 1), _turn("tool", 1)]
    calls.send(Conversation(turns=tuple(turns), tools=TOOLS))
    calls.next = 1  # a delta the other replica refuses, then the resend
    turns += [_turn("assistant", 2), _turn("tool", 2)]
    calls.send(Conversation(turns=tuple(turns), tools=TOOLS))
    calls.send(Conversation(turns=tuple(turns), tools=TOOLS), scope="bob")
    alice, bob = SessionAffinity(key=caller_session("alice", "s1")), SessionAffinity(key=caller_session("bob", "s1"))
    assert calls.forms == ["whole", "delta", "whole", "whole"]
    assert calls.affinities == [alice, alice, alice, bob] and alice != bob


def test_a_delta_never_reaches_another_callers_conversation(replicas):
    """Bob learns (somehow) the id Alice's conversation is kept under: his delta against it is refused (None), and
    the Ingress sends his whole conversation instead, so he only ever gets a prompt of his own."""
    replica = replicas[0]
    model = replica._default
    secret = Turn(role="user", blocks=(TextBlock(text="alice's private notes"),))
    alice = GenerationRequest(request_id="a", model=model, conversation=Conversation(turns=(secret,)))
    asyncio.run(replica.preprocess(alice, "alice", model, None, KeepAs(id="k1", nbytes=100)))
    stub = alice.model_copy(update={"conversation": Conversation(turns=())})
    delta = ConversationDelta(base="k1", base_turns=1, turns=(_turn("user", 1),))
    assert asyncio.run(replica.preprocess(stub, "bob", model, delta, None)) is None
    assert asyncio.run(replica.preprocess(stub, "alice", model, delta, None)) is not None  # (her own: applied)
    wrong_length = delta.model_copy(update={"base_turns": 2})
    assert asyncio.run(replica.preprocess(stub, "alice", model, wrong_length, None)) is None


def test_without_a_session_or_a_memo_nothing_is_kept():
    conversation = Conversation(turns=(_turn("user", 0),))
    assert SentConversations(1 << 20).ship("alice", "m", "", conversation) is None
    assert SentConversations(0).ship("alice", "m", "s1", conversation) is None
    sent = SentConversations(1 << 20)
    first = sent.ship("alice", "m", "s1", conversation)
    assert first is not None and first.delta is None
    other_caller = sent.ship("bob", "m", "s1", conversation)  # the same session id from another key: its own
    assert other_caller is not None and other_caller.delta is None

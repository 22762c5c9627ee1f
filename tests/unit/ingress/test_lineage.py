"""Session, parent session and request kind from each harness's own headers (agentserve/ingress/lineage.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.apis.responses.schema import ResponsesRequest
from agentserve.ingress.lineage import (
    COMPACTION_PROMPTS,
    PARENT_HEADERS,
    SESSION_HEADERS,
    Lineage,
    classify,
    read_lineage,
    with_lineage,
)
from agentserve.protocol import Conversation, GenerationRequest
from agentserve.protocol.conversation import TextBlock, ToolCallBlock, ToolResultBlock, Turn


def user(text: str) -> Turn:
    return Turn(role="user", blocks=(TextBlock(text=text),))


def assistant_call() -> Turn:
    return Turn(role="assistant", blocks=(ToolCallBlock(id="c1", name="Bash", arguments="{}"),))


def tool_result() -> Turn:
    return Turn(role="user", blocks=(ToolResultBlock(tool_call_id="c1", content="hi"),))


def conv(*turns: Turn) -> Conversation:
    return Conversation(turns=turns)


@pytest.mark.parametrize(
    ("header", "harness"),
    [
        ("x-claude-code-session-id", "claude-code"),
        ("thread-id", "codex"),
        ("session_id", "codex"),
        ("session-id", "codex"),
        ("x-session-id", "opencode"),
        ("x-deepseek-harness-session-id", "deepseek-harness"),
        ("x-dynamo-session-id", "dynamo"),
        ("x-agentserve-session-id", "agentserve"),
    ],
)
def test_each_harness_names_its_session_its_own_way(header, harness):
    lineage = read_lineage({header: " sess-1 "})
    assert (lineage.session, lineage.harness, lineage.parent, lineage.subagent) == ("sess-1", harness, None, False)


def test_agentserves_own_header_wins_and_no_header_means_no_session():
    both = {"x-claude-code-session-id": "cc", "x-agentserve-session-id": "mine", "session_id": "codex"}
    assert read_lineage(both).session == "mine"
    assert read_lineage({}) == Lineage()
    assert read_lineage({"session_id": "   "}).session is None  # blank is not a session


def test_a_claude_code_subagent_is_its_own_session_under_the_main_thread():
    main = read_lineage({"x-claude-code-session-id": "S"})
    child = read_lineage({"x-claude-code-session-id": "S", "x-claude-code-agent-id": "A"})
    grandchild = read_lineage(
        {"x-claude-code-session-id": "S", "x-claude-code-agent-id": "B", "x-claude-code-parent-agent-id": "A"}
    )
    assert (main.session, main.parent, main.subagent) == ("S", None, False)
    assert (child.session, child.parent, child.subagent) == ("S/A", "S", True)
    assert (grandchild.session, grandchild.parent) == ("S/B", "S/A")
    assert grandchild.parent == child.session  # the router finds the parent's home under the parent's own key


def test_codex_threads_subagents_windows_and_compaction():
    spawned = read_lineage({"thread-id": "T2", "x-codex-parent-thread-id": "T1", "x-openai-subagent": "collab_spawn"})
    assert (spawned.session, spawned.parent, spawned.subagent, spawned.compaction) == ("T2", "T1", True, False)
    meta = {"request_kind": "compaction", "thread_source": "user"}
    compacting = read_lineage({"thread-id": "T1", "x-codex-turn-metadata": json.dumps(meta),
                               "x-codex-window-id": "T1:3"})  # fmt: skip
    assert (compacting.compaction, compacting.subagent, compacting.window) == (True, False, 3)
    # Codex's compact subagent header marks a compaction, not a child thread.
    assert read_lineage({"session_id": "T1", "x-openai-subagent": "compact"}).compaction
    assert not read_lineage({"session_id": "T1", "x-openai-subagent": "compact"}).subagent
    # The parent may come inside the turn metadata only.
    nested = read_lineage({"thread-id": "T3", "x-codex-turn-metadata": '{"parent_thread_id": "T1"}'})
    assert (nested.parent, nested.subagent) == ("T1", True)
    # An opaque or malformed metadata value carries nothing, and is no error.
    assert read_lineage({"thread-id": "T", "x-codex-turn-metadata": "v1;opaque"}) == Lineage("codex", "T")
    assert read_lineage({"thread-id": "T", "x-codex-window-id": "T:x"}).window is None


def test_codex_over_its_socket_repeats_the_headers_in_client_metadata():
    body = ResponsesRequest.model_validate({
        "model": "m", "input": "hi",
        "client_metadata": {"thread_id": "T9", "x-codex-parent-thread-id": "T1",
                            "x-codex-turn-metadata": '{"request_kind": "compaction"}'},
    })  # fmt: skip
    lineage = read_lineage({}, body)
    assert (lineage.session, lineage.parent, lineage.compaction) == ("T9", "T1", True)
    assert read_lineage({"thread-id": "header-wins"}, body).session == "header-wins"


def test_opencodes_parent_session_header():
    lineage = read_lineage({"x-session-id": "child", "x-parent-session-id": "root"})
    assert (lineage.session, lineage.parent, lineage.subagent) == ("child", "root", True)
    assert all(read_lineage({h: "p"}).parent == "p" for h in PARENT_HEADERS)


def test_what_triggered_a_request():
    plain = Lineage()
    assert classify(conv(user("fix the bug")), plain) == "user_message"
    assert classify(conv(user("fix it"), assistant_call(), tool_result()), plain) == "tool_result"
    assert classify(conv(user("fix it"), assistant_call(), tool_result(), user("also this")), plain) == "tool_result"
    assert classify(conv(user("fix it"), assistant_call()), plain) == "other"  # a continuation (prefill)
    assert classify(conv(), plain) == "other"
    child = Lineage(session="S/A", parent="S", subagent=True)
    assert classify(conv(user("search the repo for X")), child) == "subagent_spawn"
    assert classify(conv(user("search"), assistant_call(), tool_result()), child) == "tool_result"


@pytest.mark.parametrize("prompt", COMPACTION_PROMPTS)
def test_compaction_is_recognised_by_the_harness_marker_or_its_summary_prompt(prompt):
    history = (user("fix it"), assistant_call(), tool_result())
    asked = conv(*history, user(f"{prompt}, paying close attention to the user's requests."))
    assert classify(asked, Lineage()) == "compaction"
    assert classify(conv(*history), Lineage(compaction=True)) == "compaction"
    # The prompt quoted earlier in the history (the user pasted it) does not make a later turn a compaction.
    quoted = conv(user(prompt), assistant_call(), tool_result())
    assert classify(quoted, Lineage()) == "tool_result"


def test_a_declared_kind_wins_and_an_unknown_one_is_ignored():
    assert read_lineage({"x-agentserve-request-kind": "Compaction"}).declared_kind == "compaction"
    assert read_lineage({"x-agentserve-request-kind": "rm -rf"}).declared_kind is None
    lineage = read_lineage({"x-agentserve-request-kind": "subagent_spawn"})
    assert classify(conv(user("x"), assistant_call(), tool_result()), lineage) == "subagent_spawn"


def test_with_lineage_puts_kind_and_parent_in_the_hints_and_keeps_a_parent_the_body_named():
    gen = GenerationRequest(request_id="r", model="m", conversation=conv(user("hi")))
    out = with_lineage(gen, read_lineage({"x-session-id": "c", "x-parent-session-id": "p"}))
    assert (out.hints.kind, out.hints.parent_session_id) == ("subagent_spawn", "p")
    named = gen.model_copy(update={"hints": gen.hints.model_copy(update={"parent_session_id": "body"})})
    assert with_lineage(named, read_lineage({"x-parent-session-id": "p"})).hints.parent_session_id == "body"


_NAMES = [h for h, _ in SESSION_HEADERS] + list(PARENT_HEADERS) + [
    "x-claude-code-agent-id", "x-claude-code-parent-agent-id", "x-openai-subagent", "x-codex-turn-metadata",
    "x-codex-window-id", "x-agentserve-request-kind", "x-other",
]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(_NAMES), st.text(max_size=40) | st.sampled_from(['{"request_kind": 1}', "[]",
                                                                                     "null", "t:9", '{"a":'])),
    st.one_of(st.none(), st.dictionaries(st.sampled_from(["thread_id", "session_id", "x-codex-turn-metadata"]),
                                         st.one_of(st.text(max_size=10), st.integers(), st.none(),
                                                   st.lists(st.integers(), max_size=2)))),
)
def test_any_headers_give_a_lineage_never_an_error(headers, metadata):
    body = ResponsesRequest.model_validate({"model": "m", "input": "x", "client_metadata": metadata})
    lineage = read_lineage(headers, body)
    for value in (lineage.session, lineage.parent):
        assert value is None or (value.strip() == value and value)
    kind = classify(conv(user("x")), lineage)
    assert kind in ("user_message", "tool_result", "compaction", "subagent_spawn", "other")

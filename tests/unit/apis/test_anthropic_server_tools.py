"""Anthropic's server tools: accepted, never offered, never a 400; their calls and results in a history that began on
Anthropic's API stay as text the model can read."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.apis import anthropic
from agentserve.apis.anthropic.schema import SERVER_TOOL_RESULT_TYPES
from agentserve.protocol import TextBlock, ToolChangeBlock, ToolResultBlock

TOOL = {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
SERVER_TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
                {"type": "web_search_20260209", "name": "web_search_v2", "allowed_domains": ["example.com"]},
                {"type": "web_fetch_20250910", "name": "web_fetch"},
                {"type": "code_execution_20250825", "name": "code_execution"}]


def decode(body: dict):
    req = anthropic.MessagesRequest.model_validate({"model": "m", "max_tokens": 1024, **body})
    return anthropic.decode(req, request_id="r", model="m", signer=None, caller="c")


def test_server_tools_are_accepted_and_not_offered():
    gen = decode({"messages": [{"role": "user", "content": "search"}], "tools": [TOOL, *SERVER_TOOLS]})
    assert [t.name for t in gen.conversation.tools] == ["Bash"] and gen.conversation.tool_choice == "auto"


def test_claude_code_websearch_subrequest_forces_a_server_tool_and_gets_text():
    """Claude Code's WebSearch tool asks the API with only the web_search server tool (and may force it): the model
    answers in text, so the harness's tool call returns instead of failing with a 400."""
    for choice in ({"type": "tool", "name": "web_search"}, {"type": "any"}, {"type": "auto"}):
        gen = decode({"messages": [{"role": "user", "content": "Perform a web search for the query: vllm 0.32"}],
                      "tools": SERVER_TOOLS[:1], "tool_choice": choice})
        assert gen.conversation.tools == () and gen.conversation.tool_choice == "none", choice
    forced_custom = decode({"messages": [{"role": "user", "content": "x"}], "tools": [TOOL, *SERVER_TOOLS],
                            "tool_choice": {"type": "any"}})
    assert forced_custom.conversation.tool_choice == "required"  # a custom tool in force: `any` still binds


def test_a_history_from_anthropics_api_keeps_search_results_as_text():
    gen = decode({"tools": [TOOL, *SERVER_TOOLS], "messages": [
        {"role": "user", "content": "what is new in vllm?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Searching."},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "vllm release"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "title": "vLLM 0.32", "url": "https://example.com/v032",
                 "encrypted_content": "E" * 64, "page_age": "2 days"}]},
            {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_fetch", "input": {"url": "https://x.org"}},
            {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_2", "content": {
                "type": "web_fetch_tool_error", "error_code": "url_not_accessible"}},
            {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_3", "content": {
                "type": "bash_code_execution_result", "stdout": "42\n", "stderr": "", "return_code": 0}},
            {"type": "text", "text": "vLLM 0.32 is out."},
        ]},
        {"role": "user", "content": "thanks"},
    ]})
    texts = [b.text for b in gen.conversation.turns[1].blocks]
    assert texts[0] == "Searching." and texts[-1] == "vLLM 0.32 is out."
    assert texts[1] == '[web_search {"query": "vllm release"}]'
    assert "vLLM 0.32 <https://example.com/v032>" in texts[2] and "E" * 64 not in texts[2]
    assert "url_not_accessible" in texts[4] and "42" in texts[5] and "return code: 0" in texts[5]


def test_a_server_side_tool_search_loads_the_deferred_tools_it_found():
    deferred = {**TOOL, "name": "mcp__db__query", "defer_loading": True}
    gen = decode({"tools": [TOOL, deferred, {"type": "tool_search_tool_regex_20251119", "name": "tool_search"}],
                  "messages": [
        {"role": "user", "content": "query the db"},
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search", "input": {"pattern": "db"}},
            {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {
                "type": "tool_search_tool_search_result",
                "tool_references": [{"type": "tool_reference", "tool_name": "mcp__db__query"}]}},
        ]},
        {"role": "user", "content": "go on"},
    ]})
    roles = [t.role for t in gen.conversation.turns]
    assert roles == ["user", "assistant", "system", "user"]
    change = gen.conversation.turns[2].blocks[0]
    assert isinstance(change, ToolChangeBlock) and [t.name for t in change.added] == ["mcp__db__query"]
    assert [t.name for t in gen.conversation.tools_in_force()] == ["Bash", "mcp__db__query"]


leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=6))
content = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["type", "title", "url", "error_code", "stdout", "stderr", "return_code",
                                     "content", "source", "data", "tool_references", "tool_name"]), inner,
                    max_size=4)), max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(SERVER_TOOL_RESULT_TYPES), body=content)
def test_any_result_content_is_text_or_a_clear_400(kind, body):
    """Whatever a result holds, it is read as text or refused by validation (a 400), never an exception."""
    from pydantic import ValidationError

    msg = {"type": kind, "tool_use_id": "srvtoolu_1", "content": body}
    try:
        gen = decode({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [msg]}]})
    except ValidationError:
        assert not (body is None or isinstance(body, (list, dict)))  # only a scalar content is malformed
        return
    block = gen.conversation.turns[1].blocks[0]
    assert isinstance(block, TextBlock) and block.text.startswith(f"[{kind.removesuffix('_tool_result')} result")
    json.dumps(block.text)

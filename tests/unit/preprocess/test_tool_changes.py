"""Tools added or removed mid-session (Claude Code's tool_addition / tool_removal, a tool search's tool_reference)
through the real preprocessor: the prompt before the change renders token for token as the engine cached it, the
model reads the change where it was made, and the parser and constraints know the tools in force."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.apis import anthropic
from agentserve.config import ModelSpec
from agentserve.preprocess import tool_changes
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.preprocess.turn_digest import chain, header_digest
from agentserve.protocol.errors import RequestError


def tool(name: str, **extra) -> dict:
    return {"name": name, "description": f"The {name} tool.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}, **extra}


TOOLS = [tool("Bash"), tool("ToolSearch"), tool("mcp__github__create_issue", defer_loading=True),
         tool("mcp__github__list_prs", defer_loading=True)]


@pytest.fixture(scope="module")
def pre(model_path):
    return Preprocessor(ModelSpec(), str(model_path), 16)


def conv(messages, tools=TOOLS, **body):
    return anthropic.conversation(
        anthropic.CountTokensRequest.model_validate({"model": "m", "system": "You are an agent.", "tools": tools,
                                                     "messages": messages, **body}), None, caller="c")


def exchange(i: int, kind: str) -> list[dict]:
    if kind == "tool":
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash",
                                                   "input": {"q": f"ls {i}"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"file{i}"}]}]
    return [{"role": "assistant", "content": f"Answer {i}."}, {"role": "user", "content": f"Question {i + 1}?"}]


CHANGES = st.sampled_from([
    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "mcp__github__create_issue"}},
    {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": tool("Late")}},
    {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Bash"}},
])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(["tool", "text"]), min_size=1, max_size=6),
       changes=st.lists(CHANGES, min_size=1, max_size=3), with_text=st.booleans(), after=st.integers(0, 3))
def test_a_tool_change_keeps_every_earlier_token(pre, kinds, changes, with_text, after):
    history = [{"role": "user", "content": "Question 0?"}]
    for i, kind in enumerate(kinds):
        history += exchange(i, kind)
    before = pre.render(conv(history), add_generation_prompt=False)
    system = {"role": "system", "content": ([{"type": "text", "text": "An MCP server connected."}] if with_text else [])
              + changes}
    later = [*history, system]
    for i in range(after):
        later += exchange(100 + i, "text")
    rendered = pre.render(conv(later))
    assert rendered.token_ids[: len(before.token_ids)] == before.token_ids
    added = [c["tool"].get("name") or c["tool"]["definition"]["name"] for c in changes if c["type"] == "tool_addition"]
    for name in added:  # the model reads the added tool where it was added, not in the list at the top
        assert f'"name": "{name}"' in rendered.text[len(before.text):]
    assert "mcp__github__list_prs" not in rendered.text  # deferred, never loaded: not offered


def test_the_anchor_rewrites_the_prompt_after_the_tool_list(pre):
    """Folding the added tool into `tools` (what a proxy that flattens tool_addition does) re-renders the list at the
    top: the earlier prompt survives only up to it. In place, it survives whole."""
    history = [{"role": "user", "content": "Question 0?"}]
    for i in range(4):
        history += exchange(i, "tool")
    before = pre.render(conv(history), add_generation_prompt=False).token_ids
    addition = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "mcp__github__create_issue"}}
    in_place = pre.render(conv([*history, {"role": "system", "content": [addition]}])).token_ids
    folded_tools = [t for t in TOOLS if not t.get("defer_loading")] + [tool("mcp__github__create_issue")]
    anchor = pre.render(conv(history, tools=folded_tools)).token_ids

    def shared(a, b):
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    assert shared(before, in_place) == len(before)
    assert shared(before, anchor) < len(before) // 2


def test_a_tool_search_result_loads_the_referenced_tool_after_it(pre):
    messages = [
        {"role": "user", "content": "File an issue."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {"q": "issue"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "tool_reference", "tool_name": "mcp__github__create_issue"}]}]},
    ]
    c = conv(messages)
    assert [t.name for t in c.tools] == ["Bash", "ToolSearch"]
    assert [t.name for t in c.tools_in_force()] == ["Bash", "ToolSearch", "mcp__github__create_issue"]
    text = pre.render(c).text
    assert text.index("Tool: mcp__github__create_issue") < text.index('"name": "mcp__github__create_issue"')
    # a second reference to a tool already in force adds nothing
    again = conv([*messages, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t2", "name": "ToolSearch", "input": {"q": "issue"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": [
            {"type": "tool_reference", "tool_name": "mcp__github__create_issue"}]}]}])
    assert pre.render(again).text.count('"name": "mcp__github__create_issue"') == 1


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add_ref", "add_def", "remove"]),
                              st.sampled_from(["Bash", "ToolSearch", "mcp__github__create_issue",
                                               "mcp__github__list_prs", "X"])), max_size=8))
def test_tools_in_force_follow_every_change_in_order(ops):
    expected = {"Bash", "ToolSearch"}
    messages: list[dict] = [{"role": "user", "content": "go"}]
    for i, (op, name) in enumerate(ops):
        if op == "add_ref" and name == "X":
            op = "add_def"
        block = ({"type": "tool_removal", "tool": {"type": "tool_reference", "name": name}} if op == "remove" else
                 {"type": "tool_addition", "tool": {"type": "tool_reference", "name": name}} if op == "add_ref" else
                 {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": tool(name)}})
        messages += [{"role": "system", "content": [block]}, {"role": "assistant", "content": f"ok {i}"},
                     {"role": "user", "content": "next"}]
        (expected.discard if op == "remove" else expected.add)(name)
    assert {t.name for t in conv(messages).tools_in_force()} == expected


def test_tool_changes_are_part_of_the_turn_digest():
    base = [{"role": "user", "content": "go"}]
    a = conv([*base, {"role": "system", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": tool("A")}}]}])
    b = conv([*base, {"role": "system", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": tool("B")}}]}])
    header = header_digest("s", "m", a, {}, None)
    assert chain(header, a.turns)[-1] != chain(header, b.turns)[-1]


@pytest.mark.parametrize("messages, param", [
    ([{"role": "user", "content": "go"},
      {"role": "system", "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Nope"}}]}],
     "messages.1.content.0.tool.name"),
    ([{"role": "user", "content": "go"}, {"role": "system", "content": [{"type": "tool_addition", "tool": {
        "type": "tool_definition", "definition": {"name": "web_search", "type": "web_search_20250305"}}}]}],
     "messages.1.content.0.tool.definition"),
    ([{"role": "user", "content": "go"}, {"role": "system", "content": [{"type": "tool_addition", "tool": {
        "type": "tool_definition", "definition": {"name": "NoSchema"}}}]}],
     "messages.1.content.0.tool.definition.input_schema"),
])
def test_bad_tool_changes_are_400s_naming_the_block(messages, param):
    with pytest.raises(RequestError) as e:
        conv(messages)
    assert e.value.param == param


def test_a_tool_change_outside_a_system_message_is_refused():
    with pytest.raises(RequestError) as e:
        conv([{"role": "user", "content": [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Bash"}}]}])
    assert e.value.param == "messages.0.content.0"


def test_tool_choice_may_name_a_tool_in_force_only():
    added = [{"role": "user", "content": "go"}, {"role": "system", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "mcp__github__create_issue"}}]}]
    assert conv(added, tool_choice={"type": "tool", "name": "mcp__github__create_issue"}).tool_choice.name == \
        "mcp__github__create_issue"
    with pytest.raises(RequestError):
        conv(added[:1], tool_choice={"type": "tool", "name": "mcp__github__create_issue"})


def test_change_text_lists_each_tool_in_the_function_form():
    c = conv([{"role": "user", "content": "go"}, {"role": "system", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": tool("A")}},
        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": tool("B")}}]}])
    text = tool_changes.inline(c).turns[-1].text()
    assert text.count(tool_changes.ADDED_HEADER) == 1  # consecutive additions: one list
    lines = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line)["function"]["name"] for line in lines] == ["A", "B"]

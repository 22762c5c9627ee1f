"""Anthropic-defined client tools (bash, text editor, computer, memory): offered to the model as function tools with
their documented input schemas, under the declared name; the model's calls come back as `tool_use` blocks the
harness dispatches. Server tools and dated types nothing here knows stay accepted and not offered."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.apis import anthropic
from agentserve.apis.anthropic.client_tools import CLIENT_TOOLS
from agentserve.apis.anthropic.encode import MessageEncoder
from agentserve.apis.origin import origin_after
from agentserve.parsers import StreamParser
from agentserve.protocol import NamedToolChoice, ToolCallBlock
from agentserve.protocol.events import Finish, Usage
from tests.support.keys import signing_key

DECLARED = {"bash_20250124": "bash", "text_editor_20250124": "str_replace_editor",
            "text_editor_20250429": "str_replace_based_edit_tool", "text_editor_20250728": "str_replace_based_edit_tool",
            "computer_20250124": "computer", "computer_20251124": "computer", "memory_20250818": "memory"}
USER = [{"role": "user", "content": "fix the typo in /repo/README.md"}]


def decode(body: dict):
    req = anthropic.MessagesRequest.model_validate({"model": "m", "max_tokens": 1024, "messages": USER, **body})
    return anthropic.decode(req, request_id="r", model="m", signer=None, caller="c")


def tool(kind: str, **extra) -> dict:
    return {"type": kind, "name": DECLARED.get(kind, kind.rsplit("_", 1)[0]), **extra}


@pytest.mark.parametrize("kind", sorted(CLIENT_TOOLS))
def test_each_client_tool_is_offered_under_its_name_with_a_valid_schema(kind):
    gen = decode({"tools": [tool(kind)]})
    (spec,) = gen.conversation.tools
    assert spec.name == tool(kind)["name"] and spec.description
    jsonschema.Draft202012Validator.check_schema(spec.parameters)
    assert spec.parameters["type"] == "object" and gen.conversation.tool_choice == "auto"


def test_editor_versions_computer_screen_and_memory_commands():
    tools = {t.name: t for t in decode({"tools": [
        tool("text_editor_20250728", max_characters=10000), tool("bash_20250124"),
        tool("computer_20251124", display_width_px=1280, display_height_px=800, enable_zoom=True),
        tool("memory_20250818")]}).conversation.tools}
    commands = tools["str_replace_based_edit_tool"].parameters["properties"]["command"]["enum"]
    assert commands == ["view", "create", "str_replace", "insert"]  # the 2025-07-28 editor has no undo_edit
    old = decode({"tools": [tool("text_editor_20250124")]}).conversation.tools[0]
    assert "undo_edit" in old.parameters["properties"]["command"]["enum"]
    assert "1280x800 pixels" in tools["computer"].description
    assert "zoom" in tools["computer"].parameters["properties"]["action"]["enum"]
    assert set(tools["memory"].parameters["properties"]["command"]["enum"]) == {
        "view", "create", "str_replace", "insert", "delete", "rename"}
    assert tools["bash"].parameters["properties"]["command"]["type"] == "string"


def test_server_tools_and_unknown_types_are_still_not_offered_and_never_a_400():
    gen = decode({"tools": [tool("bash_20250124"), {"type": "web_search_20250305", "name": "web_search"},
                            {"type": "hologram_20991231", "name": "hologram"}]})
    assert [t.name for t in gen.conversation.tools] == ["bash"]
    forced = decode({"tools": [tool("text_editor_20250728")],
                     "tool_choice": {"type": "tool", "name": "str_replace_based_edit_tool"}})
    assert forced.conversation.tool_choice == NamedToolChoice(name="str_replace_based_edit_tool")


def test_a_replayed_call_and_its_result_decode_as_any_tools():
    gen = decode({"tools": [tool("bash_20250124")], "messages": [*USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "cat /repo/README.md"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "helo"}]}]})
    (call,) = [b for t in gen.conversation.turns for b in t.blocks if isinstance(b, ToolCallBlock)]
    assert call.name == "bash" and json.loads(call.arguments) == {"command": "cat /repo/README.md"}


def _served_call(kind: str, arguments: dict) -> dict:
    """The model's hermes-format call, parsed with the request's tools and encoded as the reply's tool_use."""
    gen = decode({"tools": [tool(kind)]})
    parser = StreamParser(tool_calls="hermes", tools=[t.openai_schema() for t in gen.conversation.tools])
    name = gen.conversation.tools[0].name
    text = '<tool_call>\n' + json.dumps({"name": name, "arguments": arguments}) + '\n</tool_call>'
    events = [*parser.feed(text), *parser.finish()]
    enc = MessageEncoder(message_id="msg_1", model="m", prompt_tokens=10,
                         signer=anthropic.ThinkingSigner(signing_key("unit")), origin=origin_after("c", ()))
    enc.frames([*events, Usage(10, 5, 0), Finish("stop")])
    msg = enc.message()
    assert msg["stop_reason"] == "tool_use"
    (block,) = msg["content"]
    return block


_text = st.text(min_size=0, max_size=40)
EDITS = st.one_of(
    st.fixed_dictionaries({"command": st.just("view"), "path": _text},
                          optional={"view_range": st.tuples(st.integers(1, 999), st.integers(-1, 999)).map(list)}),
    st.fixed_dictionaries({"command": st.just("str_replace"), "path": _text, "old_str": _text, "new_str": _text}),
    st.fixed_dictionaries({"command": st.just("create"), "path": _text, "file_text": _text}),
    st.fixed_dictionaries({"command": st.just("insert"), "path": _text, "insert_line": st.integers(0, 10_000),
                           "new_str": _text}),
)


@settings(max_examples=60, deadline=None)
@given(EDITS)
def test_any_editor_call_comes_back_as_a_tool_use_with_the_declared_name_and_its_input(arguments):
    block = _served_call("text_editor_20250728", arguments)
    assert block["type"] == "tool_use" and block["name"] == "str_replace_based_edit_tool"
    assert block["input"] == arguments and block["id"]
    jsonschema.validate(arguments, CLIENT_TOOLS["text_editor_20250728"].input_schema)


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1, max_size=80))
def test_any_bash_command_comes_back_whole(command):
    block = _served_call("bash_20250124", {"command": command})
    assert block["name"] == "bash" and block["input"] == {"command": command}

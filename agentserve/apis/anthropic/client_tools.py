"""Anthropic-defined client tools (`bash_…`, `text_editor_…`, `computer_…`, `memory_…`): the harness runs them, so
the model is offered them, as function tools.

Their definitions carry a dated `type`, a fixed `name` and no `input_schema`: Anthropic's API knows each type's
input. Here that knowledge is the table below, one entry per type, with the input schemas Anthropic documents
(tool-use docs: bash tool, text editor tool, computer use tool, memory tool) and a description of our own (the
ones Anthropic's models see are not published). The model calls them by the declared name, so a call parses back to
a `tool_use` block the harness dispatches as it would Anthropic's. A dated type not in the table is treated as a
server tool (apis/anthropic/server_tools.py): accepted, not offered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentserve.apis.anthropic.schema import ToolParam
from agentserve.protocol import ToolSpec


def _object(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_POINT = {"type": "array", "items": _INT, "minItems": 2, "maxItems": 2, "description": "(x, y) pixel coordinate"}
_VIEW_RANGE = {"type": "array", "items": _INT, "minItems": 2, "maxItems": 2,
               "description": "[start, end] line numbers, 1-indexed; end -1 reads to the end of the file"}


def _bash() -> dict[str, Any]:
    return _object([], command={**_STR, "description": "The bash command to run (required unless restarting)."},
                   restart={"type": "boolean", "description": "Restart the bash session."})


def _editor(commands: list[str]) -> dict[str, Any]:
    return _object(
        ["command", "path"],
        command={"type": "string", "enum": commands, "description": "The command to run."},
        path={**_STR, "description": "Absolute path to the file or directory."},
        view_range={**_VIEW_RANGE, "description": "view: " + _VIEW_RANGE["description"]},
        old_str={**_STR, "description": "str_replace: the exact text to replace (must occur once)."},
        new_str={**_STR, "description": "str_replace: the replacement; insert: the text to insert."},
        file_text={**_STR, "description": "create: the new file's content."},
        insert_line={**_INT, "description": "insert: the line after which to insert (0: the top of the file)."},
    )


_ACTIONS_2024 = ["key", "type", "mouse_move", "left_click", "left_click_drag", "right_click", "middle_click",
                 "double_click", "screenshot", "cursor_position"]
_ACTIONS_2025 = [*_ACTIONS_2024, "hold_key", "left_mouse_down", "left_mouse_up", "triple_click", "scroll", "wait"]


def _computer(*, extended: bool, zoom: bool = False) -> dict[str, Any]:
    """The 2024 action set; `extended` (2025 on): scrolling, holding, dragging from a point, waiting; `zoom`
    (2025-11-24): viewing a region at full size."""
    actions = _ACTIONS_2025 if extended else _ACTIONS_2024
    properties: dict[str, Any] = {
        "action": {"type": "string", "enum": [*actions, *(["zoom"] if zoom else [])]},
        "coordinate": _POINT,
        "text": {**_STR, "description": "key / hold_key: xdotool key syntax (e.g. ctrl+s); type: the text."},
    }
    if extended:
        properties.update(
            start_coordinate={**_POINT, "description": "left_click_drag: where the drag starts"},
            scroll_direction={"type": "string", "enum": ["up", "down", "left", "right"]},
            scroll_amount={**_INT, "description": "scroll: how many wheel clicks"},
            duration={"type": "number", "description": "hold_key / wait: seconds"},
        )
    if zoom:
        properties["region"] = {"type": "array", "items": _INT, "minItems": 4, "maxItems": 4,
                                "description": "zoom: [x1, y1, x2, y2], the screen region to view at full size"}
    return {"type": "object", "properties": properties, "required": ["action"]}


def _memory() -> dict[str, Any]:
    return _object(
        ["command"],
        command={"type": "string", "enum": ["view", "create", "str_replace", "insert", "delete", "rename"]},
        path={**_STR, "description": "A path under /memories."},
        view_range=_VIEW_RANGE,
        file_text={**_STR, "description": "create: the file's content."},
        old_str={**_STR, "description": "str_replace: the exact text to replace (must occur once)."},
        new_str={**_STR, "description": "str_replace: the replacement."},
        insert_line={**_INT, "description": "insert: the line after which to insert (0: the top)."},
        insert_text={**_STR, "description": "insert: the text to insert."},
        old_path={**_STR, "description": "rename: the current path."},
        new_path={**_STR, "description": "rename: the new path."},
    )


@dataclass(frozen=True, slots=True)
class ClientTool:
    description: str
    input_schema: dict[str, Any]


_BASH = ClientTool("Run a command in a persistent bash shell and return its output.", _bash())
_EDITOR_DESC = ("View, create and edit text files: view shows a file with line numbers (or lists a directory), "
                "create writes a new file, str_replace replaces one exact occurrence, insert adds text after a line")
_COMPUTER_DESC = ("Control the computer's screen, mouse and keyboard; take a screenshot to see the result of an "
                  "action.")

# The table: every Anthropic-defined client tool type served here.
CLIENT_TOOLS: dict[str, ClientTool] = {
    "bash_20241022": _BASH,
    "bash_20250124": _BASH,
    "text_editor_20241022": ClientTool(_EDITOR_DESC + ", undo_edit reverts the last edit.",
                                       _editor(["view", "create", "str_replace", "insert", "undo_edit"])),
    "text_editor_20250124": ClientTool(_EDITOR_DESC + ", undo_edit reverts the last edit.",
                                       _editor(["view", "create", "str_replace", "insert", "undo_edit"])),
    "text_editor_20250429": ClientTool(_EDITOR_DESC + ".", _editor(["view", "create", "str_replace", "insert"])),
    "text_editor_20250728": ClientTool(_EDITOR_DESC + ".", _editor(["view", "create", "str_replace", "insert"])),
    "computer_20241022": ClientTool(_COMPUTER_DESC, _computer(extended=False)),
    "computer_20250124": ClientTool(_COMPUTER_DESC, _computer(extended=True)),
    "computer_20251124": ClientTool(_COMPUTER_DESC, _computer(extended=True, zoom=True)),
    "memory_20250818": ClientTool("Read and write files in your memory directory, /memories, which persists "
                                  "across conversations: view, create, str_replace, insert, delete, rename.",
                                  _memory()),
}


def is_client_tool(tool: ToolParam) -> bool:
    return tool.type in CLIENT_TOOLS


def client_tool_spec(tool: ToolParam) -> ToolSpec:
    """The function tool the model is offered for an Anthropic-defined client tool, under its declared name."""
    entry = CLIENT_TOOLS[tool.type or ""]
    description = entry.description
    extra = tool.model_extra or {}
    width, height = extra.get("display_width_px"), extra.get("display_height_px")
    if isinstance(width, int) and isinstance(height, int):  # computer use: the screen the coordinates are in
        description += f" The screen is {width}x{height} pixels."
    return ToolSpec(name=tool.name, description=description, parameters=entry.input_schema)

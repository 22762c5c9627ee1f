"""Anthropic's server tools (web_search, web_fetch, code_execution, tool search, ...): Anthropic's API runs them;
nothing here can.

Their definitions carry a dated `type` and no `input_schema`: they are accepted and not offered to the model, and a
`tool_choice` that forces one lets the model answer in text instead (a 400 would end the harness's flow, e.g. Claude
Code's WebSearch sub-request). A conversation that began on Anthropic's API carries their calls and results in its
assistant turns (`server_tool_use`, `*_tool_result`); they stay in the history as text, so the model keeps what it
learned from them, without the opaque `encrypted_content`.
"""

from __future__ import annotations

import json
from typing import Any

from agentserve.apis.anthropic.client_tools import is_client_tool
from agentserve.apis.anthropic.schema import ServerToolResultParam, ServerToolUseParam, ToolParam


def is_server_tool(tool: ToolParam) -> bool:
    """A dated type that is not an Anthropic-defined client tool (apis/anthropic/client_tools.py): web_search_…,
    and any type nothing here knows."""
    return tool.type not in (None, "custom") and not is_client_tool(tool)


def call_text(block: ServerToolUseParam) -> str:
    return f"[{block.name} {json.dumps(block.input, ensure_ascii=False, sort_keys=True)}]"


def result_text(block: ServerToolResultParam) -> str:
    """What the result told the model: search hits, a fetched page's text, a program's output, or the error."""
    content = block.content
    name = block.type.removesuffix("_tool_result")
    items = content if isinstance(content, list) else [content]
    lines = [line for item in items if isinstance(item, dict) for line in _item_lines(item)]
    return f"[{name} result]\n" + "\n".join(lines) if lines else f"[{name} result: empty]"


def referenced_tools(block: ServerToolResultParam) -> list[str]:
    """Tool names a server-side tool search returned (they come into force after it)."""
    return _references(block.content) if isinstance(block.content, dict) else []


def _item_lines(item: dict[str, Any]) -> list[str]:
    if isinstance(item.get("error_code"), str):
        return [f"error: {item['error_code']}"]
    if item.get("type") == "web_search_result":
        return [f"- {item.get('title') or ''} <{item.get('url') or ''}>"]
    if item.get("type") == "web_fetch_result":
        doc = item.get("content") if isinstance(item.get("content"), dict) else {}
        src = doc.get("source") if isinstance(doc.get("source"), dict) else {}
        text = src.get("data") if src.get("type") == "text" and isinstance(src.get("data"), str) else ""
        return [f"fetched <{item.get('url') or ''}>", *([text] if text else [])]
    if isinstance(item.get("tool_references"), list):
        return [f"Tool: {name}" for name in _references(item)]
    lines = [f"{key}: {item[key]}" for key in ("stdout", "stderr") if isinstance(item.get(key), str) and item[key]]
    if isinstance(item.get("return_code"), int):
        lines.append(f"return code: {item['return_code']}")
    return lines


def _references(item: dict[str, Any]) -> list[str]:
    refs = item.get("tool_references")
    if not isinstance(refs, list):
        return []
    return [r["tool_name"] for r in refs if isinstance(r, dict) and isinstance(r.get("tool_name"), str)]

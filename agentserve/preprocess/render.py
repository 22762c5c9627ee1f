"""Conversation -> the message dicts chat templates read (OpenAI shape plus `reasoning_content`)."""

from __future__ import annotations

from typing import Any

from agentserve.protocol import (
    Conversation,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    Turn,
)
from agentserve.protocol.errors import RequestError


def _assistant_message(turn: Turn) -> dict[str, Any]:
    text = "".join(b.text for b in turn.blocks if isinstance(b, TextBlock))
    reasoning = "\n".join(b.text for b in turn.blocks if isinstance(b, ReasoningBlock))
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": b.arguments}}
        for b in turn.blocks
        if isinstance(b, ToolCallBlock)
    ]
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = calls
    return msg


def template_messages(conversation: Conversation) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in conversation.turns:
        if turn.role == "assistant":
            messages.append(_assistant_message(turn))
            continue
        text_parts: list[str] = []
        for block in turn.blocks:
            if isinstance(block, ToolResultBlock):
                messages.append(
                    {"role": "tool", "tool_call_id": block.tool_call_id, "content": block.content}
                )
            elif isinstance(block, TextBlock):
                text_parts.append(block.text)
            elif isinstance(block, ImageBlock):
                raise RequestError(
                    "invalid_request", "this model does not accept image input", param="messages"
                )
        only_tool_results = turn.blocks and all(isinstance(b, ToolResultBlock) for b in turn.blocks)
        if not only_tool_results:
            role = "user" if turn.role == "tool" else turn.role
            messages.append({"role": role, "content": "".join(text_parts)})
    return messages

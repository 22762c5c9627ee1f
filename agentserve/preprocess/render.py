"""Conversation -> the message dicts chat templates read (OpenAI shape plus `reasoning_content`).

An assistant turn is rendered from its typed blocks so that it reads as the model produced it:
- the template reads `reasoning_content`: reasoning goes there (per tool call when the template
  takes it per call), and the template decides how much prior thinking to keep;
- it does not: the family's replay policy keeps reasoning in the model's own text form, in place
  before the text it preceded, or drops it.
A turn whose reasoning came after one of its tool calls cannot be put back in order through one
`reasoning_content` field; such turns are counted (`reordered_turns`) so the loss is visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentserve.preprocess.replay import ReplayPolicy
from agentserve.preprocess.template_caps import TemplateCaps
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


@dataclass(frozen=True)
class RenderPlan:
    messages: list[dict[str, Any]]
    reordered_turns: int  # assistant turns whose interleaving one reasoning field could not keep


def _call(b: ToolCallBlock) -> dict[str, Any]:
    return {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": b.arguments}}


def _interleaved(turn: Turn) -> bool:
    seen_call = False
    for b in turn.blocks:
        if isinstance(b, ToolCallBlock):
            seen_call = True
        elif isinstance(b, ReasoningBlock) and seen_call:
            return True
    return False


def _assistant(turn: Turn, policy: ReplayPolicy, caps: TemplateCaps) -> tuple[dict[str, Any], bool]:
    calls = [b for b in turn.blocks if isinstance(b, ToolCallBlock)]
    msg: dict[str, Any] = {"role": "assistant"}
    reordered = False
    if caps.reads_reasoning_content:
        if caps.reasoning_per_call and calls:
            # Reasoning before the first call is the message's; later spans belong to the call they precede.
            head: list[str] = []
            pending: list[str] = []
            rendered_calls = []
            for b in turn.blocks:
                if isinstance(b, ReasoningBlock):
                    (pending if rendered_calls or head else head).append(b.text)
                elif isinstance(b, ToolCallBlock):
                    call = _call(b)
                    if rendered_calls and pending:
                        call["reasoning_content"] = "\n".join(pending)
                        pending = []
                    rendered_calls.append(call)
            reasoning = "\n".join(head)
            msg["tool_calls"] = rendered_calls
        else:
            reasoning = "\n".join(b.text for b in turn.blocks if isinstance(b, ReasoningBlock))
            reordered = _interleaved(turn)
            if calls:
                msg["tool_calls"] = [_call(b) for b in calls]
        msg["content"] = "".join(b.text for b in turn.blocks if isinstance(b, TextBlock))
        if reasoning:
            msg["reasoning_content"] = reasoning
        return msg, reordered
    keep = (policy.tool_turns if calls else policy.plain_turns) == "keep"
    parts: list[str] = []
    for b in turn.blocks:
        if isinstance(b, ReasoningBlock) and keep and b.text.strip("\n"):
            parts.append(policy.think_open + b.text.strip("\n") + policy.think_close)
        elif isinstance(b, TextBlock):
            parts.append(b.text)
    msg["content"] = "".join(parts)
    if calls:
        msg["tool_calls"] = [_call(b) for b in calls]
        reordered = keep and _interleaved(turn)
    return msg, reordered


def plan_messages(conversation: Conversation, policy: ReplayPolicy, caps: TemplateCaps) -> RenderPlan:
    messages: list[dict[str, Any]] = []
    reordered = 0
    for turn in conversation.turns:
        if turn.role == "assistant":
            msg, lost = _assistant(turn, policy, caps)
            messages.append(msg)
            reordered += lost
            continue
        text_parts: list[str] = []
        for block in turn.blocks:
            if isinstance(block, ToolResultBlock):
                content = block.content
                if block.is_error and not content.lower().startswith("error"):
                    content = f"Error: {content}"  # the model must see that the call failed
                messages.append({"role": "tool", "tool_call_id": block.tool_call_id, "content": content})
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
    return RenderPlan(messages, reordered)

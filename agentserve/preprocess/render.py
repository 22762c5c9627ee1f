"""Conversation -> the message dicts chat templates read (OpenAI shape plus `reasoning_content`).

An assistant turn is rendered from its typed blocks so that it reads as the model produced it:
- the template reads `reasoning_content`: reasoning goes there (per tool call when the template
  takes it per call), and the template decides how much prior thinking to keep;
- it does not: the family's replay policy keeps reasoning in the model's own text form, in place
  before the text it preceded, or drops it.
A turn whose reasoning came after one of its tool calls cannot be put back in order through one
`reasoning_content` field; such turns are counted (`reordered_turns`) so the loss is visible.
What the template's source says (TemplateCaps) also decides the field reasoning goes in (`thinking` for
gpt-oss), whether each call gets its own message (templates that render only `tool_calls[0]`), and whether
arguments go in as JSON text (rendered verbatim) or as a mapping (templates that iterate or tojson them).
"""

from __future__ import annotations

import json
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
    # Per conversation turn, the messages [start, end) it became (an assistant turn may become several).
    turn_spans: tuple[tuple[int, int], ...] = ()


def _call(b: ToolCallBlock, caps: TemplateCaps) -> dict[str, Any]:
    arguments: Any = b.arguments
    if caps.arguments_as_mapping:
        try:
            parsed = json.loads(b.arguments or "{}")
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            arguments = parsed
    return {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": arguments}}


def _per_call_turns(turn: Turn) -> list[Turn]:
    """One assistant turn per tool call (each with the blocks since the previous call), then any rest."""
    turns: list[Turn] = []
    pending: list[Any] = []
    for b in turn.blocks:
        pending.append(b)
        if isinstance(b, ToolCallBlock):
            turns.append(Turn(role="assistant", blocks=tuple(pending)))
            pending = []
    if pending:
        turns.append(Turn(role="assistant", blocks=tuple(pending)))
    return turns


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
            rendered_calls: list[dict[str, Any]] = []
            for b in turn.blocks:
                if isinstance(b, ReasoningBlock):
                    (pending if rendered_calls else head).append(b.text)
                elif isinstance(b, ToolCallBlock):
                    call = _call(b, caps)
                    if pending:
                        call[caps.reasoning_field] = "\n".join(pending).strip("\n")
                        pending = []
                    rendered_calls.append(call)
            reasoning = "\n".join(head)
            msg["tool_calls"] = rendered_calls
            reordered = bool(pending)  # reasoning after the last call has no place to go
        else:
            reasoning = "\n".join(b.text for b in turn.blocks if isinstance(b, ReasoningBlock))
            reordered = _interleaved(turn)
            if calls:
                msg["tool_calls"] = [_call(b, caps) for b in calls]
        msg["content"] = "".join(b.text for b in turn.blocks if isinstance(b, TextBlock))
        # Framing newlines are the template's (as in the text-form path below): templates write
        # "<think>\n" + reasoning + "\n</think>" and the parser's text may still carry them.
        reasoning = reasoning.strip("\n")
        if reasoning:
            msg[caps.reasoning_field] = reasoning
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
        msg["tool_calls"] = [_call(b, caps) for b in calls]
        reordered = keep and _interleaved(turn)
    return msg, reordered


def plan_messages(conversation: Conversation, policy: ReplayPolicy, caps: TemplateCaps) -> RenderPlan:
    messages: list[dict[str, Any]] = []
    reordered = 0
    spans: list[tuple[int, int]] = []
    for turn in conversation.turns:
        spans.append((len(messages), len(messages)))
        if turn.role == "assistant":
            calls = sum(isinstance(b, ToolCallBlock) for b in turn.blocks)
            parts = _per_call_turns(turn) if caps.one_call_per_message and calls > 1 else [turn]
            lost = False
            for part in parts:
                msg, part_lost = _assistant(part, policy, caps)
                messages.append(msg)
                lost = lost or part_lost
            reordered += lost
            spans[-1] = (spans[-1][0], len(messages))
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
        spans[-1] = (spans[-1][0], len(messages))
    return RenderPlan(messages, reordered, tuple(spans))

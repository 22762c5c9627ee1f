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
A vision model's images are rendered as its template's image placeholder where they stood (one after a tool result
inside that result), and listed in the order the prompt holds them: the engine reads the i-th for the i-th
(preprocess/images.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentserve.preprocess.placement import Placement
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
    images: tuple[str, ...] = ()  # the images' URLs in the order of their placeholders in the prompt


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


def _merge_system(messages: list[dict[str, Any]], text: str, pending: list[str], next_turn: Turn | None) -> None:
    """A later system message the template does not take in place: into the message before it; after an assistant
    turn, into the user or tool turn that follows, else a user message of its own. Each choice depends only on
    its neighbours, so every later turn of the session renders it the same."""
    if messages and messages[-1]["role"] != "assistant":
        before = messages[-1]
        before["content"] = f"{before['content']}\n\n{text}" if before.get("content") else text
    elif next_turn is not None and next_turn.role in ("user", "tool"):
        pending.append(text)
    else:
        messages.append({"role": "user", "content": text})


def _fold_images(blocks: tuple[Any, ...], placeholder: str | None) -> tuple[list[Any], list[str], list[str]]:
    """A user or tool turn's blocks with each image as its placeholder: inside the tool result it follows, else a
    text block where it stood; and the images of results and of text apart (results render first)."""
    out: list[Any] = []
    in_results: list[str] = []
    in_text: list[str] = []
    for b in blocks:
        if not isinstance(b, ImageBlock):
            out.append(b)
            continue
        if placeholder is None:  # the decoders refuse images for such a model; never rendered as nothing
            raise RequestError("invalid_request", "this model does not accept image input", param="messages")
        if out and isinstance(out[-1], ToolResultBlock):
            out[-1] = out[-1].model_copy(update={"content": out[-1].content + placeholder})
            in_results.append(b.url)
        else:
            out.append(TextBlock(text=placeholder))
            in_text.append(b.url)
    return out, in_results, in_text


def plan_messages(
    conversation: Conversation,
    policy: ReplayPolicy,
    caps: TemplateCaps,
    placement: Placement = Placement(),
    image_placeholder: str | None = None,
) -> RenderPlan:
    """Messages for the template; `placement` is where the template accepts later system messages and text sent
    beside tool results (preprocess/placement.py probes it); `image_placeholder` what the template renders for an
    image (None: the model reads none)."""
    messages: list[dict[str, Any]] = []
    images: list[str] = []
    reordered = 0
    spans: list[tuple[int, int]] = []
    pending: list[str] = []  # merged system text waiting for the next non-assistant message
    for i, turn in enumerate(conversation.turns):
        spans.append((len(messages), len(messages)))
        if turn.role == "system" and i > 0 and not placement.system_in_place:
            following = conversation.turns[i + 1] if i + 1 < len(conversation.turns) else None
            _merge_system(messages, turn.text(), pending, following)
            spans[-1] = (spans[-1][0], len(messages))
            continue
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
        results: list[str] = []  # templates without a tool role: the results go in one user message
        blocks, result_images, text_images = _fold_images(turn.blocks, image_placeholder)
        images.extend(result_images + text_images)
        for block in blocks:
            if isinstance(block, ToolResultBlock):
                content = block.content
                if block.is_error and not content.lower().startswith("error"):
                    content = f"Error: {content}"  # the model must see that the call failed
                if placement.tool_role:
                    messages.append({"role": "tool", "tool_call_id": block.tool_call_id, "content": content})
                else:
                    results.append(f"<tool_response>\n{content}\n</tool_response>")
            elif isinstance(block, TextBlock):
                text_parts.append(block.text)
        first = spans[-1][0]
        if results:
            messages.append({"role": "user", "content": "\n".join(results)})
        if pending and len(messages) > first:
            messages[first]["content"] = "\n\n".join([*pending, messages[first]["content"]])
            pending = []
        only_tool_results = blocks and all(isinstance(b, ToolResultBlock) for b in blocks)
        text = "".join(text_parts)
        if text and len(messages) > first and (placement.text_with_results or not placement.tool_role):
            # Beside tool results, not a new user query: as its own user message a template that keeps only the
            # reasoning after the last query would drop the current loop's (and one without a tool role would
            # see two user messages in a row).
            messages[-1]["content"] = f"{messages[-1]['content']}\n\n{text}"
        elif not only_tool_results:
            role = "user" if turn.role == "tool" else turn.role
            content = "\n\n".join([*pending, text]) if pending else text
            pending = []
            messages.append({"role": role, "content": content})
        spans[-1] = (spans[-1][0], len(messages))
    return RenderPlan(messages, reordered, tuple(spans), tuple(images))

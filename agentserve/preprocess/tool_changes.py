"""Tool changes rendered where they stand: a tool added at turn N is text of the system turn at N, never a new entry in
the template's tool list at the top, so every token before turn N renders as it did and stays cached.

A chat template lists tools only at the top (`tools=`). Re-listing them there on each change (what a proxy that
folds `tool_addition` into `tools` does) rewrites the prompt from the system prompt on: the engine's prefix cache
keeps only the part before the list. Here the change is a system turn in place, placed like any later system
message (preprocess/placement.py: in place where the template renders it there without touching earlier turns,
else merged into its neighbour), and its text names each added tool in the JSON function form that templates
print in their own tool lists; the tool-call parser and the constraints know it from there on
(`Conversation.tools_in_force`).
"""

from __future__ import annotations

import json

from agentserve.protocol import Conversation, TextBlock, ToolChangeBlock, Turn

ADDED_HEADER = "Tools now available (call them as the tools listed before):"
REMOVED_HEADER = "Tools no longer available (do not call them):"


def change_text(change: ToolChangeBlock) -> str:
    parts: list[str] = []
    if change.added:
        specs = "\n".join(json.dumps(t.openai_schema(), ensure_ascii=False) for t in change.added)
        parts.append(f"{ADDED_HEADER}\n<tools>\n{specs}\n</tools>")
    if change.removed:
        parts.append(f"{REMOVED_HEADER} {', '.join(change.removed)}")
    return "\n".join(parts)


def _inline(turn: Turn) -> Turn:
    texts = [change_text(b) if isinstance(b, ToolChangeBlock) else b.text for b in turn.blocks
             if isinstance(b, (TextBlock, ToolChangeBlock))]
    text = "\n\n".join(t for t in texts if t)
    return Turn(role=turn.role, blocks=(TextBlock(text=text),) if text else ())


def inline(conversation: Conversation) -> Conversation:
    """The conversation with each tool change as text of its system turn (the same object when it has none)."""
    if not any(isinstance(b, ToolChangeBlock) for t in conversation.turns if t.role == "system" for b in t.blocks):
        return conversation
    turns = tuple(
        _inline(t) if t.role == "system" and any(isinstance(b, ToolChangeBlock) for b in t.blocks) else t
        for t in conversation.turns
    )
    return conversation.model_copy(update={"turns": turns})

"""Optional normalizations that remove known cache-busters before rendering. Off by default: they change what
the model sees (tool order), so a deployment opts in after measuring (`agentserve bench normalize`)."""

from __future__ import annotations

from agentserve.protocol import Conversation


def sort_tools(conversation: Conversation) -> Conversation:
    """Tools in name order: a harness that lists the same tools in a different order each turn keeps its prefix."""
    ordered = tuple(sorted(conversation.tools, key=lambda t: t.name))
    if ordered == conversation.tools:
        return conversation
    return conversation.model_copy(update={"tools": ordered})

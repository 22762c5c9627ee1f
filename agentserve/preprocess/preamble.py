"""Removing Claude Code's billing preamble from system prompts, so new sessions share a cached prefix.

Claude Code puts a line `x-anthropic-billing-header: cc_version=...; cc_entrypoint=...; cch=<nonce>;` at the
top of its system prompt (as its own block, or as the first line of one). It changes per session (per request
before v2.1.181) and sits before everything else, so left in place every new session re-prefills the whole
prompt. api.anthropic.com strips it; so do we, before tokenizing, for generation and count_tokens alike.
Unlike a first-line-only check, any such line in any system turn is removed (a header elsewhere, or in a
mid-conversation system message, busts the cache from that point on just the same).
"""

from __future__ import annotations

import re

from agentserve.protocol import Conversation, TextBlock, Turn

_LINE = re.compile(r"^[ \t]*x-anthropic-billing-header:[^\n]*(?:\n|$)", re.IGNORECASE | re.MULTILINE)


def strip_billing_lines(text: str) -> str:
    return _LINE.sub("", text)


def strip_anthropic_preamble(conversation: Conversation) -> tuple[Conversation, bool]:
    """The conversation without billing-header lines in its system turns, and whether any was found."""
    stripped = False
    turns: list[Turn] = []
    for turn in conversation.turns:
        if turn.role != "system" or not any(
            isinstance(b, TextBlock) and "billing-header" in b.text.lower() for b in turn.blocks
        ):
            turns.append(turn)
            continue
        blocks = []
        for b in turn.blocks:
            if isinstance(b, TextBlock):
                text = strip_billing_lines(b.text)
                stripped = stripped or text != b.text
                if text:
                    blocks.append(TextBlock(text=text))
            else:
                blocks.append(b)
        if blocks:
            turns.append(Turn(role=turn.role, blocks=tuple(blocks)))
    if not stripped:
        return conversation, False
    return conversation.model_copy(update={"turns": tuple(turns)}), True

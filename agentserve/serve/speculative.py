"""Speculative prefill: after a turn, prefill the prefix the next turn will start with, on the same replica.

Dynamo replays only the text content; an agent turn is mostly reasoning and tool calls, so here the
assistant turn is rebuilt from the streamed events (reasoning, text and tool calls, in order, with the
ids the client saw) and rendered through the same template and replay policy as the next request
will be. The next request then finds that prefix warm. Pure functions; the pipeline runs them.
"""

from __future__ import annotations

from typing import Any, Iterable

from agentserve.preprocess.block_hash import block_hashes
from agentserve.protocol import (
    AgentHints,
    Conversation,
    PreprocessedRequest,
    ReasoningBlock,
    SamplingParams,
    TextBlock,
    ToolCallBlock,
    Turn,
)
from agentserve.protocol.events import ReasoningDelta, TextDelta, ToolCallEnd, ToolCallStart


class TurnCollector:
    """Rebuilds the assistant turn from StreamEvents as they pass."""

    def __init__(self) -> None:
        self._blocks: list[Any] = []
        self._calls: dict[int, tuple[str, str]] = {}

    def feed(self, events: Iterable[Any]) -> None:
        for ev in events:
            if isinstance(ev, ReasoningDelta):
                self._append(ReasoningBlock, ev.text)
            elif isinstance(ev, TextDelta):
                self._append(TextBlock, ev.text)
            elif isinstance(ev, ToolCallStart):
                self._calls[ev.index] = (ev.id, ev.name)
            elif isinstance(ev, ToolCallEnd) and ev.index in self._calls:
                cid, name = self._calls.pop(ev.index)
                self._blocks.append(ToolCallBlock(id=cid, name=name, arguments=ev.arguments))

    def _append(self, kind: type, text: str) -> None:
        if self._blocks and type(self._blocks[-1]) is kind:
            self._blocks[-1] = kind(text=self._blocks[-1].text + text)
        elif text:
            self._blocks.append(kind(text=text))

    def turn(self) -> Turn | None:
        return Turn(role="assistant", blocks=tuple(self._blocks)) if self._blocks else None


def next_turn_prefix(conversation: Conversation, assistant: Turn) -> Conversation:
    return conversation.model_copy(update={"turns": (*conversation.turns, assistant)})


def prefill_request(
    request_id: str, model: str, token_ids: list[int], block_size: int, hints: AgentHints
) -> PreprocessedRequest:
    """A one-token request whose only job is to leave `token_ids` in the replica's prefix cache."""
    return PreprocessedRequest(
        request_id=f"{request_id}-spec",
        model=model,
        token_ids=token_ids,
        block_hashes=block_hashes(token_ids, block_size),
        sampling=SamplingParams(max_tokens=1, temperature=0.0),
        hints=hints.model_copy(update={"speculative_prefill": False, "osl": 1}),
        max_tokens=1,
    )

"""The assistant turn rebuilt from the StreamEvents sent, with the ids the client saw (kept turns, speculation)."""

from __future__ import annotations

from typing import Any, Iterable

from agentserve.protocol import ReasoningBlock, TextBlock, ToolCallBlock, Turn
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

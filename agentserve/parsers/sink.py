"""Where tool-call parsers report calls: assigns indices and ids, checks arguments, keeps the raw region text."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from .events import Event, ToolCallArgsDelta, ToolCallEnd, ToolCallError, ToolCallStart, ToolCallTruncated

__all__ = ["CallSink", "default_id"]


def default_id() -> str:
    """An OpenAI-style tool call id: `call_` and 24 hex characters."""
    return "call_" + uuid.uuid4().hex[:24]


class CallSink:
    """State of the current call region; every format drives its calls through these few methods."""

    __slots__ = ("out", "id_factory", "next_index", "index", "started", "_parts", "raw")

    def __init__(self, out: list[Event], id_factory: Callable[[], str]) -> None:
        self.out = out
        self.id_factory = id_factory
        self.next_index = 0
        self.index: int | None = None  # index of the open region, once assigned
        self.started = False  # ToolCallStart emitted for the open region
        self._parts: list[str] = []
        self.raw: list[str] = []  # model text since the last call ended

    def _take_index(self) -> int:
        if self.index is None:
            self.index = self.next_index
            self.next_index += 1
        return self.index

    def _close(self) -> None:
        self.index = None
        self.started = False
        self._parts = []
        self.raw = []

    @property
    def open(self) -> bool:
        return self.started or self.index is not None

    def start(self, name: str, call_id: str | None = None) -> None:
        """`call_id`: the model's own id for the call, where its format writes one (Kimi's header)."""
        i = self._take_index()
        self.started = True
        self.out.append(ToolCallStart(i, call_id or self.id_factory(), name))

    def args(self, fragment: str) -> None:
        if fragment and self.started:
            self._parts.append(fragment)
            self.out.append(ToolCallArgsDelta(self.index, fragment))  # type: ignore[arg-type]

    def end(self, validate: bool = True) -> None:
        """Close the call: emit ToolCallEnd, or ToolCallError when the arguments are not a JSON object."""
        if not self.started:
            self.error("tool call has no name")
            return
        args = "".join(self._parts)
        if not args:
            self.args("{}")
            args = "{}"
        if validate:
            try:
                ok = isinstance(json.loads(args), dict)
                msg = "arguments are not a JSON object"
            except ValueError as exc:
                ok, msg = False, f"arguments are not valid JSON: {exc}"
            if not ok:
                self.error(msg)
                return
        self.out.append(ToolCallEnd(self.index, args))  # type: ignore[arg-type]
        self._close()

    def error(self, message: str) -> None:
        self.out.append(ToolCallError(self._take_index(), message, "".join(self.raw)))
        self._close()

    def truncated(self) -> None:
        self.out.append(ToolCallTruncated(self._take_index(), "".join(self.raw)))
        self._close()

    def forget_raw(self) -> None:
        """Drop raw text between calls (only called when no call is open)."""
        if not self.open:
            self.raw = []

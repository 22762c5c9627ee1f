"""Where tool-call parsers report calls: assigns indices and ids, checks arguments, keeps the raw region text."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable

from .events import Event, ToolCallArgsDelta, ToolCallEnd, ToolCallError, ToolCallStart, ToolCallTruncated

__all__ = ["CallSink", "default_id", "name_error"]

# OpenAI's tool-name alphabet (letters, digits, `_`, `-`) plus `.` for namespaced names; any letter, not only ASCII.
_NAME = re.compile(r"[\w.-]+")


def name_error(name: str) -> str | None:
    """Why `name` cannot be a tool name, or None. A header the model garbled (`bad\\n</function`, `junk [`, `::`)
    must end as an error with its text given back, not as a call no tool answers to."""
    if not name:
        return "tool call has no name"
    if _NAME.fullmatch(name) is None:
        return f"invalid tool name {name[:64]!r}"
    return None


def default_id() -> str:
    """An OpenAI-style tool call id: `call_` and 24 hex characters."""
    return "call_" + uuid.uuid4().hex[:24]


class CallSink:
    """State of the current call region; every format drives its calls through these few methods."""

    __slots__ = ("out", "id_factory", "next_index", "index", "started", "_parts", "raw", "_piece")

    def __init__(self, out: list[Event], id_factory: Callable[[], str]) -> None:
        self.out = out
        self.id_factory = id_factory
        self.next_index = 0
        self.index: int | None = None  # index of the open region, once assigned
        self.started = False  # ToolCallStart emitted for the open region
        self._parts: list[str] = []
        self.raw: list[str] = []  # model text since the last call ended
        self._piece = ""  # the text the body is parsing now; raw ends with a suffix of it

    def _take_index(self) -> int:
        if self.index is None:
            self.index = self.next_index
            self.next_index += 1
        return self.index

    def _close(self, rest: str = "") -> None:
        self.index = None
        self.started = False
        self._parts = []
        self.raw = [rest] if rest else []

    def take(self, piece: str) -> None:
        """The next region text, about to be parsed (`at` in the calls below is an index into it)."""
        self.raw.append(piece)
        self._piece = piece

    def _split(self, at: int | None) -> tuple[str, str]:
        """The region's raw text up to `at` in the current piece, and the rest (the next region's start). A call
        that closes inside a delta must not take the delta's later text, or the raw would depend on chunking."""
        text = "".join(self.raw)
        if at is None:
            return text, ""
        keep = len(text) - (len(self._piece) - at)
        return text[:keep], text[keep:]

    def unread(self, n: int) -> None:
        """The last `n` characters of the region's text belong to the outer text after all."""
        if n:
            text = "".join(self.raw)
            self.raw = [text[:-n]] if len(text) > n else []

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

    def end(self, validate: bool = True, at: int | None = None) -> None:
        """Close the call: emit ToolCallEnd, or ToolCallError when the arguments are not a JSON object. `at`: where
        in the current piece the call ended, when text of the same block follows it."""
        if not self.started:
            self.error("tool call has no name", at)
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
                self.error(msg, at)
                return
        self.out.append(ToolCallEnd(self.index, args))  # type: ignore[arg-type]
        self._close(self._split(at)[1])

    def error(self, message: str, at: int | None = None) -> None:
        raw, rest = self._split(at)
        self.out.append(ToolCallError(self._take_index(), message, raw))
        self._close(rest)

    def truncated(self) -> None:
        self.out.append(ToolCallTruncated(self._take_index(), "".join(self.raw)))
        self._close()

    def forget_raw(self) -> None:
        """Drop raw text between calls (only called when no call is open)."""
        if not self.open:
            self.raw = []

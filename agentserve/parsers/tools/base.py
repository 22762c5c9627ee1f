"""The generic tool-call stage: answer text outside blocks, a format-specific `Body` inside each block.

A format is data: the markers that open a block (and optionally a character that opens a bare block, for
llama3_json and pythonic: when it is the first thing the model writes, or with `bare_after_prose` at any line start
outside code fences), all the markers it consumes, and a factory for the body that parses one block. A bare block
that turns out not to be a call (the body sets `rejected`) is answer text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..jsonscan import WS
from ..scanner import EMPTY, MarkerScanner, MarkerSet
from ..schema import ToolIndex
from ..sink import CallSink
from ..text import TextOut
from .prose import LineStarts

__all__ = ["Body", "BlockFormat", "BlockStage", "CONT", "DONE", "DONE_UNREAD"]

CONT, DONE, DONE_UNREAD = 0, 1, 2


class Body:
    """Parses one tool-call block. `markers` is the marker set of its current state."""

    markers: MarkerSet = EMPTY
    rejected: str | None = None  # set (with on_text returning an index) when the block was not a call after all

    def on_text(self, text: str) -> int | None:
        """Consume text; return None, or the index where the block ended (the rest is answer text again)."""
        raise NotImplementedError

    def on_marker(self, marker: str) -> int:
        """Consume a marker; CONT, DONE, or DONE_UNREAD (block ended, marker belongs to the outer text)."""
        raise NotImplementedError

    def finish(self) -> None:
        """The stream ended inside the block: close or report the open call."""
        raise NotImplementedError


@dataclass(frozen=True)
class BlockFormat:
    name: str
    open_markers: tuple[str, ...]
    make_body: Callable[[str, CallSink, ToolIndex], Body]  # (opening marker or bare char, sink, tools)
    bare_start: str = ""  # a character that opens a block when it is the first non-space output
    # Every marker the format consumes (open markers included): where the tokenizer has one as a special token, the
    # decode path keeps it for the parser instead of skipping it.
    markers: tuple[str, ...] = ()
    bare_after_prose: bool = False  # a bare call may also follow answer text, at a line start outside code fences


class BlockStage:
    """Answer text with embedded tool-call blocks, fed incrementally."""

    def __init__(self, fmt: BlockFormat, sink: CallSink, text: TextOut, tools: ToolIndex) -> None:
        self.fmt = fmt
        self.sink = sink
        self.text = text
        self.tools = tools
        self.scanner = MarkerScanner()
        self._open = MarkerSet(fmt.open_markers)
        self._probe = bool(fmt.bare_start)  # a bare block may still open
        self._lines = LineStarts(fmt.bare_start) if fmt.bare_after_prose else None
        self.body: Body | None = None

    @property
    def in_block(self) -> bool:
        return self.body is not None

    def _open_body(self, marker: str) -> None:
        self.text.boundary()
        self._probe = self._lines is not None
        self.body = self.fmt.make_body(marker, self.sink, self.tools)
        if marker != self.fmt.bare_start:
            self.sink.raw.append(marker)

    def _close_body(self) -> None:
        self.body = None
        if self._lines is not None:
            self._lines.resume("".join(self.sink.raw))
        self.sink.forget_raw()
        self.text.boundary()

    def _reject(self, text: str) -> None:
        """The bare block was answer text after all."""
        self._probe = self._lines is not None
        if self._lines is not None:
            self._lines.skip(text)
        self.text.emit(text)

    def _bare_at(self, t: str) -> int:
        """Where in this answer text a bare block opens, or -1."""
        if self._lines is not None:
            return self._lines.find(t)
        k = len(t) - len(t.lstrip(WS))
        if k == len(t):
            return -1
        if t[k] == self.fmt.bare_start and not self.text.emitted:
            return k
        self._probe = False  # only the first thing the model writes may be a bare call
        return -1

    def _outer_text(self, t: str, m: str | None) -> bool:
        """Handle answer text; True when a bare block opened (the text was pushed back)."""
        k = self._bare_at(t) if self._probe else -1
        if k < 0:
            self.text.emit(t)
            return False
        self.text.emit(t[:k])
        self.scanner.unread(t[k:] + (m or ""))
        self._open_body(self.fmt.bare_start)
        return True

    def feed(self, data: str, final: bool = False) -> None:
        sc = self.scanner
        if data:
            sc.push(data)
        while True:
            body = self.body
            if body is None:
                piece = sc.next(self._open, final)
                if piece is None:
                    break
                t, m = piece
                if t and self._outer_text(t, m):
                    continue
                if m:
                    self._open_body(m)
                continue
            piece = sc.next(body.markers, final)
            if piece is None:
                break
            t, m = piece
            if t:
                self.sink.take(t)
                k = body.on_text(t)
                if k is not None:
                    rest = t[k:]
                    self.sink.unread(len(rest))
                    if body.rejected is not None:
                        self.body = None
                        self.sink.forget_raw()
                        self._reject(body.rejected)
                    else:
                        self._close_body()
                    sc.unread(rest + (m or ""))
                    continue
            if m:
                self.sink.raw.append(m)
                r = body.on_marker(m)
                if r != CONT:
                    if r == DONE_UNREAD:
                        if self.sink.raw and self.sink.raw[-1] is m:
                            self.sink.raw.pop()
                        sc.unread(m)
                    self._close_body()
        if final:
            if self.body is not None:
                body, self.body = self.body, None
                body.finish()
                if body.rejected is not None:
                    self._reject(body.rejected)
            self.sink.forget_raw()

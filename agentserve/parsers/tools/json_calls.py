"""Bodies whose calls are JSON objects `{"name": ..., "arguments": {...}}` (hermes, nemotron_deci, llama3_json,
mistral pre-v11), possibly in an array or separated by `;`.

The envelope is walked character by character (it is short); the arguments value is tracked by
`JsonValueScanner` and forwarded as it arrives. When "arguments" comes before "name" it is buffered until the
name is known. Each object's `ToolCallEnd` is emitted as soon as the object closes.
"""

from __future__ import annotations

import json

from ..jsonscan import WS, JsonValueScanner
from ..scanner import EMPTY, MarkerSet
from ..sink import CallSink, name_error
from .base import CONT, DONE, Body

__all__ = ["JsonCallsBody"]

NAME_KEYS = ("name",)
ARGS_KEYS = ("arguments", "parameters")

# states
_TOP, _KEY, _KEYSTR, _COLON, _VALUE, _AFTER_VALUE, _AFTER_OBJ, _SKIP = range(8)


class JsonCallsBody(Body):
    def __init__(self, sink: CallSink, end_marker: str | None, separators: str = ",", bare: bool = False) -> None:
        self.sink = sink
        # A bare block (no marker opened it) is a call only when its first object's first key is a name key: until
        # then its text is kept, and handed back as answer text (`rejected`) on any mismatch.
        self.probe: list[str] | None = [] if bare else None
        self.end = end_marker
        self.markers = MarkerSet((end_marker,)) if end_marker else EMPTY
        self.seps = separators
        self.st = _TOP
        self.depth_array = False
        self.seen_obj = False
        self.failed: str | None = None
        self._reset_obj()

    def _reset_obj(self) -> None:
        self.name: str | None = None
        self.name_err: str | None = None  # the name is not a tool name: reported when the object closes
        self.key_parts: list[str] = []
        self.key = ""
        self.vs: JsonValueScanner | None = None
        self.val_parts: list[str] = []
        self.args_kind = ""  # '' none yet, 'c' container streamed/buffered, 's' string, 'x' scalar
        self.args_buf: list[str] = []
        self.args_done = False
        self.in_obj = False

    # -- value handling ------------------------------------------------------------------------------------
    def _value_chunk(self, seg: str) -> None:
        if self.key in ARGS_KEYS and not self.args_done:
            if not self.args_kind:
                self.args_kind = self.vs.kind  # type: ignore[union-attr]
            if self.args_kind == "c" and self.sink.started:
                self.sink.args(seg)
            else:
                self.args_buf.append(seg)
        elif self.key in NAME_KEYS:
            self.val_parts.append(seg)

    def _value_done(self) -> str | None:
        """Finish the current member value; returns an error message or None."""
        if self.key in ARGS_KEYS and not self.args_done:
            self.args_done = True
            if self.args_kind == "s":
                try:
                    inner = json.loads("".join(self.args_buf))
                    json.loads(inner)
                except (ValueError, TypeError):
                    return "arguments string is not JSON"
                self.args_buf = [inner]
                self.args_kind = "c"
            elif self.args_kind == "x":
                if "".join(self.args_buf).strip() != "null":
                    return "arguments are not a JSON object"
                self.args_buf, self.args_kind = [], "c"
            if self.sink.started and self.args_buf:
                self.sink.args("".join(self.args_buf))
                self.args_buf = []
        elif self.key in NAME_KEYS and self.name is None and self.name_err is None:
            try:
                name = json.loads("".join(self.val_parts))
            except ValueError:
                name = None
            err = "tool name is not a string" if not isinstance(name, str) else name_error(name)
            if err:  # the object is still well-formed JSON: skip it to its end, the next call may be fine
                self.name_err = err
                self.val_parts = []
                return None
            self.name = name
            self.sink.start(name)
            if self.args_buf and self.args_done:
                self.sink.args("".join(self.args_buf))
                self.args_buf = []
            elif self.args_buf:  # arguments value still arriving: flush what we have, stream the rest
                self.sink.args("".join(self.args_buf))
                self.args_buf = []
        self.val_parts = []
        return None

    def _obj_done(self, at: int) -> None:
        """The object closed at `at` in the current text; more calls of the block may follow in the same text."""
        self.in_obj = False
        if self.name is None:
            self.sink.error(self.name_err or "tool call has no name", at)
        else:
            self.sink.end(at=at)
        self._reset_obj()

    def _fail(self, msg: str) -> None:
        self.failed = msg
        self.st = _SKIP

    # -- Body interface ---------------------------------------------------------------------------------------
    def on_text(self, t: str) -> int | None:
        k = self._text(t)
        if k is None and self.probe is not None:
            self.probe.append(t)
        return k

    def _text(self, t: str) -> int | None:
        i, n = 0, len(t)
        while i < n:
            st = self.st
            if st == _SKIP:
                if self.probe is not None:  # not a call after all: answer text
                    self.rejected = "".join(self.probe) + t[:i]
                    return i
                if self.end is None:  # no closing marker: report now, the rest is text again
                    self.sink.error(self.failed or "malformed tool call", i)
                    return i
                return None
            if st == _VALUE and (self.vs.kind or t[i] not in WS):  # type: ignore[union-attr]
                j = self.vs.feed(t, i)  # type: ignore[union-attr]
                self._value_chunk(t[i:] if j < 0 else t[i:j])
                if j < 0:
                    return None
                i = j
                err = self._value_done()
                if err:
                    self._fail(err)
                    continue
                self.st = _AFTER_VALUE
                continue
            if st == _KEYSTR:
                j = self.vs.feed(t, i)  # type: ignore[union-attr]
                self.key_parts.append(t[i:] if j < 0 else t[i:j])
                if j < 0:
                    return None
                i = j
                try:
                    self.key = json.loads("".join(self.key_parts))
                except ValueError:
                    self._fail("malformed key")
                    continue
                self.key_parts = []
                if self.probe is not None:
                    if self.key not in NAME_KEYS:
                        self._fail("a bare object whose first key is not a name")
                        continue
                    self.probe = None  # `{"name":` at a line start: a call, however its name reads
                self.st = _COLON
                continue
            c = t[i]
            if c in WS:
                i += 1
                continue
            if st == _TOP or st == _AFTER_OBJ:
                if c == "{":
                    self.in_obj = True
                    self.seen_obj = True
                    self.st = _KEY
                elif c == "[" and st == _TOP and not self.depth_array and not self.seen_obj:
                    self.depth_array = True
                elif c == "]" and self.depth_array:
                    self.depth_array = False
                    self.st = _AFTER_OBJ
                    if self.end is None:
                        return i + 1
                elif c in self.seps and st == _AFTER_OBJ:
                    self.st = _TOP
                elif self.end is None and self.seen_obj:
                    return i  # trailing answer text after the calls
                else:
                    self._fail(f"unexpected {c!r} outside a tool call object")
                    continue
                i += 1
                continue
            if st == _KEY:
                if c == '"':
                    self.vs = JsonValueScanner()
                    self.st = _KEYSTR
                    continue  # the scanner consumes the quote
                if c == "}" and self.probe is not None:
                    self._fail("an empty bare object")
                    continue
                if c == "}":
                    self._obj_done(i + 1)
                    self.st = _AFTER_OBJ
                    i += 1
                    continue
                self._fail("expected a key")
                continue
            if st == _COLON:
                if c != ":":
                    self._fail("expected ':'")
                    continue
                self.vs = JsonValueScanner()
                self.st = _VALUE
                i += 1
                continue
            if st == _AFTER_VALUE:
                if c == ",":
                    self.st = _KEY
                elif c == "}":
                    self._obj_done(i + 1)
                    self.st = _AFTER_OBJ
                else:
                    self._fail("expected ',' or '}'")
                    continue
                i += 1
                continue
        return None

    def _open_region_error(self, msg: str) -> None:
        self.sink.error(msg)
        self._reset_obj()

    def on_marker(self, marker: str) -> int:
        if self.st == _SKIP:
            self.sink.error(self.failed or "malformed tool call")
        elif self.in_obj or self.st in (_KEYSTR, _VALUE, _COLON, _AFTER_VALUE):
            self._open_region_error("tool call closed before its JSON object ended")
        elif not self.seen_obj:
            self.sink.error("empty tool call")
        return DONE

    def finish(self) -> None:
        if self.probe is not None:
            self.rejected = "".join(self.probe)
            return
        if self.st == _SKIP:
            self.sink.error(self.failed or "malformed tool call")
        elif self.in_obj or not self.seen_obj:
            self.sink.truncated()

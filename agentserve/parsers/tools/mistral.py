"""Mistral `[TOOL_CALLS]` bodies: pre-v11 `[TOOL_CALLS][{"name":…,"arguments":{…}}, …]` and v11+
`[TOOL_CALLS]NAME[ARGS]{…}` (optionally `NAME[CALL_ID]ID[ARGS]{…}`), one `[TOOL_CALLS]` per call.

Neither form has a closing marker: a call ends when its JSON closes, and what follows is answer text again.
"""

from __future__ import annotations

from ..jsonscan import WS, ArgsStream
from ..scanner import MarkerSet
from ..sink import CallSink, name_error
from .base import CONT, DONE, DONE_UNREAD, Body
from .json_calls import JsonCallsBody

__all__ = ["MistralBody", "TOOL_CALLS", "ARGS", "CALL_ID"]

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"

_FIRST, _NAME, _CALLID, _ARGS_ST, _JSON, _SKIP = range(6)
_NAME_SET = MarkerSet((ARGS, CALL_ID, TOOL_CALLS))
_CALLID_SET = MarkerSet((ARGS, TOOL_CALLS))
_ARGS_SET = MarkerSet((TOOL_CALLS,))


class MistralBody(Body):
    def __init__(self, sink: CallSink) -> None:
        self.sink = sink
        self.st = _FIRST
        self.markers = _NAME_SET
        self.name_parts: list[str] = []
        self.json: JsonCallsBody | None = None
        self.failed = ""

    def _skip(self, err: str) -> None:
        """A broken call: ignore its text up to the next [TOOL_CALLS] or the end of the stream, and report it there,
        with all that text as its raw (reported where it was found, it would carry the rest of that delta only)."""
        self.st, self.markers, self.failed = _SKIP, _ARGS_SET, err

    def _start_args(self) -> bool:
        name = "".join(self.name_parts).strip()
        err = name_error(name)
        if err:
            self._skip(err)
            return False
        self.sink.start(name)
        self.st, self.markers, self.args = _ARGS_ST, _ARGS_SET, ArgsStream()
        return True

    def _feed_args(self, t: str, off: int = 0) -> int | None:
        """Arguments text from t[off:]; returns where in t the call ended, if it did."""
        frag, end = self.args.feed(t[off:] if off else t)
        self.sink.args(frag)
        if self.args.bad:
            self._skip("arguments are not a JSON object")
            return None
        if end >= 0:
            self.sink.end(at=off + end)
            return off + end
        return None

    def on_text(self, t: str) -> int | None:
        st = self.st
        if st == _FIRST:
            s = t.lstrip(WS)
            if not s:
                return None
            if s[0] in "[{":
                self.st = _JSON
                self.json = JsonCallsBody(self.sink, None)
                self.markers = _ARGS_SET
                return self._json_text(t)
            self.st = _NAME
            st = _NAME
        if st == _NAME:
            k = t.find("{")
            if k < 0:
                self.name_parts.append(t)
                return None
            self.name_parts.append(t[:k])
            if not self._start_args():
                return None
            return self._feed_args(t, k)
        if st == _ARGS_ST:
            return self._feed_args(t)
        if st == _JSON:
            return self._json_text(t)
        return None  # _CALLID: the model's own id is not used

    def _json_text(self, t: str) -> int | None:
        return self.json.on_text(t)  # type: ignore[union-attr]

    def on_marker(self, m: str) -> int:
        st = self.st
        if st == _SKIP and m != TOOL_CALLS:
            return CONT
        if st == _JSON and m != TOOL_CALLS:
            # Found by the scan that ran before the body turned out to be JSON: in JSON it is only text (inside a
            # string, or answer text after the calls), as it is when the stream is split before it.
            self.sink.raw.pop()
            self.sink.take(m)
            return CONT if self._json_text(m) is None else DONE_UNREAD
        if m == TOOL_CALLS:
            # the next call starts: whatever is open here is broken (or the call was empty)
            self.sink.unread(len(m))  # the marker is the next call's text
            if st == _SKIP:
                self.sink.error(self.failed)
            elif st == _JSON:
                self.json.on_marker(m)  # type: ignore[union-attr]
            elif st == _ARGS_ST:
                if self.args.blank:
                    self.sink.end()
                else:
                    self.sink.error("tool call ended before its arguments did")
            else:
                self.sink.error("tool call has no arguments")
            return DONE_UNREAD
        if st in (_FIRST, _NAME) and m == CALL_ID:
            self.st, self.markers = _CALLID, _CALLID_SET
            return CONT
        if st in (_FIRST, _NAME, _CALLID) and m == ARGS:
            self._start_args()
            return CONT
        return CONT

    def finish(self) -> None:
        if self.st == _JSON:
            self.json.finish()  # type: ignore[union-attr]
        elif self.st == _SKIP:
            self.sink.error(self.failed)
        elif self.st == _ARGS_ST and self.args.done:
            pass
        else:
            self.sink.truncated()

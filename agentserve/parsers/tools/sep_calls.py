"""Bodies of formats that frame each call with special tokens and put raw JSON arguments after a separator:
deepseek_v3, deepseek_v31, kimi_k2.

    deepseek_v3:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{..}\\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>
    deepseek_v31: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>
    kimi_k2:      <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{..}<|tool_call_end|>…<|tool_calls_section_end|>
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..jsonscan import ArgsStream
from ..scanner import MarkerSet
from ..sink import CallSink, name_error
from .base import CONT, DONE, Body

__all__ = ["SepFormat", "SepBody", "DEEPSEEK_V3", "DEEPSEEK_V31", "KIMI_K2"]


@dataclass(frozen=True)
class SepFormat:
    section_open: str
    section_close: str
    call_open: str
    sep: str
    call_close: str
    name_after_sep: bool  # deepseek_v3: the name is the first line after the separator
    header_name: str = ""  # regex with a `name` group applied to the header (text before the separator)
    header_is_id: bool = False  # Kimi K2: the header (`functions.NAME:IDX`) is the call's id, replayed verbatim


DEEPSEEK_V3 = SepFormat(
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    name_after_sep=True,
)
DEEPSEEK_V31 = SepFormat(
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    name_after_sep=False,
)
KIMI_K2 = SepFormat(
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>",
    name_after_sep=False, header_name=r"^\s*(?:functions\.)?(?P<name>.+?)(?::\d+)?\s*$", header_is_id=True,
)

_SECTION, _HEADER, _NAMELINE, _ARGS, _AFTER = range(5)


class SepBody(Body):
    def __init__(self, fmt: SepFormat, opened_by: str, sink: CallSink) -> None:
        self.f = fmt
        self.sink = sink
        self.in_section = opened_by == fmt.section_open
        self._sets = {
            _SECTION: MarkerSet((fmt.call_open, fmt.section_close)),
            _HEADER: MarkerSet((fmt.sep, fmt.call_close, fmt.call_open, fmt.section_close)),
            _NAMELINE: MarkerSet((fmt.call_close, fmt.call_open, fmt.section_close)),
            _ARGS: MarkerSet((fmt.call_close, fmt.call_open, fmt.section_close)),
            _AFTER: MarkerSet((fmt.call_close, fmt.call_open, fmt.section_close)),
        }
        self._name_re = re.compile(fmt.header_name) if fmt.header_name else None
        self._skipping: str | None = None  # a broken call's error, reported at its end with all its text
        self._calls = 0
        self._set(_SECTION if self.in_section else _HEADER)

    def _set(self, st: int) -> None:
        self.st = st
        self.markers = self._sets[st]
        if st in (_HEADER, _NAMELINE):
            self.head: list[str] = []
        if st == _ARGS:
            self.args = ArgsStream()

    def _start(self, raw_name: str) -> bool:
        name = raw_name.strip()
        call_id = name if self.f.header_is_id and name else None
        if self._name_re is not None:
            m = self._name_re.match(name)
            name = m.group("name").strip() if m else name
        err = name_error(name)
        if err:
            self._set_skip(err)
            return False
        self.sink.start(name, call_id)
        return True

    def _feed_args(self, t: str) -> None:
        frag, end = self.args.feed(t)
        self.sink.args(frag)
        if end >= 0 or self.args.done:
            self.st = _AFTER  # ignore the closing fence / whitespace until the call's end marker
            self.markers = self._sets[_AFTER]

    def on_text(self, t: str) -> int | None:
        st = self.st
        if st == _HEADER or st == _NAMELINE:
            self.head.append(t)
            if st == _NAMELINE and "\n" in t:
                line = "".join(self.head)
                k = line.index("\n")
                self._set(_ARGS)
                if self._start(line[:k]):
                    self._feed_args(line[k + 1 :])
        elif st == _ARGS and self.sink.started:
            self._feed_args(t)
        return None

    def _set_skip(self, err: str) -> None:
        """Ignore text up to the call's end; the error is reported there, so its raw text is the whole call whatever
        the chunking (reported where it was found, it would carry the rest of that delta only)."""
        self.st = _AFTER
        self.markers = self._sets[_AFTER]
        self._skipping = err

    def _close_call(self) -> None:
        """A call-ending marker arrived: finish the open call, or report it broken."""
        self._calls += 1
        if self.st == _NAMELINE and self._start("".join(self.head)):
            self.sink.end()
        elif self._skipping:
            self.sink.error(self._skipping)
            self._skipping = None
        elif self.st == _HEADER:
            self.sink.error("tool call has no arguments separator")
        elif self.sink.started:
            if self.args.bad:
                self.sink.error("arguments are not a JSON object")
            elif self.args.started and not self.args.done:
                self.sink.error("tool call ended before its arguments did")
            else:
                self.sink.end()

    def on_marker(self, m: str) -> int:
        f, st = self.f, self.st
        if st == _SECTION:
            if m == f.call_open:
                self._set(_HEADER)
                return CONT
            return DONE  # section close (or a stray marker) ends the block
        if st == _HEADER and m == f.sep:
            if f.name_after_sep:
                self._set(_NAMELINE)
            else:
                name = "".join(self.head)
                self._set(_ARGS)
                self._start(name)
            return CONT
        self._close_call()
        if m == f.call_open:
            self._set(_HEADER)
            return CONT
        if m == f.call_close and self.in_section:
            self._set(_SECTION)
            return CONT
        return DONE

    def finish(self) -> None:
        if self._skipping:
            self.sink.error(self._skipping)
            return
        if self.st == _SECTION:
            if not self._calls:
                self.sink.truncated()  # the section opened and the stream ended before any call
            return
        if self.st == _AFTER and self.sink.started and self.args.done:
            self.sink.end()  # the arguments are complete; only the end marker is missing
        elif self.st == _ARGS and self.sink.started and self.args.bad:
            self.sink.error("arguments are not a JSON object")
        else:
            self.sink.truncated()

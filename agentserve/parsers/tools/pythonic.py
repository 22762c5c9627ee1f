"""Pythonic tool calls: `[get_weather(city="Paris", days=3), ping()]`, bare at the start of the output or wrapped in
a format's markers (`PythonicFormat`, data):

    pythonic: <|python_start|>[f(a=1), g()]<|python_end|> (Llama 3.2 / 4), or bare
    lfm2:     <|tool_call_start|>[f(a=1)]<|tool_call_end|> (LFM2)
    olmo3:    <function_calls>f(a=1)\ng(b=true)</function_calls> (OLMo 3: one call a line, JSON literals allowed)

Keyword values are Python literals; each is converted to JSON when it completes (`{"city": "Paris"` then
`, "days": 3` then `}`). A bare `[` that does not continue as `[name(` is answer text after all.
"""

from __future__ import annotations

import ast
import json
import re

from dataclasses import dataclass

from ..jsonscan import WS
from ..scanner import EMPTY, MarkerSet
from ..sink import CallSink
from .base import DONE, Body

__all__ = ["PythonicBody", "PythonicFormat", "PY_START", "PY_END", "PYTHONIC", "LFM2", "OLMO3"]

PY_START = "<|python_start|>"
PY_END = "<|python_end|>"


@dataclass(frozen=True)
class PythonicFormat:
    start: str  # the marker that wraps a list (or a single call); a bare `[` needs none
    end: str
    lines: bool = False  # wrapped calls may follow each other on new lines, without list brackets
    json_literals: bool = False  # values may be JSON's true / false / null


PYTHONIC = PythonicFormat(PY_START, PY_END)
LFM2 = PythonicFormat("<|tool_call_start|>", "<|tool_call_end|>")
OLMO3 = PythonicFormat("<function_calls>", "</function_calls>", lines=True, json_literals=True)

_LIST, _CALL, _NAME, _KEY, _VAL, _AFTER, _DONE, _BAD, _SKIP = range(9)
_RESUME = -3  # from a state change inside `_text`: go on at `resume_at`
_IDENT = re.compile(r"[A-Za-z0-9_.\-]")
_VAL_STOP = re.compile(r"""[\\'"()\[\]{},\n]""")  # a newline ends a skipped call where calls are lines


class PythonicBody(Body):
    def __init__(self, sink: CallSink, opened_by: str, fmt: PythonicFormat = PYTHONIC) -> None:
        self.sink = sink
        self.f = fmt
        self.wrapped = opened_by == fmt.start
        self.markers = MarkerSet((fmt.end,)) if self.wrapped else EMPTY
        self.st = _LIST
        self.probe: list[str] | None = None if self.wrapped else []  # text seen before the first call commits
        self.nparams = 0
        self.tok: list[str] = []
        self.key = ""
        self.depth = 0
        self.quote = ""
        self.esc = False
        self.failed = ""
        self.gap = False  # whitespace after the name or keyword being read
        self.resume_at = 0

    def _not_a_call(self, i: int, t: str) -> int | None:
        if self.probe is not None:  # nothing committed: this was answer text
            self.rejected = "".join(self.probe) + t[:i]
            return i
        if self.st == _LIST:
            return self._bad("malformed pythonic tool call")
        return self._skip(i, "pythonic tool call with an invalid name" if self.st in (_CALL, _NAME) else
                          "pythonic tool call with a positional or malformed argument")

    def _skip(self, i: int, msg: str) -> int:
        """Ignore one broken call up to the `,` or `]` that ends it and report it there, so that the calls after it in
        the list still parse. Returns _RESUME: `on_text` goes on at `i` in the new state."""
        self.failed = msg
        self.depth, self.quote, self.esc = (1 if self.st == _KEY else 0), "", False
        self.st, self.resume_at = _SKIP, i
        return _RESUME

    def _bad(self, msg: str) -> None:
        """Ignore the rest of the block (up to <|python_end|> or end of stream) and report the broken call there, with
        all that text as its raw (reported where it was found, it would carry the rest of that delta only)."""
        self.failed = msg
        self.st = _BAD
        return None

    def _param(self) -> str | None:
        src = "".join(self.tok).strip()
        self.tok = []
        try:
            value = json.dumps(ast.literal_eval(src), ensure_ascii=False)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            value = self._json_literal(src)
            if value is None:
                return f"argument {self.key!r} is not a Python literal"
        head = "{" if self.nparams == 0 else ", "
        self.nparams += 1
        self.sink.args(f"{head}{json.dumps(self.key, ensure_ascii=False)}: {value}")
        return None

    def _json_literal(self, src: str) -> str | None:
        """The value as JSON, where the format allows JSON literals (`true`, `[1, null]`), else None."""
        if not self.f.json_literals:
            return None
        try:
            return json.dumps(json.loads(src), ensure_ascii=False)
        except ValueError:
            return None

    def _end_call(self, at: int) -> None:
        self.sink.args("}" if self.nparams else "{}")
        self.sink.end(validate=False, at=at)
        self.st = _AFTER

    def on_text(self, t: str) -> int | None:
        i = 0
        while (k := self._text(t, i)) == _RESUME:
            i = self.resume_at
        return k

    def _text(self, t: str, i: int) -> int | None:
        n = len(t)
        while i < n:
            st = self.st
            if st == _BAD or st == _DONE:
                return i if (st == _DONE and not self.wrapped) else None
            if st == _SKIP:
                j = self._scan(t, i, ",]\n" if self.f.lines and self.wrapped else ",]")
                if j == -1:
                    return None
                if j == -2:
                    return self._bad(self.failed)
                self.tok, self.gap = [], False
                self.sink.error(self.failed, at=j)
                self.st = _DONE if t[j] == "]" else _CALL
                i = j + 1
                continue
            if st == _VAL:
                i = self._scan(t, i, ",)")
                if i == -1:
                    return None
                if i == -2:
                    return self._bad("unbalanced brackets in a pythonic tool call")
                err = self._param()
                if err:
                    return self._bad(err)
                self.st = _KEY
                if t[i] == ")":
                    self._end_call(i + 1)
                i += 1
                continue
            c = t[i]
            if (st == _NAME or st == _KEY) and _IDENT.match(c):
                if self.tok and self.gap:  # `bad name(`: a space inside a name or keyword
                    return self._not_a_call(i, t)
                self.gap = False
                self.tok.append(c)
                i += 1
                continue
            if c in WS:
                self.gap = bool(self.tok)
                i += 1
                continue
            if st == _LIST:
                if c == "[":
                    self.st = _CALL
                elif self.wrapped and _IDENT.match(c):
                    self.st, self.tok = _NAME, [c]  # a single call without the list brackets
                else:
                    return self._not_a_call(i, t)
            elif st == _CALL:
                if c == "]" and self.probe is None:
                    self.st = _DONE
                elif _IDENT.match(c) and not (c.isdigit() or c in ".-"):
                    self.st, self.tok = _NAME, [c]
                else:
                    return self._not_a_call(i, t)
            elif st == _NAME:
                if c != "(":
                    return self._not_a_call(i, t)
                self.probe = None
                self.sink.start("".join(self.tok))
                self.st, self.tok, self.nparams = _KEY, [], 0
            elif st == _KEY:
                if c == ")" and not self.tok:
                    self._end_call(i + 1)
                elif c == "," and not self.tok:
                    pass
                elif c == "=" and self.tok:
                    self.key = "".join(self.tok)
                    self.st, self.tok, self.depth, self.quote, self.esc = _VAL, [], 0, "", False
                else:
                    return self._not_a_call(i, t)
            elif st == _AFTER:
                if self.f.lines and self.wrapped and _IDENT.match(c):
                    self.st, self.tok = _NAME, [c]  # the next call, on its own line
                elif c == ",":
                    self.st = _CALL
                elif c == "]":
                    self.st = _DONE
                else:
                    return self._bad("expected ',' or ']' after a pythonic tool call")
            i += 1
        if self.probe is not None:
            self.probe.append(t)
        return None

    def _scan(self, t: str, i: int, ends: str) -> int:
        """Collect Python literal text (a keyword value, or a broken call being skipped) up to the first character of
        `ends` outside quotes and brackets; return its index, -1 if the text goes on, -2 at an unbalanced bracket."""
        n = len(t)
        begin = i
        while i < n:
            if self.esc:
                self.esc = False
                i += 1
                continue
            m = _VAL_STOP.search(t, i)
            if m is None:
                break
            i = m.start()
            c = t[i]
            if self.quote:
                if c == "\\":
                    self.esc = True
                elif c == self.quote:
                    self.quote = ""
            elif c == "'" or c == '"':
                self.quote = c
            elif c in "([{":
                self.depth += 1
            elif self.depth == 0 and c in ends:
                self.tok.append(t[begin:i])
                return i
            elif c in ")]}":
                if self.depth == 0:
                    return -2
                self.depth -= 1
            i += 1
        self.tok.append(t[begin:])
        return -1

    def on_marker(self, marker: str) -> int:
        if self.st == _BAD or self.st == _SKIP:
            self.sink.error(self.failed)
        elif self.st not in (_DONE, _AFTER):
            self.sink.error("pythonic tool call closed before it ended")
        return DONE

    def finish(self) -> None:
        if self.st == _BAD or self.st == _SKIP:
            self.sink.error(self.failed)
        if self.st in (_BAD, _SKIP, _DONE, _AFTER):
            return
        if self.probe is not None and self.st != _NAME:
            self.rejected = "".join(self.probe)  # a lone "[" at the end: answer text
            return
        self.sink.truncated()

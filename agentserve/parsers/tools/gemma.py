"""Gemma's call notation (Gemma 4, FunctionGemma): one call per block, its arguments an object whose keys are bare and
whose strings sit between a quote token, everything else written bare:

    gemma4:        <|tool_call>call:NAME{city:<|"|>Paris<|"|>,days:3,opts:{deep:true},tags:[<|"|>a<|"|>]}<tool_call|>
    functiongemma: <start_function_call>call:NAME{city:<escape>Paris<escape>}<end_function_call>

The quote token is a marker, so a `,` `}` or `:` inside a string is never structure, however the stream is split.
Checkpoints also write `:NAME{…}` without `call` and `call:NAME(…)`: both read as the same call.
Each top-level argument is converted to JSON when it completes (`{"city": "Paris"` then `, "days": 3` then `}`), a
bare value typed by the tool's schema where it has one, else read as JSON / a Python literal, else kept as a string.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..scanner import MarkerSet
from ..schema import ToolIndex, coerce
from ..sink import CallSink, name_error
from .base import CONT, DONE, Body

__all__ = ["GemmaFormat", "GemmaBody", "GEMMA4", "FUNCTIONGEMMA"]


@dataclass(frozen=True)
class GemmaFormat:
    call_open: str
    call_close: str
    quote: str  # opens and closes a string value (a special token of the tokenizer)


GEMMA4 = GemmaFormat("<|tool_call>", "<tool_call|>", '<|"|>')
FUNCTIONGEMMA = GemmaFormat("<start_function_call>", "<end_function_call>", "<escape>")

_HEAD, _ARGS, _STR, _AFTER, _SKIP = range(5)
_STRUCT = re.compile(r"[{}\[\](),]")
_OPEN_ARGS = re.compile(r"[{(]")  # some checkpoints write `call:NAME(k:v)` (vLLM issue 53642): the same arguments
_TOKEN = re.compile(r"[{}\[\]:,]|[^{}\[\]:,]+")
_PREFIXES = ("call:", ":")  # checkpoints also write the name after a bare ':' (as vLLM notes)


class _Malformed(ValueError):
    pass


def _joined(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Adjacent raw pieces as one (a bare word may arrive over several deltas)."""
    out: list[tuple[str, str]] = []
    for kind, text in pieces:
        if kind == "t" and out and out[-1][0] == "t":
            out[-1] = ("t", out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


class _Reader:
    """Recursive descent over one argument's tokens: ('s', text) strings, ('b', text) bare runs, structure chars."""

    def __init__(self, pieces: list[tuple[str, str]]) -> None:
        self.toks: list[tuple[str, str]] = []
        for kind, text in _joined(pieces):
            if kind == "s":
                self.toks.append(("s", text))
                continue
            for t in _TOKEN.findall(text):
                if t in "{}[]:,":
                    self.toks.append((t, t))
                elif t.strip():
                    self.toks.append(("b", t.strip()))
        self.i = 0

    def next(self) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise _Malformed("argument ends early")
        self.i += 1
        return self.toks[self.i - 1]

    def peek(self) -> str:
        return self.toks[self.i][0] if self.i < len(self.toks) else ""

    def key(self) -> str:
        kind, text = self.next()
        if kind not in ("s", "b") or self.next()[0] != ":":
            raise _Malformed("expected a key and ':'")
        return text

    def value(self, schema: Any = None) -> Any:
        kind, text = self.next()
        if kind == "s":
            return text
        if kind == "b":
            while self.peek() == ":":  # a bare value with colons (10:30, a URL) is one value, as vLLM reads it
                self.next()
                text += ":" + (self.next()[1] if self.peek() == "b" else "")
            return coerce(text, schema, "json")
        if kind == "{":
            obj: dict[str, Any] = {}
            while self.peek() != "}":
                k = self.key()
                obj[k] = self.value()
                if self.peek() == ",":
                    self.next()
            self.next()
            return obj
        if kind == "[":
            items: list[Any] = []
            while self.peek() != "]":
                items.append(self.value())
                if self.peek() == ",":
                    self.next()
            self.next()
            return items
        raise _Malformed(f"unexpected {text!r}")

    def done(self) -> bool:
        return self.i == len(self.toks)


class GemmaBody(Body):
    def __init__(self, fmt: GemmaFormat, sink: CallSink, tools: ToolIndex) -> None:
        self.f = fmt
        self.sink = sink
        self.tools = tools
        self.markers = MarkerSet((fmt.quote, fmt.call_close))
        self.st = _HEAD
        self.head: list[str] = []
        self.member: list[tuple[str, str]] = []  # the top-level argument being read
        self.depth = 0  # 1 inside the arguments object, more inside a nested value
        self.nparams = 0
        self.name = ""
        self.failed = ""

    # -- arguments ---------------------------------------------------------------------------------------------
    def _begin(self) -> bool:
        name = "".join(self.head).strip()
        for p in _PREFIXES:
            if name.startswith(p):
                name = name[len(p):].strip()
                break
        err = name_error(name)
        if err:
            self._skip(err)
            return False
        self.name = name
        self.sink.start(name)
        return True

    def _member(self) -> bool:
        """Emit the completed top-level argument; False (and skipping) when it does not read."""
        pieces, self.member = self.member, []
        if not any(kind == "s" or text.strip() for kind, text in pieces):
            return True  # `{}` or a trailing comma
        r = _Reader(pieces)
        try:
            key = r.key()
            value = r.value(self.tools.param(self.name, key))
            if not r.done():
                raise _Malformed("text after an argument's value")
        except _Malformed as exc:
            self._skip(f"malformed argument: {exc}")
            return False
        head = "{" if self.nparams == 0 else ", "
        self.nparams += 1
        self.sink.args(f"{head}{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")
        return True

    def _args_text(self, t: str) -> None:
        i = 0
        for m in _STRUCT.finditer(t):
            c = m.group()
            j = m.start()
            if c in "{[(":
                self.depth += 1
            elif c in "}])":
                self.depth -= 1
            if self.depth == 0:  # the arguments object closed
                self.member.append(("t", t[i:j]))
                if self._member():
                    self.sink.args("}" if self.nparams else "{}")
                    self.st = _AFTER
                return
            if c == "," and self.depth == 1:
                self.member.append(("t", t[i:j]))
                if not self._member():
                    return
                i = j + 1
        self.member.append(("t", t[i:]))

    def _skip(self, err: str) -> None:
        """Ignore the broken call up to its end marker and report it there, with all its text as raw."""
        self.st, self.failed = _SKIP, err

    # -- Body interface ----------------------------------------------------------------------------------------
    def on_text(self, t: str) -> int | None:
        st = self.st
        if st == _HEAD:
            m = _OPEN_ARGS.search(t)
            k = m.start() if m else -1
            if k < 0:
                self.head.append(t)
                return None
            self.head.append(t[:k])
            if self._begin():
                self.st, self.depth = _ARGS, 1
                self._args_text(t[k + 1:])
        elif st == _ARGS:
            self._args_text(t)
        elif st == _STR:
            self.member[-1] = ("s", self.member[-1][1] + t)
        return None  # _AFTER: layout before the end marker; _SKIP: ignored

    def on_marker(self, m: str) -> int:
        st = self.st
        if m == self.f.quote:
            if st == _ARGS:
                self.st = _STR
                self.member.append(("s", ""))
            elif st == _STR:
                self.st = _ARGS
            elif st == _HEAD:
                self._skip("a string in the tool name")
            return CONT
        # the call's end marker
        if st == _SKIP:
            self.sink.error(self.failed)
        elif st == _HEAD:
            if self._begin():  # a call without arguments: `call:ping<tool_call|>`
                self.sink.end()
            else:
                self.sink.error(self.failed)
        elif st == _AFTER:
            self.sink.end(validate=False)
        else:
            self.sink.error("tool call closed before its arguments did")
        return DONE

    def finish(self) -> None:
        if self.st == _SKIP:
            self.sink.error(self.failed)
        elif self.st == _AFTER:
            self.sink.end(validate=False)  # the arguments are complete; only the end marker is missing
        else:
            self.sink.truncated()

"""Bodies of XML-style formats whose parameter values are plain text, typed by the tool's JSON schema:

    qwen3_coder: <tool_call><function=NAME><parameter=K>\\nV\\n</parameter></function></tool_call>
    minimax_m2:  <minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter></invoke></minimax:tool_call>
    glm47/glm45: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
    seed_oss:    <seed:tool_call><function=NAME><parameter=K>V</parameter></function></seed:tool_call>
    deepseek_v32: <｜DSML｜function_calls><｜DSML｜invoke name="NAME">
                  <｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>
                  (DSML; string="false": V is JSON)

The arguments JSON is built here: `{"K": v` when the first parameter completes, `, "K2": v2` for each next one and
`}` at the end, so the fragments always concatenate to the final `arguments`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from ..scanner import MarkerSet
from ..schema import ToolIndex, coerce
from ..sink import CallSink, name_error
from .base import CONT, DONE, Body

__all__ = ["XmlFormat", "XmlBody", "QWEN3_CODER", "MINIMAX_M2", "GLM47", "SEED_OSS", "DEEPSEEK_V32"]


@dataclass(frozen=True)
class XmlFormat:
    block_close: str
    call_open: str | None  # None: the name starts right after the block marker (glm)
    name_close: str | None  # None: the name ends at the first key_open or block_close (glm)
    call_close: str | None  # None: block_close closes the call (glm)
    key_open: str
    key_close: str
    value_open: str | None
    value_close: str
    trim_newline: bool  # values are written as "\nV\n"
    untyped: str  # how to type a parameter without schema: "string" or "json"
    string_attr: bool = False  # DSML: the key's string="true" makes V a verbatim string, "false" JSON


QWEN3_CODER = XmlFormat("</tool_call>", "<function=", ">", "</function>", "<parameter=", ">", None, "</parameter>",
                        trim_newline=True, untyped="string")
MINIMAX_M2 = XmlFormat("</minimax:tool_call>", "<invoke name=", ">", "</invoke>", "<parameter name=", ">", None,
                       "</parameter>", trim_newline=True, untyped="string")
SEED_OSS = replace(QWEN3_CODER, block_close="</seed:tool_call>")
_DSML = "｜DSML｜"
DEEPSEEK_V32 = XmlFormat(f"</{_DSML}function_calls>", f"<{_DSML}invoke name=", ">", f"</{_DSML}invoke>",
                         f"<{_DSML}parameter name=", ">", None, f"</{_DSML}parameter>", trim_newline=False,
                         untyped="json", string_attr=True)
GLM47 = XmlFormat("</tool_call>", None, None, None, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                  trim_newline=False, untyped="json")

_PRE, _NAME, _ARGS, _KEY, _PREVAL, _VALUE, _POST, _SKIP = range(8)
_STRING_ATTR = re.compile(r'\s+string\s*=\s*"(true|false)"\s*$')


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1]
    return s.strip()


class XmlBody(Body):
    def __init__(self, fmt: XmlFormat, sink: CallSink, tools: ToolIndex) -> None:
        self.f = fmt
        self.sink = sink
        self.tools = tools
        f = fmt
        ends = tuple(m for m in (f.call_close, f.block_close) if m)
        self._sets = {
            _PRE: MarkerSet(tuple(m for m in (f.call_open, f.block_close) if m)),
            _NAME: MarkerSet((f.name_close,) if f.name_close else (f.key_open, f.block_close)),
            _ARGS: MarkerSet((f.key_open,) + ends),
            _KEY: MarkerSet((f.key_close,) + ends),
            _PREVAL: MarkerSet(((f.value_open,) if f.value_open else ()) + ends),
            _VALUE: MarkerSet((f.value_close, f.key_open) + ends),
            _POST: MarkerSet(tuple(m for m in (f.block_close, f.call_open) if m)),
            _SKIP: MarkerSet(tuple(m for m in (f.call_close, f.block_close) if m)),
        }
        self._calls = 0
        self.verbatim = False  # the current value is a string as written (DSML string="true")
        self._skipping = ""  # a broken call's error, reported at its end with all its text
        self._set(_PRE if f.call_open else _NAME)

    def _set(self, st: int) -> None:
        self.st = st
        self.markers = self._sets[st]
        self.buf: list[str] = []

    def on_text(self, t: str) -> int | None:
        if self.st in (_NAME, _KEY, _VALUE):
            self.buf.append(t)
        return None  # text between tags is layout

    # -- call building --------------------------------------------------------------------------------------
    def _begin(self) -> bool:
        name = _unquote("".join(self.buf))
        err = name_error(name)
        if err:
            self._skip(err)
            return False
        self.name = name
        self.nparams = 0
        self.sink.start(name)
        return True

    def _param(self) -> None:
        raw = "".join(self.buf)
        if self.f.trim_newline:
            if raw.startswith("\n"):
                raw = raw[1:]
            if raw.endswith("\n"):
                raw = raw[:-1]
        value = raw if self.verbatim else coerce(raw, self.tools.param(self.name, self.key), self.f.untyped)
        head = "{" if self.nparams == 0 else ", "
        self.nparams += 1
        self.sink.args(f"{head}{json.dumps(self.key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")

    def _end_call(self) -> None:
        self._calls += 1
        self.sink.args("}" if self.nparams else "{}")
        self.sink.end(validate=False)

    def _skip(self, err: str) -> None:
        """Ignore the broken call up to its end (the block's, where calls have no end of their own) and report it
        there: its raw text is then the whole call whatever the chunking, and the block's next call still parses."""
        self._skipping = err
        self._set(_SKIP)

    # -- Body interface --------------------------------------------------------------------------------------
    def on_marker(self, m: str) -> int:
        f, st = self.f, self.st
        closes_call = m == f.call_close or (m == f.block_close and st != _POST)
        if st == _SKIP:
            self.sink.error(self._skipping)
            self._calls += 1
            if m == f.block_close:
                return DONE
            self._set(_POST)
            return CONT
        if st == _PRE:
            if m == f.call_open:
                self._set(_NAME)
                return CONT
            if not self._calls:
                self.sink.error("empty tool call")
            return DONE
        if st == _POST:
            if m == f.call_open:
                self._set(_NAME)
                return CONT
            return DONE
        if st == _NAME:
            if not self._begin():
                return self.on_marker(m) if m in (f.call_close, f.block_close) else CONT
            if m == f.key_open:
                self._set(_KEY)
                return CONT
            if m == f.block_close:
                self._end_call()
                return DONE
            self._set(_ARGS)
            return CONT
        if st == _KEY:
            if m == f.key_close:
                self.key = "".join(self.buf).strip()
                self.verbatim = False
                if f.string_attr and (a := _STRING_ATTR.search(self.key)):
                    self.key, self.verbatim = self.key[: a.start()], a.group(1) == "true"
                if f.key_open.endswith("="):
                    self.key = _unquote(self.key)
                self._set(_PREVAL if f.value_open else _VALUE)
                return CONT
            return self._broken(m, "tool call closed inside a parameter name")
        if st == _PREVAL:
            if m == f.value_open:
                self._set(_VALUE)
                return CONT
            return self._broken(m, "parameter has no value")
        if st == _VALUE:
            self._param()
            if m == f.value_close:
                self._set(_ARGS)
                return CONT
            if m == f.key_open:  # the model skipped the closing tag
                self._set(_KEY)
                return CONT
        # _ARGS (or a value closed by a call/block end)
        if m == f.key_open:
            self._set(_KEY)
            return CONT
        if closes_call:
            self._end_call()
            if m == f.block_close:
                return DONE
            self._set(_POST)
            return CONT
        return CONT

    def _broken(self, m: str, msg: str) -> int:
        """The call ended (at `m`, a call or block end) in the middle of a parameter."""
        self._skip(msg)
        return self.on_marker(m)

    def finish(self) -> None:
        if self.st == _SKIP:
            self.sink.error(self._skipping)
            return
        if self.st == _POST:
            return
        if self.st == _PRE and self._calls:
            return
        self.sink.truncated()

"""OpenAI harmony (gpt-oss): one stage that does reasoning and tool calls, because the channel header decides both.

    <|channel|>analysis<|message|>…<|end|>                       reasoning
    <|start|>assistant<|channel|>final<|message|>…<|return|>     answer text
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>   tool call
    (the recipient may also come first: `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`)

Commentary without a recipient is a user-visible preamble (text). A recipient outside `functions.` (built-in
browser/python tools) is model-internal and reported as reasoning. With the reasoning role off, analysis is text;
with the tool role off, a tool message's body is text.
"""

from __future__ import annotations

import re

from .events import Event, ReasoningDelta
from .jsonscan import ArgsStream
from .scanner import MarkerScanner, MarkerSet
from .sink import CallSink, name_error
from .text import TextOut

__all__ = ["HarmonyStage", "MARKERS"]

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, RETURN, CALL = "<|end|>", "<|return|>", "<|call|>"
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, RETURN, CALL)  # all of them are special tokens in o200k_harmony

_OUT_SET = MarkerSet((START, CHANNEL, MESSAGE, END, RETURN, CALL))
_HEAD_SET = MarkerSet((START, CHANNEL, MESSAGE, CONSTRAIN, END, RETURN, CALL))
_BODY_SET = MarkerSet((START, END, RETURN, CALL))
_CHANNEL_RE = re.compile(r"<\|channel\|>\s*([\w-]+)")
_TO_RE = re.compile(r"\bto=([^\s<]+)")

_OUT, _HEAD, _BODY = range(3)
_R, _T, _TOOL = "reasoning", "text", "tool"


class HarmonyStage:
    def __init__(self, out: list[Event], sink: CallSink, text: TextOut, reasoning: bool, tools: bool) -> None:
        self.out = out
        self.sink = sink
        self.text = text
        self.reasoning_on = reasoning
        self.tools_on = tools
        self.sc = MarkerScanner()
        self.st = _OUT
        self.head: list[str] = []
        self.kind = _T
        self.args: ArgsStream | None = None

    @property
    def scanners(self) -> tuple[MarkerScanner, ...]:
        return (self.sc,)

    def _classify(self, header: str) -> tuple[str, str]:
        m = _TO_RE.search(header)
        recipient = m.group(1) if m else ""
        if recipient.startswith("functions."):
            return (_TOOL if self.tools_on else _T), recipient[len("functions.") :]
        c = _CHANNEL_RE.search(header)
        channel = c.group(1) if c else ""
        if recipient or channel == "analysis":
            return (_R if self.reasoning_on else _T), ""
        return _T, ""

    def _open_body(self) -> None:
        header = "".join(self.head)
        self.kind, name = self._classify(header)
        self.st = _BODY
        if self.kind == _TOOL:
            self.text.boundary()
            self.sink.raw = [header, MESSAGE]
            self.args = ArgsStream()
            err = name_error(name)
            if err:
                self.sink.error(err)
                self.kind = "skip"
            else:
                self.sink.start(name)

    def _body_text(self, t: str) -> None:
        if self.kind == _R:
            self.out.append(ReasoningDelta(t))
        elif self.kind == _T:
            self.text.emit(t)
        elif self.kind == _TOOL:
            self.sink.raw.append(t)
            frag, _ = self.args.feed(t)  # type: ignore[union-attr]
            self.sink.args(frag)

    def _close_body(self) -> None:
        if self.kind == _TOOL:
            a = self.args
            if a is not None and (a.done or a.blank):
                self.sink.end()
            else:
                self.sink.error("tool call arguments are not a complete JSON object")
            self.text.boundary()
        elif self.kind == _R:
            self.text.boundary()
        self.kind = _T

    def feed(self, data: str, final: bool = False) -> None:
        sc = self.sc
        if data:
            sc.push(data)
        while True:
            st = self.st
            piece = sc.next(_BODY_SET if st == _BODY else _HEAD_SET if st == _HEAD else _OUT_SET, final)
            if piece is None:
                break
            t, m = piece
            if st == _OUT:
                if t:
                    self.text.emit(t)
                if m == START or m == CHANNEL:
                    self.st, self.head = _HEAD, ([m] if m == CHANNEL else [])
                elif m == MESSAGE:
                    self.head = []
                    self._open_body()
            elif st == _HEAD:
                if t:
                    self.head.append(t)
                if m == MESSAGE:
                    self._open_body()
                elif m == CHANNEL or m == CONSTRAIN:
                    self.head.append(m)
                elif m == START:
                    self.head = []
                elif m is not None:
                    self.st = _OUT
            else:
                if t:
                    self._body_text(t)
                if m is not None:
                    if self.kind == _TOOL:
                        self.sink.raw.append(m)
                    self._close_body()
                    self.st, self.head = (_HEAD, []) if m == START else (_OUT, [])
        if final:
            self._finish()

    def _finish(self) -> None:
        if self.st == _BODY and self.kind == _TOOL:
            if self.args is not None and self.args.done:
                self.sink.end()  # complete arguments, only <|call|> missing
            else:
                self.sink.truncated()
        elif self.st == _HEAD and self.tools_on:
            header = "".join(self.head)
            m = _TO_RE.search(header)
            if m and m.group(1).startswith("functions."):
                self.sink.raw = [header]
                self.sink.truncated()
        self.text.finish()

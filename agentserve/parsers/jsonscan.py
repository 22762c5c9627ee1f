"""Incremental JSON boundary tracking, so argument text can be forwarded as it arrives.

Nothing here validates JSON: it only finds where a value ends (strings, escapes, nesting), jumping over ordinary
characters with a regex. The complete text is validated once with `json.loads` when the call ends.
"""

from __future__ import annotations

import re

__all__ = ["JsonValueScanner", "ArgsStream", "WS"]

WS = " \t\r\n"
_STR_STOP = re.compile(r'["\\]')
_CTR_STOP = re.compile(r'[\[\]{}"]')
_SCALAR_END = re.compile(r"[\s,\]}:;]")
_FENCE = "```json"


class JsonValueScanner:
    """Tracks one JSON value across chunks. `kind` is '' (not started), 'c' container, 's' string, 'x' scalar."""

    __slots__ = ("depth", "in_str", "esc", "kind", "done", "work")

    def __init__(self) -> None:
        self.depth = 0
        self.in_str = False
        self.esc = False
        self.kind = ""
        self.done = False
        self.work = 0

    def feed(self, s: str, i: int = 0) -> int:
        """Consume s[i:] (s[i] must start or continue the value); return the index just past its end, or -1."""
        n = len(s)
        self.work += n - i
        if not self.kind:
            c = s[i]
            if c == "{" or c == "[":
                self.kind, self.depth = "c", 1
                i += 1
            elif c == '"':
                self.kind, self.in_str = "s", True
                i += 1
            else:
                self.kind = "x"
        if self.kind == "x":
            m = _SCALAR_END.search(s, i)
            if m is None:
                return -1
            self.done = True
            return m.start()
        while i < n:
            if self.esc:
                self.esc = False
                i += 1
                continue
            if self.in_str:
                m = _STR_STOP.search(s, i)
                if m is None:
                    return -1
                i = m.end()
                if m.group() == "\\":
                    self.esc = True
                    continue
                self.in_str = False
                if self.kind == "s":
                    self.done = True
                    return i
                continue
            m = _CTR_STOP.search(s, i)
            if m is None:
                return -1
            ch = m.group()
            i = m.end()
            if ch == '"':
                self.in_str = True
            elif ch == "{" or ch == "[":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return i
        return -1


class ArgsStream:
    """One arguments object framed by markers: skips leading whitespace or a ```json fence, forwards the object.

    `feed` returns (fragment, end) where end is the index just past the object, or -1 while it continues.
    Text after the object (closing fence, whitespace) is the caller's to ignore or hand back.
    """

    __slots__ = ("_pre", "_vs", "bad")

    def __init__(self) -> None:
        self._pre = ""
        self._vs: JsonValueScanner | None = None
        self.bad = False

    @property
    def started(self) -> bool:
        return self._vs is not None

    @property
    def done(self) -> bool:
        return self._vs is not None and self._vs.done

    @property
    def blank(self) -> bool:
        """Nothing but framing was seen (a call without arguments)."""
        return self._vs is None and not self.bad

    def feed(self, s: str) -> tuple[str, int]:
        if self.bad or self.done:
            return "", 0
        i = 0
        if self._vs is None:
            j = s.find("{")
            pre = self._pre + (s if j < 0 else s[:j])
            stripped = pre.strip(WS)
            if not (_FENCE.startswith(stripped) or (stripped == _FENCE)):
                self.bad = True
                return "", -1
            if j < 0:
                self._pre = pre if len(pre) < 64 else pre[-64:]
                return "", -1
            self._vs = JsonValueScanner()
            i = j
        end = self._vs.feed(s, i)
        return (s[i:] if end < 0 else s[i:end]), end

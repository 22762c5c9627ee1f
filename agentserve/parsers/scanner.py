"""Incremental marker scanning: the one place that looks at raw text for markers.

A parser state owns a `MarkerSet`; `MarkerScanner.next()` returns the text before the earliest marker and the
marker itself, or all text that cannot be the start of a marker. Only a suffix that is a proper prefix of a marker
is held back, so per delta the scanner looks at the new characters plus at most `max marker length` old ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MarkerScanner", "MarkerSet", "EMPTY"]


class MarkerSet:
    """An immutable set of literal markers, compiled once."""

    __slots__ = ("markers", "regex", "prefixes", "maxlen", "_first")

    def __init__(self, markers: Iterable[str]) -> None:
        ms = tuple(sorted({m for m in markers if m}, key=len, reverse=True))
        self.markers = ms
        self.regex = re.compile("|".join(re.escape(m) for m in ms)) if ms else None
        self.prefixes = frozenset(m[:i] for m in ms for i in range(1, len(m)))
        self.maxlen = len(ms[0]) if ms else 0
        firsts = "".join(sorted({m[0] for m in ms if len(m) > 1}))
        self._first = re.compile("[" + re.escape(firsts) + "]") if firsts else None

    def partial_suffix(self, buf: str, pos: int) -> int:
        """Length of the longest suffix of buf[pos:] that is a proper prefix of a marker."""
        if self._first is None:
            return 0
        n = len(buf)
        prefixes = self.prefixes
        # only positions holding a marker's first character can start a partial marker
        for m in self._first.finditer(buf, max(pos, n - self.maxlen + 1)):
            if buf[m.start() :] in prefixes:
                return n - m.start()
        return 0

    def __repr__(self) -> str:
        return f"MarkerSet({list(self.markers)!r})"


EMPTY = MarkerSet(())


class MarkerScanner:
    """Buffers text and hands it out split at markers; `work` counts characters examined (for tests)."""

    __slots__ = ("_buf", "_pos", "work")

    def __init__(self) -> None:
        self._buf = ""
        self._pos = 0
        self.work = 0

    def push(self, text: str) -> None:
        if self._pos:
            self._buf = self._buf[self._pos :] + text
            self._pos = 0
        else:
            self._buf += text

    def unread(self, text: str) -> None:
        """Put text back in front of the buffer (a state change decided it belongs to another state)."""
        if text:
            self._buf = text + self._buf[self._pos :]
            self._pos = 0

    def peek(self, n: int) -> str:
        """The next `n` characters of unread text (fewer if less is buffered)."""
        return self._buf[self._pos : self._pos + n]

    @property
    def pending(self) -> str:
        return self._buf[self._pos :]

    def next(self, ms: MarkerSet, final: bool = False) -> tuple[str, str | None] | None:
        """Return (text, marker) with marker None when no marker is complete, or None when nothing is ready."""
        buf, pos = self._buf, self._pos
        n = len(buf)
        if pos >= n:
            return None
        m = ms.regex.search(buf, pos) if ms.regex is not None else None
        if m is not None:
            s, e = m.span()
            self.work += e - pos
            if not final and n - s < ms.maxlen and buf[s:] in ms.prefixes:
                # A longer marker may still complete at s: hand out only the text before it.
                self._pos = s
                return (buf[pos:s], None) if s > pos else None
            self._pos = e
            return buf[pos:s], m.group()
        self.work += n - pos
        cut = n if final else n - ms.partial_suffix(buf, pos)
        self._pos = cut
        return (buf[pos:cut], None) if cut > pos else None

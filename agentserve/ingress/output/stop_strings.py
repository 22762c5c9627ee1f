"""Stop strings on decoded text, so every engine stops alike (the engine stops on them too, for usage)."""

from __future__ import annotations

from typing import Sequence


class StopStrings:
    """Cuts text at the first stop string, holding back only a possible partial match."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._buf = ""
        self.hit = False
        self.matched: str | None = None  # the stop string that ended the text (Anthropic reports it)

    def feed(self, text: str) -> str:
        if not self._stops:
            return text
        if self.hit:
            return ""
        self._buf += text
        found = [(i, s) for s in self._stops if (i := self._buf.find(s)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda f: f[0])
            out, self._buf, self.hit = self._buf[:cut], "", True
            return out
        keep = min(self._hold, len(self._buf))
        out, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
        return out

    def flush(self) -> str:
        out, self._buf = ("" if self.hit else self._buf), ""
        return out

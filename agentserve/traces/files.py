"""A size-bounded, rotated, owner-only trace file: `path`, then `path.1` .. `path.<keep>` (oldest deleted).

Traces carry no payload, but sessions, timings and key ids are still the operator's business: every file is
created 0600 (the directory 0700 when made here), whatever the process umask. At most
(keep + 1) * max_bytes (+ one batch) ever sits on disk per writer.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


class RotatingFile:
    """Appends text; before a write would take the file past `max_bytes`, the file is rotated. Used from one
    thread (the background writer's)."""

    def __init__(self, path: str | Path, *, max_bytes: int, keep: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self._fd: int | None = None
        self._size = 0

    def write(self, text: str) -> None:
        data = text.encode()
        if self._fd is None:
            self._open()
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> None:
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        os.fchmod(self._fd, FILE_MODE)  # an existing file, or a umask that took bits away: owner read/write only
        self._size = os.fstat(self._fd).st_size

    def _rotate(self) -> None:
        self.close()
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            for n in range(self.keep, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{n}")
                if n == self.keep:
                    older.unlink(missing_ok=True)
                src = self.path if n == 1 else self.path.with_name(f"{self.path.name}.{n - 1}")
                if src.exists():
                    src.rename(older)
        self._open()

    def __repr__(self) -> str:
        return str(self.path)

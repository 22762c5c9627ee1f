"""One results writer: JSON and a matplotlib PNG under docs/benchmarks/ (or the directory `agentserve bench
--out-dir` / AGENTSERVE_BENCH_OUT names, for smoke runs that must not overwrite the committed figures)."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "benchmarks"
OUT_ENV = "AGENTSERVE_BENCH_OUT"


def out_dir() -> Path:
    """Where results go: $AGENTSERVE_BENCH_OUT when set, else docs/benchmarks/."""
    d = os.environ.get(OUT_ENV)
    return Path(d) if d else DOCS


def out_path(filename: str) -> Path:
    """A default output path: `filename` in out_dir()."""
    return out_dir() / filename


def scratch_path(filename: str) -> Path:
    """Where a smoke run (`--quick`) writes: --out-dir / $AGENTSERVE_BENCH_OUT when set, else the temporary
    directory (never over the committed figures)."""
    d = os.environ.get(OUT_ENV)
    return (Path(d) if d else Path(tempfile.gettempdir())) / filename


def command(name: str, argv: Sequence[str] | None) -> str:
    """How the run is reproduced: `agentserve bench NAME ARGS`."""
    return " ".join(["agentserve bench", name, *(shlex.quote(a) for a in (argv or ()))])


def write_json(path: Path | str, doc: Any, *, indent: int | None = 2, newline: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=indent) + ("\n" if newline else ""))
    return path


def read_json(path: Path | str) -> Any:
    return json.loads(Path(path).read_text())


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path | str, *, dpi: int = 100, **kwargs: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, **kwargs)
    pyplot().close(fig)
    return path

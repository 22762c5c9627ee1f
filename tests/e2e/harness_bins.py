"""Where the harness CLIs the e2e tests drive live: .harness/ (the pinned versions, scripts/install_harnesses.sh), or
the prefix AGENTSERVE_HARNESS_DIR names (`make test-harness-latest` installs the registry's newest there and runs the
same tests against them, for docs/COMPATIBILITY.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PINNED_DIR = ROOT / ".harness"
HARNESS_DIR = Path(os.environ.get("AGENTSERVE_HARNESS_DIR") or PINNED_DIR).resolve()


def harness_bin(name: str) -> Path:
    return HARNESS_DIR / "node_modules" / ".bin" / name


def install_pinned(timeout: float) -> None:
    """Installs the pinned CLIs when the tests use them and npm is there; another prefix is its installer's job."""
    if HARNESS_DIR == PINNED_DIR.resolve() and shutil.which("npm"):
        subprocess.run(["bash", str(ROOT / "scripts" / "install_harnesses.sh")], cwd=ROOT, timeout=timeout,
                       check=False)

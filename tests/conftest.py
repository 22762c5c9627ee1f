"""Shared fixtures: the prepared embedded model, the session's Ray cluster (stopped at the end), and the run order
that lets modules share it and their graphs (tests/support/)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The state backend's data directory (SQLite file, generated secret key): one per test process, never the
# user's ~/.local/share/agentserve, so concurrent test runs and `make serve` do not share stored responses or limits.
if "AGENTSERVE_DATA_DIR" not in os.environ:
    os.environ["AGENTSERVE_DATA_DIR"] = tempfile.mkdtemp(prefix="agentserve-test-data-")
    atexit.register(shutil.rmtree, os.environ["AGENTSERVE_DATA_DIR"], True)


@pytest.fixture(scope="session")
def model_path() -> Path:
    from agentserve.prepare.model import prepare_model

    return prepare_model()


@pytest.fixture(scope="session")
def tokenizer(model_path: Path):
    from agentserve.preprocess.tokenizer import load_tokenizer

    return load_tokenizer(str(model_path))


@pytest.fixture(scope="session", autouse=True)
def _session_cluster() -> Iterator[None]:
    """Stops the session's Ray cluster (tests/support/cluster.py) at the end, if a test started it."""
    yield
    from tests.support.cluster import CLUSTER

    CLUSTER.stop()


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.support.cluster import CLUSTER

    if CLUSTER.starts:
        terminalreporter.write_line(f"Ray clusters started: {CLUSTER.starts} (tests/support/cluster.py)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "graph(key): the module deploys the shared graph KEY (modules run together)")
    config.addinivalue_line("markers", "restarts_cluster: a test stops and starts Ray itself (modules run last)")


def _rank(item: pytest.Item) -> int:
    """Unit tests first (no cluster), then the modules on the session's cluster, then those that restart it."""
    if "tests/unit/" in item.nodeid or item.nodeid.startswith("unit/"):
        return 0
    return 2 if item.get_closest_marker("restarts_cluster") else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run order: by _rank, and modules that share a graph (marker `graph(KEY)`) one after another, where the first
    of them would run, so the shared graph is deployed once. Otherwise collection order; a module stays whole."""
    first_at: dict[object, int] = {}
    for i, item in enumerate(items):
        marker = item.get_closest_marker("graph")
        group = ("graph", marker.args[0]) if marker else ("module", item.module.__name__ if item.module else item.nodeid)
        first_at.setdefault(group, i)
        item.stash[_ORDER] = (_rank(item), first_at[group], i)
    items.sort(key=lambda item: item.stash[_ORDER])


_ORDER = pytest.StashKey[tuple]()

"""Shared fixtures: the prepared embedded model, and a helper that runs the real Ray Serve graph."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from agentserve.ports import free_port  # noqa: F401 - tests import it from here

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


_graph_running: list[str] = []


@contextmanager
def running_graph(
    args: dict[str, Any], *, name: str = "agentserve", http_options: dict[str, Any] | None = None
) -> Iterator[str]:
    """Start Ray, deploy build_app(args) through Serve, yield the base URL, tear everything down.

    One graph at a time per test process: use module-scoped fixtures, so a module's graph is gone
    before the next module starts its own (a second `serve.run` of the same app name would silently
    replace the first one's config).
    """
    import ray
    from ray import serve

    from agentserve.serve.app import build_app

    if _graph_running:
        raise RuntimeError(
            f"a graph is already running for {_graph_running[0]}; make graph fixtures module-scoped"
        )
    _graph_running.append(name)
    port = free_port()
    from agentserve.serve import ray_env

    # The graph's processes start with the environment `make serve` ships; this driver keeps Serve's defaults
    # (its sync `.result()` calls on handles need the handle router on its own loop).
    ray.init(
        num_cpus=8,
        include_dashboard=False,
        log_to_driver=False,
        ignore_reinit_error=True,
        runtime_env={"env_vars": ray_env.beside_others()},
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port, **(http_options or {})})
        serve.run(build_app(args), name=name, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        _graph_running.clear()
        serve.shutdown()
        ray.shutdown()

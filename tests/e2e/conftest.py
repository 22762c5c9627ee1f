"""The e2e modules' shared fixtures: the harness graph (tests/e2e/harness_graph.py) and the vLLM graph
(tests/e2e/vllm_graph.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.e2e.harness_graph import harness_args
from tests.e2e.vllm_graph import vllm_args
from tests.support.graph import running_graph


@pytest.fixture(scope="session")
def harness_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("harness")


@pytest.fixture(scope="module")
def harness_graph(model_path, harness_dir) -> Iterator[str]:
    """The harness graph's base URL (deployed by the first module that asks, reused by the next ones)."""
    with running_graph(harness_args(harness_dir), shared=True) as url:
        yield url


@pytest.fixture(scope="session")
def adapter_path(model_path) -> Path:
    """The demo LoRA adapter's directory (built by `make model`; built here if missing)."""
    from agentserve.prepare.adapter import prepare_adapter

    return prepare_adapter(model_path)


@pytest.fixture(scope="module")
def vllm_url(model_path, adapter_path) -> Iterator[str]:
    """The vLLM graph's base URL (deployed by the first module that asks, reused by the next ones)."""
    with running_graph(vllm_args(adapter_path), shared=True) as url:
        yield url

"""One graph for the whole Responses package (package scope), with the shared integration rules."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.conftest import running_graph
from tests.integration.conftest import RULES


@pytest.fixture(scope="package")
def graph_url(model_path) -> Iterator[str]:
    args = {
        "engine": {"kind": "scripted", "block_size": 16, "rules": RULES},
        "enable_streaming_tool_dispatch": True,
    }
    with running_graph(args) as url:
        yield url

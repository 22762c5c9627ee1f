"""One scripted graph for every wire-API test module in this package (chat, errors/catalog, Anthropic, Responses).

Package scope: the graph starts once for all of them; graph start-up dominates these tests' time.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.support.graph import running_graph
from tests.integration.conftest import GRAPH_ARGS


@pytest.fixture(scope="package")
def graph_url(model_path) -> Iterator[str]:
    with running_graph(GRAPH_ARGS, shared=True) as url:
        yield url

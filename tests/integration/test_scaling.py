"""Scaling the Engine deployment up and down on a running graph, the way the Ray dashboard and KubeRay do it.

The scenario (tests/integration/scaling_scenario.py) deploys the graph from a Serve config, the declarative
path of `serve deploy`, the dashboard and KubeRay, and rescales the Engine with in-flight streams, on the session's
cluster (`python -m tests.integration.scaling_scenario` runs it on a cluster of its own).
"""

from __future__ import annotations

import pytest

from tests.integration.scaling_scenario import scenario
from tests.support.graph import config_app

pytestmark = pytest.mark.integration


def test_engine_scales_up_and_down_with_streams_in_flight(model_path):
    from ray.serve.context import _get_global_client

    with config_app() as cluster:
        scenario(_get_global_client(), cluster.port)  # its steps print their times: the failure report shows them

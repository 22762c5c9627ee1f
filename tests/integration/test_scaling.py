"""Scaling the Engine deployment up and down on a running graph through Ray's dashboard, as an operator does.

The scenario (tests/integration/scaling_scenario.py) deploys the graph from a Serve config through the dashboard's
REST API (`PUT /api/serve/applications/`, the path of `serve deploy` and the dashboard; KubeRay applies the same
schema), and rescales the Engine with in-flight streams, on the session's cluster, whose dashboard is started as
`make serve` starts it (`python -m tests.integration.scaling_scenario` runs it on a cluster of its own).
"""

from __future__ import annotations

import pytest

from tests.integration.scaling_scenario import scenario
from tests.support.graph import config_app

pytestmark = pytest.mark.integration


def test_engine_scales_up_and_down_through_the_dashboard_with_streams_in_flight(model_path):
    with config_app() as cluster:
        scenario(cluster.dashboard, cluster.port)  # its steps print their times: the failure report shows them

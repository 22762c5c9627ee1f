"""Scaling the Engine deployment up and down on a running graph, the way the Ray dashboard and KubeRay do it.

The scenario (tests/integration/scaling_scenario.py) deploys the graph from a Serve config, the declarative
path of `serve deploy`, the dashboard and KubeRay, and rescales the Engine with in-flight streams. It runs in
a process and Ray cluster of its own, because Serve refuses config deploys beside the `serve.run` apps of the
other integration tests' shared graph.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_engine_scales_up_and_down_with_streams_in_flight(model_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.scaling_scenario"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "scaling scenario passed" in proc.stdout

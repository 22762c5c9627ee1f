"""The tool-addition benchmark measures what it says: in place, the turn after an addition extends the previous
prompt and output whole; folded into the tool list, it does not."""

from __future__ import annotations

import pytest

from agentserve.bench import tool_addition
from agentserve.config import ModelSpec
from agentserve.preprocess.preprocessor import Preprocessor


@pytest.fixture(scope="module")
def pre(model_path):
    return Preprocessor(ModelSpec(replay_family="agentserve_default", context_window=1 << 20), str(model_path), 16)


def test_in_place_reuses_everything_and_the_anchor_loses_the_conversation(pre):
    in_place = tool_addition.measure(pre, 3, "in_place")
    anchor = tool_addition.measure(pre, 3, "anchor")
    assert in_place["reused_share"] == 1.0 and in_place["cause"] is None
    assert in_place["prefilled_tokens"] < 1_500  # the new turn only
    assert anchor["reused_share"] < 0.9 and anchor["prefilled_tokens"] > 2 * in_place["prefilled_tokens"]

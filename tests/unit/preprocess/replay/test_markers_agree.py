"""A replay policy writes earlier reasoning back in the markers its reasoning parser reads in the output. For every
reasoning parser they must be the same strings: Kimi's policy wrote <think> while its parser scanned ◁think▷, so a
Kimi-K2-Thinking answer's reasoning came out as answer text."""

from __future__ import annotations

import pytest

from agentserve.parsers import reasoning_parsers
from agentserve.parsers.formats import GPT_OSS
from agentserve.parsers.harmony import CHANNEL, END, MESSAGE
from agentserve.parsers.reasoning import REASONING_FORMATS
from agentserve.preprocess.replay import POLICIES, policy_for


def parser_markers(parser: str) -> tuple[str, str]:
    if parser == GPT_OSS:
        return f"{CHANNEL}analysis{MESSAGE}", END
    f = REASONING_FORMATS[parser]
    return f.start.strip(), f.end  # Gemma 4's start ends in its label's newline, which the replay writes too


@pytest.mark.parametrize("parser", reasoning_parsers())
def test_replay_policy_writes_the_markers_its_parser_reads(parser):
    policy = policy_for(parser)
    assert policy.family != "none", f"reasoning parser {parser!r} has no replay policy"
    assert (policy.think_open.strip(), policy.think_close.strip()) == parser_markers(parser)


def test_every_policy_is_some_parsers_or_the_embedded_models():
    reached = {policy_for(p).family for p in reasoning_parsers()}
    assert set(POLICIES) - reached == {"agentserve_default", "none"}
    embedded = POLICIES["agentserve_default"]  # the embedded model's, read by the qwen3 parser
    assert (embedded.think_open.strip(), embedded.think_close.strip()) == parser_markers("qwen3")

"""The integration graph's scripted rules and args (GRAPH_ARGS, deployed once for tests/integration/api/), and SSE helpers."""

from __future__ import annotations

import json

from tests.integration.anthropic_rules import ANTHROPIC_RULES
from tests.integration.replay_clients import RULE as REPLAY_RULE
from tests.integration.constraint_rules import CONSTRAINT_RULES
from tests.integration.responses_rules import RESPONSES_RULES

# Raw model output, markers included, as the scripted engine replays it token by token.
REASONING_TWO_CALLS = (
    "<think>I should look up both cities.</think>"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "units": {"temp": "C"}}}\n</tool_call>'
    "Checking both now."
)

RULES = [
    *CONSTRAINT_RULES,
    *RESPONSES_RULES,
    *ANTHROPIC_RULES,
    {"match": "weather", "reply": REASONING_TWO_CALLS, "itl_ms": 2},
    {"match": "slow", "reply": "tick " * 400, "itl_ms": 25},
    {"match": "broken", "reply": '<tool_call>\n{"name": "get_weather", "arguments": {"city": }}\n</tool_call>Sorry.', "itl_ms": 0},
    {"match": "stopword", "reply": "one two STOP three four", "itl_ms": 0},
    {"match": "think", "reply": "<think>Let me think.</think>The answer is 4.", "itl_ms": 0},
    REPLAY_RULE,  # token-exact replay (replay_clients.py)
    {"match": "", "reply": "Hello! How can I help?", "itl_ms": 0},
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"type": "object"}},
            "required": ["city"],
        },
    },
}


GRAPH_ARGS = {
    "engine": {"kind": "scripted", "block_size": 16, "rules": RULES},
    "enable_streaming_tool_dispatch": True,
    "keepalive_interval_s": 0.1,  # Anthropic pings; the AS_KEEPALIVE rule's 150 ms gaps exceed it
    "model": {"aliases": ["smollm2", "smollm2-135m-instruct", "claude-smollm2"]},
    # The tests tell callers apart by the keys they present (none configured): the prefix header is asked for.
    "doctor": {"header": "always"},
}


def sse_events(lines) -> list[tuple[str | None, str]]:
    """(event name, data) pairs from an SSE line iterator."""
    out, event = [], None
    for line in lines:
        if line.startswith("event:"):
            event = line[len("event:") :].strip()
        elif line.startswith("data:"):
            out.append((event, line[len("data:") :].strip()))
            event = None
    return out


def data_json(events) -> list[dict]:
    return [json.loads(d) for _, d in events if d != "[DONE]"]

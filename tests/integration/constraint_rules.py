"""Scripted model output for the constrained-decoding and reasoning-budget tests (prepended to the shared graph's rules).

Several replies share one `match`: unconstrained, the engine replays the first; under a constraint, the first one
the request's grammar accepts, as a constrained model could only have produced such a reply.
"""

from __future__ import annotations

CALL_WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL_TIME = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
BAD_ARGS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 5}}\n</tool_call>'
FORECAST = {"city": "Paris", "temp_c": 21}
FORECAST_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
    "required": ["city", "temp_c"],
    "additionalProperties": False,
}
TIME_TOOL = {
    "name": "get_time",
    "description": "Time in a zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
}

LONG_REASONING = "<think>" + "step " * 600 + "</think>Done."  # about 600 reasoning tokens

CONSTRAINT_RULES = [
    {"match": "RX_LONG", "reply": LONG_REASONING, "itl_ms": 0},
    {"match": "CX_ASK", "reply": "<think>Maybe a tool.</think>I can answer that without tools.", "itl_ms": 0},
    {"match": "CX_ASK", "reply": "<think>Use the tool.</think>" + CALL_WEATHER, "itl_ms": 0},
    {"match": "CX_ASK", "reply": CALL_TIME, "itl_ms": 0},
    {"match": "CX_ASK", "reply": '<think>JSON it is.</think>{"city": "Paris", "temp_c": 21}', "itl_ms": 0},
    {"match": "CX_STRICT", "reply": BAD_ARGS, "itl_ms": 0},
    {"match": "CX_STRICT", "reply": CALL_WEATHER, "itl_ms": 0},
]

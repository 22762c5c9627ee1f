"""Scripted model output for the Anthropic Messages tests (prepended to the shared graph's rules)."""

from __future__ import annotations

WEATHER_TWO_CALLS = (
    "<think>I should look up both cities.</think>"
    '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Zürich", "units": {"temp": "C"}}}\n</tool_call>'
)
INTERLEAVED = (
    "<think>First I read the file.</think>"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
    "<think>Then I list the folder.</think>"
    '<tool_call>\n{"name": "list_dir", "arguments": {"path": "."}}\n</tool_call>'
)

ANTHROPIC_RULES = [
    {"match": "AS_RESULT_SEEN", "reply": "<think>The tools answered.</think>Both results are in.", "itl_ms": 0},
    {"match": "AS_WEATHER", "reply": WEATHER_TWO_CALLS, "itl_ms": 1},
    {"match": "AS_INTERLEAVED", "reply": INTERLEAVED, "itl_ms": 0},
    {"match": "AS_STOPSEQ", "reply": "alpha beta END gamma delta", "itl_ms": 0},
    {
        "match": "AS_LATE_TOOL",
        "reply": '<tool_call>\n{"name": "mcp__github__create_issue", "arguments": {"title": "Late"}}\n</tool_call>',
        "itl_ms": 0,
    },
    {
        "match": "AS_CLIENT_TOOL",
        "reply": '<tool_call>\n{"name": "str_replace_based_edit_tool", "arguments": {"command": "str_replace", '
                 '"path": "/repo/README.md", "old_str": "helo", "new_str": "hello"}}\n</tool_call>',
        "itl_ms": 0,
    },
    {"match": "AS_WORDS", "reply": "one two three four five six seven eight nine ten eleven twelve", "itl_ms": 0},
    {"match": "AS_KEEPALIVE", "reply": "<think>Slow thought.</think>Done slowly.", "itl_ms": 150},
    {
        "match": "AS_BADCALL",
        "reply": '<tool_call>\n{"name": "get_weather", "arguments": {"location": }\n</tool_call>Sorry.',
        "itl_ms": 0,
    },
]

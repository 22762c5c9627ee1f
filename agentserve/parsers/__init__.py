"""Standalone streaming reasoning and tool-call parsers (stdlib only; imports nothing else from agentserve).

    from agentserve.parsers import StreamParser, reasoning_parsers, tool_call_parsers
"""

from .events import (
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
)
from .formats import parser_markers, reasoning_parsers, tool_call_parsers
from .stream import StreamParser

__all__ = [
    "Event",
    "ReasoningDelta",
    "StreamParser",
    "TextDelta",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallError",
    "ToolCallStart",
    "ToolCallTruncated",
    "parser_markers",
    "reasoning_parsers",
    "tool_call_parsers",
]

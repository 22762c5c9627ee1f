"""Typed events produced by the streaming parsers.

Frozen dataclasses so that API encoders can pattern-match on them and tests can compare them by value.
Indices count tool-call regions in order of appearance (a malformed or truncated region also takes an index).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

__all__ = [
    "Event",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallError",
    "ToolCallStart",
    "ToolCallTruncated",
]


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning ("thinking") text."""

    text: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    """User-visible answer text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call's name is known; argument fragments for `index` follow."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgsDelta:
    """A fragment of the call's arguments JSON text; the fragments concatenate to `ToolCallEnd.arguments`."""

    index: int
    fragment: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """The call is complete; `arguments` is the whole JSON object text (valid JSON, an object)."""

    index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallError:
    """The call region at `index` is malformed; `raw` is the model text of the region (from the end of the call
    before it), up to the point where the error was found or, where the parser skips the broken call, to its end.
    It does not depend on how the stream was split into deltas.

    It may follow a `ToolCallStart` and some `ToolCallArgsDelta`s: it then cancels that call (no
    `ToolCallEnd` follows). It may also come alone, when no name could be read.
    """

    index: int
    message: str
    raw: str


@dataclass(frozen=True, slots=True)
class ToolCallTruncated:
    """The stream ended inside the call at `index` (e.g. max tokens); `raw` is the model text of the region.

    Like `ToolCallError` it cancels a started call; it is only emitted by `StreamParser.finish()`.
    """

    index: int
    raw: str


Event = Union[
    ReasoningDelta, TextDelta, ToolCallStart, ToolCallArgsDelta, ToolCallEnd, ToolCallError, ToolCallTruncated
]

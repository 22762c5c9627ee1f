"""StreamEvent: what the ingress postprocessor produces and every API encoder consumes.

Content events come from the standalone parsers package; usage and finish are added here.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.parsers.events import (  # re-exported: the parsers own the content events
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallError,
    ToolCallStart,
    ToolCallTruncated,
)
from agentserve.protocol.requests import FinishReason

__all__ = [
    "Finish",
    "Logprobs",
    "TokenChoice",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallError",
    "ToolCallStart",
    "ToolCallTruncated",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class Finish:
    """End of the turn. `reason` is the engine's; encoders map it (e.g. to `tool_calls`)."""

    reason: FinishReason
    error: str | None = None
    stop_sequence: str | None = None  # the client's stop string that ended the turn, if one did


@dataclass(frozen=True, slots=True)
class TokenChoice:
    token: str  # the token's text
    logprob: float
    bytes: tuple[int, ...]  # its UTF-8 bytes (a token may hold part of a character)


@dataclass(frozen=True, slots=True)
class Logprobs:
    """Log probabilities of generated tokens, in order: (chosen token, its top alternatives) per token."""

    tokens: tuple[tuple[TokenChoice, tuple[TokenChoice, ...]], ...]

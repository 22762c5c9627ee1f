"""Typed objects that travel along the graph."""

from agentserve.protocol.constraints import OutputFormat
from agentserve.protocol.conversation import (
    Block,
    Conversation,
    ImageBlock,
    NamedToolChoice,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Turn,
)
from agentserve.protocol.requests import (
    AgentHints,
    EngineDelta,
    FinishReason,
    GenerationRequest,
    EngineRequest,
    Preprocessed,
    PromptReport,
    RouteDecision,
    RouteRequest,
    SamplingParams,
    TokenLogprob,
)

__all__ = [
    "AgentHints",
    "Block",
    "Conversation",
    "EngineDelta",
    "FinishReason",
    "GenerationRequest",
    "ImageBlock",
    "NamedToolChoice",
    "OutputFormat",
    "EngineRequest",
    "Preprocessed",
    "PromptReport",
    "ReasoningBlock",
    "RouteDecision",
    "RouteRequest",
    "SamplingParams",
    "TextBlock",
    "TokenLogprob",
    "ToolCallBlock",
    "ToolResultBlock",
    "ToolSpec",
    "Turn",
]

"""Anthropic Messages API: request schema, decode into a Conversation, encode StreamEvents, errors, models."""

from agentserve.apis.anthropic.decode import conversation, decode, parallel_tool_use, sign_thinking, thinking_omitted, thinking_switch
from agentserve.apis.anthropic.encode import MessageEncoder
from agentserve.apis.anthropic.schema import CountTokensRequest, MessagesRequest
from agentserve.apis.anthropic.signature import ThinkingSigner

__all__ = [
    "CountTokensRequest",
    "MessageEncoder",
    "MessagesRequest",
    "ThinkingSigner",
    "conversation",
    "decode",
    "parallel_tool_use",
    "sign_thinking",
    "thinking_omitted",
    "thinking_switch",
]

"""OpenAI Chat Completions: request schema, decode into a Conversation, encode StreamEvents."""

from agentserve.apis.chat_completions.decode import decode
from agentserve.apis.chat_completions.encode import ChatEncoder
from agentserve.apis.chat_completions.schema import ChatCompletionRequest

__all__ = ["ChatCompletionRequest", "ChatEncoder", "decode"]

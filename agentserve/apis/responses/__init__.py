"""OpenAI Responses API: request schema, decode into a Conversation, encode StreamEvents, sealing."""

from agentserve.apis.responses.decode import Decoded, decode, seal_reasoning
from agentserve.apis.responses.encode import ResponsesEncoder, new_id
from agentserve.apis.responses.schema import InputItem, InputTokensRequest, ResponsesRequest
from agentserve.apis.responses.sealing import Sealer

__all__ = ["Decoded", "InputItem", "InputTokensRequest", "ResponsesEncoder", "ResponsesRequest", "Sealer", "decode", "new_id", "seal_reasoning"]

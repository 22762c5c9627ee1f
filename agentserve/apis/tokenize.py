"""vLLM's /tokenize and /detokenize request and response shapes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentserve.apis.chat_completions.schema import Message, Tool


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    tools: list[Tool] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False

    @model_validator(mode="after")
    def _one_input(self) -> "TokenizeRequest":
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of `prompt` or `messages`")
        return self


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    tokens: list[int] = Field(min_length=0)


def tokenize_body(tokens: list[int], max_model_len: int, token_strs: list[str] | None) -> dict[str, Any]:
    return {"count": len(tokens), "max_model_len": max_model_len, "tokens": tokens, "token_strs": token_strs}


def detokenize_body(text: str) -> dict[str, Any]:
    return {"prompt": text}

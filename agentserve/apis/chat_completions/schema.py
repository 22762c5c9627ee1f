"""Request models for POST /v1/chat/completions (unknown fields are accepted and ignored)."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextPart(_Open):
    type: Literal["text"]
    text: str


class ImageURL(_Open):
    url: str


class ImagePart(_Open):
    type: Literal["image_url"]
    image_url: ImageURL


class FilePart(_Open):
    """A file (a PDF as `file_data`, a data URL, or an uploaded `file_id`): no engine here reads one (apis/media.py)."""

    type: Literal["file"]
    file: dict[str, Any] = Field(default_factory=dict)


ContentPart = Union[TextPart, ImagePart, FilePart]


class FunctionCall(_Open):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the field name some clients use instead


class FunctionDef(_Open):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Open):
    """A function tool. A `custom` (freeform) tool is read only to be refused by name (decode.py): custom tools
    are served on the Responses API."""

    type: Literal["function", "custom"] = "function"
    function: FunctionDef | None = None

    @model_validator(mode="after")
    def _function_given(self) -> "Tool":
        if self.type == "function" and self.function is None:
            raise ValueError("a function tool needs `function`")
        return self


class NamedFunction(_Open):
    name: str


class NamedToolChoice(_Open):
    type: Literal["function", "custom"] = "function"  # custom: refused by decode.py, as custom tools are
    function: NamedFunction | None = None

    @model_validator(mode="after")
    def _function_given(self) -> "NamedToolChoice":
        if self.type == "function" and self.function is None:
            raise ValueError("a function tool_choice needs `function`")
        return self


class StreamOptions(_Open):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ChatCompletionRequest(_Open):
    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = None
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    ignore_eos: bool = False
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    user: str | None = None

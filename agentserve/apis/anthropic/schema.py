"""Request models for POST /v1/messages and /v1/messages/count_tokens.

Open by design: unknown top-level fields (`context_management`, `output_config`, `metadata`, `service_tier`, ...)
and unknown keys inside blocks (`cache_control` with `ttl`/`scope`, `citations`, `caller`, ...) are accepted and
ignored, because Claude Code adds new ones every release and a strict server breaks it (harness-contracts B.4/B.5).
Known fields are validated with Anthropic's ranges so a bad value is a 400, never a 500.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextParam(_Open):
    type: Literal["text"]
    text: str


class ImageSource(_Open):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class ImageParam(_Open):
    type: Literal["image"]
    source: ImageSource


class DocumentParam(_Open):
    type: Literal["document"]
    source: dict[str, Any]
    title: str | None = None


class ToolUseParam(_Open):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultParam(_Open):
    type: Literal["tool_result"]
    tool_use_id: str
    # A string, or blocks (text, image, search_result, document, tool_reference, ...): read in decode.
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class ThinkingParam(_Open):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingParam(_Open):
    type: Literal["redacted_thinking"]
    data: str


class ServerToolUseParam(_Open):
    """A server tool's call (web_search, web_fetch, code_execution, ...) in an assistant turn from Anthropic's API."""

    type: Literal["server_tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


SERVER_TOOL_RESULT_TYPES = (
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
)


class ServerToolResultParam(_Open):
    """A server tool's result in an assistant turn: a list of hits, or one result or error object."""

    type: Literal[SERVER_TOOL_RESULT_TYPES]  # type: ignore[valid-type]
    tool_use_id: str
    content: list[Any] | dict[str, Any] | None = None


class MidConvSystemParam(_Open):
    """The block form of a mid-conversation system message."""

    type: Literal["mid_conv_system"]
    content: list[TextParam]


class ToolReferenceParam(_Open):
    type: Literal["tool_reference"]
    name: str


class ToolDefinitionParam(_Open):
    type: Literal["tool_definition"]
    definition: "ToolParam"


class ToolAdditionParam(_Open):
    """A tool in force from here on (a system message's block): one of `tools` marked `defer_loading`, by name, or a
    definition of its own."""

    type: Literal["tool_addition"]
    tool: Annotated[Union[ToolReferenceParam, ToolDefinitionParam], Field(discriminator="type")]


class ToolRemovalParam(_Open):
    type: Literal["tool_removal"]
    tool: ToolReferenceParam


ContentBlock = Annotated[
    Union[
        TextParam,
        ImageParam,
        DocumentParam,
        ToolUseParam,
        ToolResultParam,
        ThinkingParam,
        RedactedThinkingParam,
        ServerToolUseParam,
        ServerToolResultParam,
        MidConvSystemParam,
        ToolAdditionParam,
        ToolRemovalParam,
    ],
    Field(discriminator="type"),
]


class MessageParam(_Open):
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class ToolParam(_Open):
    """A custom tool (`input_schema` required), or a server tool with a dated `type` (not runnable here)."""

    name: str
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None  # not in force until a tool_addition or a tool search's tool_reference names it


ToolDefinitionParam.model_rebuild()


class _ToolChoiceBase(_Open):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAuto(_ToolChoiceBase):
    type: Literal["auto"]


class ToolChoiceAny(_ToolChoiceBase):
    type: Literal["any"]


class ToolChoiceTool(_ToolChoiceBase):
    type: Literal["tool"]
    name: str


class ToolChoiceNone(_Open):
    type: Literal["none"]


ToolChoice = Annotated[
    Union[ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool, ToolChoiceNone], Field(discriminator="type")
]


# "summarized" (the default) shows the reasoning; "omitted" and "updates" (Claude Code 2.1.3xx, with the
# thinking-display-updates beta: only the text written between tool calls is shown) hide it: blocks come back without
# text, signature only. Any other value is served as "summarized": a new display mode must not break a harness.
ThinkingDisplay = str
HIDDEN_THINKING_DISPLAYS = ("omitted", "updates")


class ThinkingEnabled(_Open):
    type: Literal["enabled"]
    budget_tokens: int
    display: ThinkingDisplay | None = None


class ThinkingDisabled(_Open):
    type: Literal["disabled"]


class ThinkingAdaptive(_Open):
    type: Literal["adaptive"]
    display: ThinkingDisplay | None = None


Thinking = Annotated[Union[ThinkingEnabled, ThinkingDisabled, ThinkingAdaptive], Field(discriminator="type")]


class CountTokensRequest(_Open):
    """What the prompt is rendered from: shared by create and count_tokens, so their counts agree."""

    model: str
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[TextParam] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


class OutputFormatParam(_Open):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Open):
    """`output_config`: the output's format (a JSON schema) and effort."""

    format: OutputFormatParam | None = None
    effort: str | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)  # 0 would be invalid for the engine
    top_k: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None
    output_format: OutputFormatParam | None = None
    output_config: OutputConfig | None = None

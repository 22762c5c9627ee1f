"""Request models for POST /v1/responses.

Open models (`extra="allow"`): unknown fields are accepted, and the Response object echoes the ones
the spec echoes. Input items may omit `id` (Codex never sends them) and, for messages, `type`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- content parts -------------------------------------------------------------
class InputText(_Open):
    type: Literal["input_text"]
    text: str


class OutputText(_Open):
    type: Literal["output_text"]
    text: str


class Refusal(_Open):
    type: Literal["refusal"]
    refusal: str


class InputImage(_Open):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class InputFile(_Open):
    type: Literal["input_file"]


ContentPart = Annotated[Union[InputText, OutputText, Refusal, InputImage, InputFile], Field(discriminator="type")]


# -- input items ---------------------------------------------------------------
class MessageItem(_Open):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_Open):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None  # a tool of a `namespace` tool (Codex's MCP servers)
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Open):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class CustomToolCallItem(_Open):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    namespace: str | None = None
    id: str | None = None


class CustomToolCallOutputItem(_Open):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[ContentPart]
    id: str | None = None


class LocalShellAction(_Open):
    type: Literal["exec"] = "exec"
    command: list[str]
    timeout_ms: int | None = None
    working_directory: str | None = None
    env: dict[str, str] | None = None
    user: str | None = None


class LocalShellCallItem(_Open):
    type: Literal["local_shell_call"]
    call_id: str | None = None
    action: LocalShellAction
    id: str | None = None
    status: str | None = None


class LocalShellCallOutputItem(_Open):
    type: Literal["local_shell_call_output"]
    id: str  # the call's id: the spec names the call this way for local_shell
    output: str


class SummaryText(_Open):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Open):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Open):
    type: Literal["reasoning"]
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    id: str | None = None
    status: str | None = None


class ItemReference(_Open):
    type: Literal["item_reference"]
    id: str


def _item_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("type", "message")
    return getattr(value, "type", None)


InputItem = Annotated[
    Union[
        Annotated[MessageItem, Tag("message")],
        Annotated[FunctionCallItem, Tag("function_call")],
        Annotated[FunctionCallOutputItem, Tag("function_call_output")],
        Annotated[CustomToolCallItem, Tag("custom_tool_call")],
        Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")],
        Annotated[LocalShellCallItem, Tag("local_shell_call")],
        Annotated[LocalShellCallOutputItem, Tag("local_shell_call_output")],
        Annotated[ReasoningItem, Tag("reasoning")],
        Annotated[ItemReference, Tag("item_reference")],
    ],
    Discriminator(_item_kind),
]


# -- tools ---------------------------------------------------------------------
class FunctionTool(_Open):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomToolFormat(_Open):
    type: Literal["text", "grammar"] = "text"
    syntax: str | None = None  # grammar: lark | regex
    definition: str | None = None


class CustomTool(_Open):
    type: Literal["custom"]
    name: str
    description: str | None = None
    format: CustomToolFormat | None = None


class NamespaceTool(_Open):
    """Function and custom tools grouped under one name (Codex sends each MCP server's tools this way); a call
    names its tool by `namespace` + `name`."""

    type: Literal["namespace"]
    name: str
    description: str | None = None
    tools: list[Annotated[Union[FunctionTool, CustomTool], Field(discriminator="type")]] = Field(default_factory=list)


class OtherTool(_Open):
    """Hosted tools (web_search, file_search, …) and local_shell: accepted and echoed."""

    type: str


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("function", "custom", "namespace") else "other"


Tool = Annotated[
    Union[
        Annotated[FunctionTool, Tag("function")],
        Annotated[CustomTool, Tag("custom")],
        Annotated[NamespaceTool, Tag("namespace")],
        Annotated[OtherTool, Tag("other")],
    ],
    Discriminator(_tool_kind),
]


class NamedToolChoice(_Open):
    type: Literal["function", "custom"]
    name: str


class Reasoning(_Open):
    effort: str | None = None
    summary: Literal["auto", "concise", "detailed", "none"] | None = None
    generate_summary: str | None = None


class TextConfig(_Open):
    """`text`: the output's format (`text` or a JSON schema) and verbosity."""

    format: dict[str, Any] | None = None
    verbosity: str | None = None


METADATA_MAX_PAIRS, METADATA_MAX_KEY, METADATA_MAX_VALUE = 16, 64, 512


def bounded_metadata(value: dict[str, str] | None) -> dict[str, str] | None:
    """`metadata` as OpenAI bounds it (16 pairs, keys up to 64 characters, values up to 512): it is echoed in every
    reply and stored with the response, so an unbounded one would let one key fill the store."""
    if value is None:
        return None
    if len(value) > METADATA_MAX_PAIRS:
        raise ValueError(f"metadata holds at most {METADATA_MAX_PAIRS} key-value pairs; got {len(value)}")
    for k, v in value.items():
        if len(k) > METADATA_MAX_KEY:
            raise ValueError(f"metadata keys are at most {METADATA_MAX_KEY} characters; '{k[:20]}...' has {len(k)}")
        if len(v) > METADATA_MAX_VALUE:
            raise ValueError(f"metadata values are at most {METADATA_MAX_VALUE} characters; '{k}' has {len(v)}")
    return value


class ResponsesRequest(_Open):
    model: str
    input: str | list[InputItem] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: Reasoning | None = None
    include: list[str] | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = None
    truncation: Literal["auto", "disabled"] | None = None
    store: bool | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    metadata: Annotated[dict[str, str] | None, AfterValidator(bounded_metadata)] = None
    service_tier: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    # Not in OpenAI's Responses API; vLLM's and agentserve's Chat Completions take it: repeatable sampling.
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    user: str | None = None
    safety_identifier: str | None = None
    background: bool | None = None
    # Responses over WebSocket: `false` prepares the request (Codex's pre-warm) without generating.
    generate: bool | None = None

    def includes_encrypted_reasoning(self) -> bool:
        return "reasoning.encrypted_content" in (self.include or [])


class InputTokensRequest(ResponsesRequest):
    """POST /v1/responses/input_tokens: a Responses request whose prompt is counted, not run."""

    model: str | None = None  # type: ignore[assignment]  # the served model when omitted

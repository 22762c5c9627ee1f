"""Chat Completions request -> GenerationRequest.

Image and file parts become what the model's media policy says (apis/media.py), named `messages[i].content[j]`:
images of user and tool messages reach a vision model (a tool message's follow its result); anything else is
refused or, where configured, a fixed placeholder.
"""

from __future__ import annotations

import json

from agentserve.apis.chat_completions.schema import ChatCompletionRequest, FilePart, ImagePart, Message, TextPart
from agentserve.apis.chat_completions.schema import NamedToolChoice as ChatToolChoice
from agentserve.apis.media import TEXT_ONLY, MediaPolicy, file_kind
from agentserve.apis.sampling_caps import CHAT_MAX_STOP, check_logit_bias_size, stop_strings
from agentserve.apis.unapplied import Unapplied, reject_unapplied
from agentserve.protocol import (
    AgentHints,
    Conversation,
    GenerationRequest,
    ImageBlock,
    NamedToolChoice,
    OutputFormat,
    ReasoningBlock,
    SamplingParams,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Turn,
)
from agentserve.protocol.errors import RequestError
from agentserve.protocol.requests import reasoning_effort


def _content_blocks(msg: Message, index: int, media: MediaPolicy) -> list[TextBlock | ImageBlock]:
    if msg.content is None:
        return []
    if isinstance(msg.content, str):
        return [TextBlock(text=msg.content)] if msg.content else []
    blocks: list[TextBlock | ImageBlock] = []
    for j, part in enumerate(msg.content):
        at = f"messages[{index}].content[{j}]"
        if isinstance(part, TextPart):
            blocks.append(TextBlock(text=part.text))
        elif isinstance(part, ImagePart):
            blocks.append(media.image(part.image_url.url, at, readable_here=msg.role in ("user", "tool")))
        elif isinstance(part, FilePart):
            blocks.append(TextBlock(text=media.document(file_kind(part.file.get("file_data")), at)))
    return blocks


def _text(blocks: list[TextBlock | ImageBlock]) -> str:
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def _turn(msg: Message, index: int, media: MediaPolicy) -> Turn:
    content = _content_blocks(msg, index, media)
    if msg.role in ("system", "developer"):
        return Turn(role="system", blocks=(TextBlock(text=_text(content)),))
    if msg.role == "user":
        return Turn(role="user", blocks=tuple(content) or (TextBlock(text=""),))
    if msg.role == "tool":
        if not msg.tool_call_id:
            raise RequestError(
                "invalid_request", "tool messages need tool_call_id", param=f"messages[{index}]"
            )
        images = [b for b in content if isinstance(b, ImageBlock)]
        return Turn(
            role="tool",
            blocks=(ToolResultBlock(tool_call_id=msg.tool_call_id, content=_text(content)), *images),
        )
    blocks: list = []
    reasoning = msg.reasoning_content or msg.reasoning
    if reasoning:
        blocks.append(ReasoningBlock(text=reasoning))
    blocks.extend(b for b in content if isinstance(b, TextBlock))
    for call in msg.tool_calls or []:
        args = call.function.arguments
        blocks.append(
            ToolCallBlock(
                id=call.id,
                name=call.function.name,
                arguments=args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
            )
        )
    return Turn(role="assistant", blocks=tuple(blocks))


# Fields that would change the output and are not applied here (see apis/unapplied.py).
UNAPPLIED: Unapplied = {
    "audio": None,
    "modalities": lambda v: list(v) != ["text"],
    "prediction": None,
    "functions": None,
    "function_call": None,
    "web_search_options": None,
    "verbosity": lambda v: v != "medium",
    # vLLM's own extensions, which a client pointed at vLLM may send
    "guided_json": None,
    "guided_regex": None,
    "guided_choice": None,
    "guided_grammar": None,
    "structured_outputs": None,
    "best_of": lambda v: v != 1,
    "use_beam_search": lambda v: v is True,
    "min_tokens": lambda v: v != 0,
    "bad_words": lambda v: bool(v),
    "allowed_token_ids": None,
    "stop_token_ids": lambda v: bool(v),
    "prompt_logprobs": None,
    "echo": lambda v: v is True,
    "include_stop_str_in_output": lambda v: v is True,
    "add_generation_prompt": lambda v: v is False,
    "continue_final_message": lambda v: v is True,
    "chat_template": None,
    "logits_processors": None,
    "documents": None,
}


def _logit_bias(raw: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    out: list[tuple[int, float]] = []
    check_logit_bias_size(len(raw or {}))
    for key, bias in (raw or {}).items():
        if not key.isdigit():
            raise RequestError("invalid_request", f"logit_bias keys are token ids, got '{key}'", param="logit_bias")
        if not -100 <= bias <= 100:
            raise RequestError(
                "invalid_request", f"logit_bias values lie in [-100, 100], got {bias} for {key}", param="logit_bias"
            )
        out.append((int(key), float(bias)))
    return tuple(out)


def _output_format(raw: dict | None) -> OutputFormat | None:
    """`response_format`: text (free), json_object, or json_schema {name, schema, strict}."""
    kind = (raw or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat(kind="json_object")
    spec = raw.get("json_schema") if kind == "json_schema" else None
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise RequestError(
            "invalid_request", "response_format needs type text, json_object, or json_schema with a `json_schema` "
            "object holding its `schema`", param="response_format",
        )
    return OutputFormat(kind="json_schema", schema_=spec.get("schema") or {}, param="response_format")


def _logprobs(req: ChatCompletionRequest) -> int | None:
    if not req.logprobs:
        if req.top_logprobs:
            raise RequestError("invalid_request", "top_logprobs needs logprobs: true", param="top_logprobs")
        return None
    return req.top_logprobs or 0


def _refuse_custom_tools(req: ChatCompletionRequest) -> None:
    """Custom (freeform) tools, and a choice forcing one, are served on the Responses API, where the call comes back
    as a `custom_tool_call` held to the tool's grammar; here they are a 400 naming the field, not a pydantic dump."""
    where = "custom tools (freeform input under a grammar) are served on the Responses API (POST /v1/responses); " \
        "Chat Completions here takes function tools"
    for i, t in enumerate(req.tools or []):
        if t.type == "custom":
            custom = (t.model_extra or {}).get("custom")
            name = custom.get("name") if isinstance(custom, dict) else None
            raise RequestError("invalid_request", f"tools[{i}] ({name or 'unnamed'}): {where}", param=f"tools[{i}]")
    if isinstance(req.tool_choice, ChatToolChoice) and req.tool_choice.type == "custom":
        raise RequestError("invalid_request", f"tool_choice forces a custom tool: {where}", param="tool_choice")


def decode(
    req: ChatCompletionRequest,
    *,
    request_id: str,
    model: str,
    session_id: str | None = None,
    media: MediaPolicy = TEXT_ONLY,  # the model's images and documents policy (apis/media.py)
) -> GenerationRequest:
    if req.n != 1:
        raise RequestError(
            "invalid_request", "only n=1 is supported (one choice per request; send n requests instead)", param="n"
        )
    reject_unapplied(req, UNAPPLIED)
    _refuse_custom_tools(req)
    tools = tuple(
        ToolSpec(
            name=t.function.name,
            description=t.function.description,
            parameters=t.function.parameters or {"type": "object", "properties": {}},
            strict=bool(t.function.strict),
        )
        for t in req.tools or []
        if t.function is not None
    )
    choice = req.tool_choice or ("auto" if tools else "none")
    if not isinstance(choice, str):
        assert choice.function is not None  # custom choices were refused above
        if choice.function.name not in {t.name for t in tools}:
            raise RequestError(
                "invalid_request",
                f"tool_choice names '{choice.function.name}', which is not in tools",
                param="tool_choice",
            )
        choice = NamedToolChoice(name=choice.function.name)
    elif choice == "required" and not tools:
        raise RequestError(
            "invalid_request", "tool_choice 'required' needs at least one tool", param="tool_choice"
        )
    stop = stop_strings((req.stop,) if isinstance(req.stop, str) else req.stop or (), param="stop",
                        max_count=CHAT_MAX_STOP)
    sampling = SamplingParams(
        max_tokens=req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=-1 if req.top_k is None else req.top_k,
        min_p=req.min_p or 0.0,
        seed=req.seed,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=req.repetition_penalty or 1.0,
        stop=stop,
        ignore_eos=req.ignore_eos,
        logit_bias=_logit_bias(req.logit_bias),
        logprobs=_logprobs(req),
    )
    return GenerationRequest(
        request_id=request_id,
        model=model,
        conversation=Conversation(
            turns=tuple(_turn(m, i, media) for i, m in enumerate(req.messages)),
            tools=tools,
            tool_choice=choice,
            parallel_tool_calls=req.parallel_tool_calls is not False,
        ),
        sampling=sampling,
        hints=AgentHints(session_id=session_id or req.user),
        template_kwargs=dict(req.chat_template_kwargs or {}),
        output_format=_output_format(req.response_format),
        reasoning_effort=reasoning_effort(req.reasoning_effort, "reasoning_effort"),
    )

"""Anthropic Messages request -> GenerationRequest (API-neutral), keeping every block in its original order.

- `system` (string or text blocks) becomes the first system turn; `role: "system"` messages and
  `mid_conv_system` blocks become system turns in place, so earlier turns render exactly as before.
- Consecutive text blocks of a user or system turn are joined with "\n" (Claude Code sends `<system-reminder>`
  blocks next to the prompt); assistant text is kept block by block, as generated.
- Assistant thinking must carry a signature this server issued over that exact text, to this caller, at that place
  in the conversation (apis/origin.py): anything else is refused as Anthropic refuses an invalid signature (400).
  A block returned with its text omitted (`thinking.display: "omitted"`) comes back with empty `thinking`: its
  signature carries the text, which is what the prompt renders (apis/anthropic/signature.py).
  `redacted_thinking` is opaque (this server never issues it and the model cannot read it), so it is accepted and
  left out of the prompt.
- `tool_result` content (string or blocks) and `is_error` reach the prompt; `cache_control` is accepted anywhere
  and ignored (the engine's prefix cache is automatic).
- Images and documents, in user content and in tool results, become what the model's media policy says
  (apis/media.py): images for a vision model (a tool result's follow it in the turn), else a 400 naming the block
  or a fixed placeholder; plain-text documents are text for every model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from agentserve.apis.anthropic.schema import (
    HIDDEN_THINKING_DISPLAYS,
    CountTokensRequest,
    DocumentParam,
    ImageParam,
    MessageParam,
    MessagesRequest,
    MidConvSystemParam,
    RedactedThinkingParam,
    ServerToolResultParam,
    ServerToolUseParam,
    TextParam,
    ThinkingAdaptive,
    ThinkingEnabled,
    ThinkingParam,
    ToolAdditionParam,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolParam,
    ToolReferenceParam,
    ToolRemovalParam,
    ToolResultParam,
    ToolUseParam,
)
from agentserve.apis.anthropic.client_tools import client_tool_spec, is_client_tool
from agentserve.apis.anthropic.server_tools import call_text, is_server_tool, referenced_tools, result_text
from agentserve.apis.anthropic.signature import ThinkingSigner
from agentserve.apis.media import TEXT_ONLY, MediaPolicy
from agentserve.apis.origin import Origin, Origins
from agentserve.apis.sampling_caps import ANTHROPIC_MAX_STOP, stop_strings
from agentserve.apis.unapplied import Unapplied, reject_unapplied
from agentserve.protocol import (
    AgentHints,
    Block,
    Conversation,
    GenerationRequest,
    ImageBlock,
    NamedToolChoice,
    OutputFormat,
    ReasoningBlock,
    SamplingParams,
    TextBlock,
    ToolCallBlock,
    ToolChangeBlock,
    ToolResultBlock,
    ToolSpec,
    Turn,
)
from agentserve.protocol.errors import RequestError
from agentserve.protocol.requests import reasoning_effort

def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError("invalid_request", message, param=param)


def _joined_text(parts: list[str]) -> list[Block]:
    text = "\n".join(p for p in parts if p)
    return [TextBlock(text=text)] if text else []


def _image(source: Any, where: str, media: MediaPolicy) -> ImageBlock | TextBlock:
    """An image block's source (a user block's, or a raw one inside a tool result) as the media policy has it."""
    src = source if isinstance(source, dict) else {}
    if src.get("type") == "url" and isinstance(src.get("url"), str) and src["url"]:
        return media.image(src["url"], where)
    if src.get("type") == "base64" and all(isinstance(src.get(k), str) and src[k] for k in ("data", "media_type")):
        return media.image(f"data:{src['media_type']};base64,{src['data']}", where)
    return media.image("", where)  # a source without an image in it (a Files API id, ...): no image to show


def _document_text(source: Any, where: str, media: MediaPolicy) -> str:
    """A document's text: its own for plain-text sources; any other (a PDF, a URL, a file) is media no engine here
    reads, and the policy decides."""
    src = source if isinstance(source, dict) else {}
    kind = src.get("type")
    if kind == "text" and isinstance(src.get("data"), str):
        return src["data"]
    if kind == "content" and isinstance(src.get("content"), (str, list)):
        content = src["content"]
        if isinstance(content, str):
            return content
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict) and isinstance(c.get("text"), str))
    if kind == "base64" and isinstance(src.get("media_type"), str):
        return media.document(f"{src['media_type']} documents", where)
    return media.document(f"documents of source type '{kind}'" if isinstance(kind, str) else "this document", where)


def _tool_result(block: ToolResultParam, where: str, media: MediaPolicy) -> list[Block]:
    """The result, then the images it carries for a vision model (their place: right after it)."""
    images: list[Block] = []
    if block.content is None or isinstance(block.content, str):
        content = block.content or ""
    else:
        parts: list[str] = []
        for k, item in enumerate(block.content):
            kind = item.get("type")
            if isinstance(item.get("text"), str):
                parts.append(item["text"])
            elif kind == "image":
                image = _image(item.get("source"), f"{where}.content.{k}", media)
                if isinstance(image, TextBlock):
                    parts.append(image.text)
                else:
                    images.append(image)
            elif kind == "tool_reference" and isinstance(item.get("tool_name"), str):
                parts.append(f"Tool: {item['tool_name']}")
            elif kind == "document":
                parts.append(_document_text(item.get("source"), f"{where}.content.{k}", media))
        content = "\n".join(parts)
    result = ToolResultBlock(tool_call_id=block.tool_use_id, content=content, is_error=bool(block.is_error))
    return [result, *images]


class _TurnBuilder:
    """Turns in order; a user message may yield several (a mid_conv_system block splits it in place)."""

    def __init__(
        self, signer: ThinkingSigner | None, caller: str, origins: Origins | None = None, tools: "_Tools | None" = None,
        media: MediaPolicy = TEXT_ONLY,
    ) -> None:
        self.turns: list[Turn] = []
        self._signer = signer
        self._media = media
        self._origins = origins if origins is not None else Origins(caller)
        self._tools = tools if tools is not None else _Tools((), {})

    def origin(self) -> Origin:
        """Where an assistant message after the turns so far stands (what its thinking is signed for)."""
        return self._origins.after(self.turns)

    def _push(self, role: str, blocks: list[Block]) -> None:
        if blocks:
            self.turns.append(Turn(role=role, blocks=tuple(blocks)))  # type: ignore[arg-type]

    def system(self, texts: list[str]) -> None:
        self._push("system", _joined_text(texts))

    def user(self, msg: MessageParam, where: str) -> None:
        if isinstance(msg.content, str):
            self._push("user", _joined_text([msg.content]))
            return
        blocks: list[Block] = []
        texts: list[str] = []  # a run of consecutive text blocks, joined when the run ends

        def end_text_run() -> None:
            blocks.extend(_joined_text(texts))
            texts.clear()

        for j, block in enumerate(msg.content):
            at = f"{where}.content.{j}"
            if isinstance(block, TextParam):
                texts.append(block.text)
            elif isinstance(block, DocumentParam):
                texts.append(_document_text(block.source, at, self._media))
            elif isinstance(block, ImageParam):
                image = _image(block.source.model_dump(), at, self._media)
                if isinstance(image, TextBlock):  # a placeholder: text, joined with the text around it
                    texts.append(image.text)
                else:
                    end_text_run()
                    blocks.append(image)
            elif isinstance(block, ToolResultParam):
                end_text_run()
                blocks.extend(_tool_result(block, at, self._media))
            elif isinstance(block, MidConvSystemParam):
                end_text_run()
                self._push("user", blocks[:])
                blocks.clear()
                self.system([t.text for t in block.content])
            else:
                raise _bad(f"{at}: a user message cannot contain a `{block.type}` block", at)
        end_text_run()
        self._push("user", blocks)
        self._load_referenced([
            item["tool_name"] for block in msg.content if isinstance(block, ToolResultParam)
            and isinstance(block.content, list) for item in block.content
            if item.get("type") == "tool_reference" and isinstance(item.get("tool_name"), str)
        ])

    def _load_referenced(self, names: list[str]) -> None:
        """Deferred tools a tool search returned (`tool_reference`s in a tool result, or a server-side search's
        result) come into force right after it."""
        if not names:
            return
        in_force = self.in_force()
        added = tuple({n: self._tools.deferred[n] for n in names if n in self._tools.deferred and n not in in_force}
                      .values())
        if added:
            self._push("system", [ToolChangeBlock(added=added)])

    def in_force(self) -> set[str]:
        names = {t.name for t in self._tools.top}
        for turn in self.turns:
            for b in turn.blocks:
                if isinstance(b, ToolChangeBlock):
                    names.difference_update(b.removed)
                    names.update(t.name for t in b.added)
        return names

    def system_message(self, msg: MessageParam, where: str) -> None:
        """A `role: "system"` message: text, and tools coming into force or leaving (in order, one system turn)."""
        content = [msg.content] if isinstance(msg.content, str) else msg.content
        blocks: list[Block] = []
        texts: list[str] = []
        for j, block in enumerate(content):
            at = f"{where}.content.{j}"
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, TextParam):
                texts.append(block.text)
            elif isinstance(block, (ToolAdditionParam, ToolRemovalParam)):
                change = self._change(block, at)
                last = blocks[-1] if blocks and not texts else None
                if isinstance(last, ToolChangeBlock) and not (
                    {t.name for t in (*last.added, *change.added)} & {*last.removed, *change.removed}
                ):  # consecutive changes of different tools: one list in the prompt
                    change = ToolChangeBlock(added=last.added + change.added, removed=last.removed + change.removed)
                    blocks.pop()
                blocks.extend(_joined_text(texts))
                texts.clear()
                blocks.append(change)
            else:
                raise _bad(f"{at}: a system message can only contain text, tool_addition and tool_removal blocks", at)
        blocks.extend(_joined_text(texts))
        self._push("system", blocks)

    def _change(self, block: ToolAdditionParam | ToolRemovalParam, at: str) -> ToolChangeBlock:
        if isinstance(block, ToolRemovalParam):
            return ToolChangeBlock(removed=(block.tool.name,))
        if isinstance(block.tool, ToolReferenceParam):
            spec = self._tools.any.get(block.tool.name)
            if spec is None:
                raise _bad(f"{at}.tool.name: no tool named '{block.tool.name}' in `tools`", f"{at}.tool.name")
            return ToolChangeBlock(added=(spec,))
        spec = _spec(block.tool.definition, f"{at}.tool.definition")
        if spec is None:
            raise _bad(f"{at}.tool.definition: a server tool cannot be added here (nothing here can run it)",
                       f"{at}.tool.definition")
        return ToolChangeBlock(added=(spec,))

    def assistant(self, msg: MessageParam, where: str) -> None:
        if isinstance(msg.content, str):
            self._push("assistant", [TextBlock(text=msg.content)] if msg.content else [])
            return
        blocks: list[Block] = []
        referenced: list[str] = []  # tools a server-side tool search loaded
        origin = self.origin()
        for j, block in enumerate(msg.content):
            at = f"{where}.content.{j}"
            if isinstance(block, TextParam):
                blocks.append(TextBlock(text=block.text))
            elif isinstance(block, ThinkingParam):
                text = block.thinking
                if self._signer is not None:  # a block sent with its text omitted gets it back from its signature
                    text = self._signer.reasoning(block.thinking, block.signature, origin)
                    if text is None:
                        raise _bad(f"{at}: Invalid `signature` in `thinking` block", at)
                blocks.append(ReasoningBlock(text=text, signature=block.signature))
            elif isinstance(block, RedactedThinkingParam):
                continue  # opaque: accepted, never rendered
            elif isinstance(block, ToolUseParam):
                args = json.dumps(block.input, ensure_ascii=False)
                blocks.append(ToolCallBlock(id=block.id, name=block.name, arguments=args))
            elif isinstance(block, ServerToolUseParam):
                blocks.append(TextBlock(text=call_text(block)))
            elif isinstance(block, ServerToolResultParam):
                blocks.append(TextBlock(text=result_text(block)))
                referenced.extend(referenced_tools(block))
            else:
                raise _bad(f"{at}: an assistant message cannot contain a `{block.type}` block", at)
        self._push("assistant", blocks)
        self._load_referenced(referenced)


def sign_thinking(messages: Sequence[dict[str, Any]], signer: ThinkingSigner, *, caller: str) -> list[dict[str, Any]]:
    """`messages` with every thinking block whose `signature` is empty signed where it stands, as this server issues
    it to `caller`: the history a harness would send back, for benchmarks and tests that build one the server did
    not generate. Blocks already signed are kept as they are."""
    builder = _TurnBuilder(None, caller)
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(messages):
        msg = MessageParam.model_validate(raw)
        if msg.role == "assistant":
            if isinstance(raw["content"], list):
                origin = builder.origin()
                raw = {**raw, "content": [
                    {**b, "signature": signer.sign(b["thinking"], origin)}
                    if b.get("type") == "thinking" and not b.get("signature") else b
                    for b in raw["content"]
                ]}
            builder.assistant(msg, f"messages.{i}")
        elif msg.role == "user":
            builder.user(msg, f"messages.{i}")
        out.append(raw)  # a system message: no part of any position
    return out


def system_turns(req: CountTokensRequest) -> int:
    """How many turns the `system` field becomes (0 or 1): the turns before the messages'."""
    return 1 if _joined_text(_system_texts(req.system)) else 0


def _system_texts(system: str | list[TextParam] | None) -> list[str]:
    if system is None:
        return []
    if isinstance(system, str):
        return [system]
    return [b.text for b in system]


@dataclass(frozen=True, slots=True)
class _Tools:
    top: tuple[ToolSpec, ...]  # in force from the start: listed by the template at the top
    deferred: dict[str, ToolSpec]  # `defer_loading`: in force once a tool_addition or a tool search names them

    @property
    def any(self) -> dict[str, ToolSpec]:
        return {**{t.name: t for t in self.top}, **self.deferred}


def _spec(tool: ToolParam, where: str) -> ToolSpec | None:
    """A custom tool's spec, or an Anthropic-defined client tool's (bash_..., text_editor_...: the harness runs it);
    None for a server tool (web_search_..., code_execution_..., unknown types): nothing here can run it."""
    if is_client_tool(tool):
        return client_tool_spec(tool)
    if is_server_tool(tool):
        return None
    if tool.input_schema is None:
        raise _bad(f"{where}.input_schema: Field required", f"{where}.input_schema")
    return ToolSpec(name=tool.name, description=tool.description, parameters=tool.input_schema, strict=bool(tool.strict))


def _tools(req: CountTokensRequest) -> _Tools:
    top: list[ToolSpec] = []
    deferred: dict[str, ToolSpec] = {}
    for i, tool in enumerate(req.tools or []):
        spec = _spec(tool, f"tools.{i}")
        if spec is None:
            continue
        if tool.defer_loading:
            deferred[spec.name] = spec
        else:
            top.append(spec)
    return _Tools(tuple(top), deferred)


def _tool_choice(req: CountTokensRequest, tools: tuple[ToolSpec, ...]):
    choice = req.tool_choice
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, ToolChoiceNone):
        return "none"
    servers = {t.name for t in req.tools or () if is_server_tool(t)}
    if (isinstance(choice, ToolChoiceTool) and choice.name in servers) or (
        isinstance(choice, ToolChoiceAny) and servers and not tools
    ):  # forced to a tool nothing here runs: the model answers in text (apis/anthropic/server_tools.py)
        return "none"
    if isinstance(choice, (ToolChoiceAny, ToolChoiceTool)) and not tools:
        raise _bad(f"tool_choice.type '{choice.type}' needs at least one tool in `tools`", "tool_choice")
    if isinstance(choice, ToolChoiceTool):
        if choice.name not in {t.name for t in tools}:
            raise _bad(f"tool_choice names '{choice.name}', which is not in `tools`", "tool_choice")
        return NamedToolChoice(name=choice.name)
    if isinstance(choice, ToolChoiceAny):
        return "required"
    return "auto" if tools else "none"


@dataclass(frozen=True, slots=True)
class KnownMessages:
    """Leading messages of a request as an earlier request of the same caller's session had them, decoded
    (apis/anthropic/session_memo.py): their turns and the origin walk after them are taken, not built again."""

    count: int  # how many of the request's messages
    turns: tuple[Turn, ...]  # the turns they became (after the `system` field's)
    origins: tuple[bytes, bytes]  # Origins.state() after them
    media: MediaPolicy = TEXT_ONLY  # the policy they were decoded under (another model's may decode them otherwise)


def conversation(
    req: CountTokensRequest,
    signer: ThinkingSigner | None,
    *,
    caller: str,
    origins: Origins | None = None,
    known: KnownMessages | None = None,
    media: MediaPolicy = TEXT_ONLY,
) -> Conversation:
    """The conversation the prompt is rendered from (create and count_tokens share it); thinking verified for
    `caller` (signer None: not verified, for tools that only render). `origins`: the caller's, walked along as the
    turns are built, so `origins.after(turns)` then names the reply's position without a second pass. `known`: the
    leading messages already decoded (their signatures were verified for this caller at these places), taken only if
    decoded under this `media` policy (the model's: apis/media.py)."""
    origins = origins if origins is not None else Origins(caller)
    tools = _tools(req)
    builder = _TurnBuilder(signer, caller, origins, tools, media)
    builder.system(_system_texts(req.system))
    start = 0
    if known is not None and known.media == media:
        builder.turns.extend(known.turns)
        origins.resume(known.origins, len(builder.turns))
        start = known.count
    for i in range(start, len(req.messages)):
        msg = req.messages[i]
        where = f"messages.{i}"
        if msg.role == "user":
            builder.user(msg, where)
        elif msg.role == "assistant":
            builder.assistant(msg, where)
        else:
            builder.system_message(msg, where)
    if not builder.turns:
        raise _bad("messages: at least one message with content is required", "messages")
    conv = Conversation(turns=tuple(builder.turns), tools=tools.top, parallel_tool_calls=parallel_tool_use(req))
    return conv.model_copy(update={"tool_choice": _tool_choice(req, conv.tools_in_force())})


def thinking_switch(req: CountTokensRequest) -> bool | None:
    """`thinking` -> the API-neutral switch (None: the client did not say; the preprocessor decides)."""
    return None if req.thinking is None else req.thinking.type != "disabled"


def thinking_omitted(req: CountTokensRequest) -> bool:
    """`thinking.display` "omitted" (or "updates"): thinking blocks go out without their text (the signature
    carries it)."""
    return (isinstance(req.thinking, (ThinkingEnabled, ThinkingAdaptive))
            and req.thinking.display in HIDDEN_THINKING_DISPLAYS)


def parallel_tool_use(req: CountTokensRequest) -> bool:
    return not getattr(req.tool_choice, "disable_parallel_tool_use", None)


def _check_thinking_budget(req: MessagesRequest, reasons: bool) -> None:
    """`enabled` asks for a reasoning budget: a model that cannot reason cannot honour it, and saying so beats a silent
    answer without thinking (`adaptive` leaves it to the model, so it is served either way)."""
    if isinstance(req.thinking, ThinkingEnabled):
        if not reasons:
            raise _bad(f"thinking.type 'enabled' cannot be honoured: model '{req.model}' does not reason; send "
                       "'adaptive' or leave `thinking` out", "thinking")
        if req.thinking.budget_tokens < 1024:
            raise _bad("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                       "thinking.budget_tokens")
        if req.thinking.budget_tokens >= req.max_tokens:
            raise _bad("`max_tokens` must be greater than `thinking.budget_tokens`", "max_tokens")


# Fields that would change the output and are not applied here (see apis/unapplied.py).
UNAPPLIED: Unapplied = {
    "mcp_servers": lambda v: bool(v),
    "container": None,
}


def _output_format(req: MessagesRequest) -> OutputFormat | None:
    """`output_config.format` (current) or `output_format` (the structured-outputs beta): a JSON schema."""
    if req.output_config is not None and req.output_config.format is not None:
        return OutputFormat(kind="json_schema", schema_=req.output_config.format.schema_, param="output_config.format")
    if req.output_format is not None:
        return OutputFormat(kind="json_schema", schema_=req.output_format.schema_, param="output_format")
    return None


def decode(
    req: MessagesRequest,
    *,
    request_id: str,
    model: str,
    signer: ThinkingSigner | None,
    caller: str,
    session_id: str | None = None,
    origins: Origins | None = None,  # see `conversation`
    known: KnownMessages | None = None,  # see `conversation`
    media: MediaPolicy = TEXT_ONLY,  # the model's images and documents policy (apis/media.py)
    reasons: bool = True,  # the model writes reasoning (it has a reasoning parser)
) -> GenerationRequest:
    _check_thinking_budget(req, reasons)
    reject_unapplied(req, UNAPPLIED)
    user_id = (req.metadata or {}).get("user_id")
    sampling = SamplingParams(
        max_tokens=req.max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=-1 if not req.top_k else req.top_k,
        stop=stop_strings(req.stop_sequences or (), param="stop_sequences", max_count=ANTHROPIC_MAX_STOP),
        thinking_budget=req.thinking.budget_tokens if isinstance(req.thinking, ThinkingEnabled) else None,
    )
    return GenerationRequest(
        request_id=request_id,
        model=model,
        conversation=conversation(req, signer, caller=caller, origins=origins, known=known, media=media),
        sampling=sampling,
        hints=AgentHints(session_id=session_id or (user_id if isinstance(user_id, str) else None)),
        thinking=thinking_switch(req),
        output_format=_output_format(req),
        reasoning_effort=reasoning_effort(req.output_config.effort if req.output_config else None, "output_config.effort"),
    )

"""Responses request -> GenerationRequest, keeping item order.

Consecutive assistant-side items (reasoning, assistant messages, function/custom/local-shell calls)
become one assistant Turn whose blocks stay in input order, so reasoning -> call -> reasoning -> call
replays interleaved. Reasoning carrying our `encrypted_content` is restored to the exact text the
model generated; the blob must have been sealed for this caller at this place in the conversation
(apis/origin.py), else it is refused as a tampered one (400 `invalid_encrypted_content`). A reasoning item
without `encrypted_content` carries nothing that proves its `content` or summary came from the model, so it is
not rendered as the model's reasoning: it is left out of the prompt, as Anthropic's `redacted_thinking` is
(a client that did not ask for `reasoning.encrypted_content`, such as Codex without a model profile, sends its
reasoning items back so; refusing them would end its session).
`input_image` and `input_file` parts, in messages and in tool outputs, become what the model's media policy says
(apis/media.py), named `input[i].content[j]` / `input[i].output[j]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from pydantic import TypeAdapter

from agentserve.apis.responses import schema as s
from agentserve.apis.media import TEXT_ONLY, MediaPolicy, file_kind
from agentserve.apis.origin import Origin, Origins
from agentserve.apis.responses.sealing import SealedReasoning, SealError, Sealer
from agentserve.apis.unapplied import Unapplied, reject_unapplied
from agentserve.protocol import (
    FREEFORM_ARGUMENT,
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
    ToolGrammar,
    ToolResultBlock,
    ToolSpec,
    Turn,
)
from agentserve.protocol.errors import RequestError
from agentserve.protocol.requests import reasoning_effort

ToolKind = Literal["function", "custom", "local_shell"]
_ITEM: TypeAdapter[Any] = TypeAdapter(s.InputItem)

LOCAL_SHELL = "local_shell"
_LOCAL_SHELL_PARAMS = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "argv of the command"},
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
    },
    "required": ["command"],
}


@dataclass(frozen=True)
class Decoded:
    request: GenerationRequest
    origin: Origin  # where the reply's reasoning stands (apis/origin.py): after the whole conversation
    tool_kinds: dict[str, ToolKind] = field(default_factory=dict)  # tool name -> how its calls are encoded
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # name the model sees -> (namespace, name)


def qualified_name(namespace: str | None, name: str) -> str:
    """The one name a namespaced tool has for the model. Codex's MCP namespaces end in `__` (`mcp__server__`) and
    join as they are, which gives the flat MCP names models were trained on; others join with `__`."""
    if not namespace:
        return name
    return namespace + name if namespace.endswith("_") else f"{namespace}__{name}"


def custom_tool_arguments(tool_input: str) -> str:
    """How a custom (freeform) tool call's input is rendered as hermes JSON arguments, and parsed back. The exact
    form (json.dumps, non-ASCII kept) is also what a grammar-constrained call is written in (preprocess/freeform.py),
    so a replayed call is the text the model generated."""
    return json.dumps({FREEFORM_ARGUMENT: tool_input}, ensure_ascii=False)


_INPUT_OPEN = "{" + json.dumps(FREEFORM_ARGUMENT) + ': "'  # how custom_tool_arguments starts


def custom_tool_input(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except ValueError:
        return _cut_input(arguments)
    if isinstance(value, dict) and isinstance(value.get(FREEFORM_ARGUMENT), str) and len(value) == 1:
        return value[FREEFORM_ARGUMENT]
    return arguments


def _cut_input(arguments: str) -> str:
    """A call cut off inside its input (max_output_tokens): the text written so far, not the JSON it sits in. The
    end may split an escape (`\\u00`) or hold the closing quote: the longest decodable prefix of the last few
    characters' cuts. Anything else is returned as it is."""
    if not arguments.startswith(_INPUT_OPEN):
        return arguments
    body = arguments[len(_INPUT_OPEN):]
    for end in range(len(body), max(len(body) - 8, -1), -1):
        try:
            return json.loads('"' + body[:end] + '"')
        except ValueError:
            continue
    return arguments


def _custom_spec(tool: s.CustomTool) -> ToolSpec:
    """A function with one string argument; a `grammar` format (lark or regex) constrains that string while decoding,
    and stays in the description, which tells the model the language it is held to."""
    desc = tool.description or ""
    fmt = tool.format
    grammar = None
    if fmt is not None and fmt.type == "grammar" and fmt.definition:
        desc += f"\n\nThe input must match this {fmt.syntax or 'lark'} grammar:\n{fmt.definition}"
        if (fmt.syntax or "lark") in ("lark", "regex"):
            grammar = ToolGrammar(syntax=fmt.syntax or "lark", definition=fmt.definition)
    return ToolSpec(
        name=tool.name,
        description=desc.strip() or None,
        parameters={
            "type": "object",
            "properties": {FREEFORM_ARGUMENT: {"type": "string", "description": "the raw freeform input"}},
            "required": [FREEFORM_ARGUMENT],
        },
        grammar=grammar,
    )


def _function_spec(tool: s.FunctionTool, name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=tool.description,
        parameters=tool.parameters or {"type": "object", "properties": {}},
        strict=bool(tool.strict),
    )


def _tools(
    tools: list[Any],
) -> tuple[tuple[ToolSpec, ...], dict[str, ToolKind], dict[str, tuple[str, str]]]:
    specs: list[ToolSpec] = []
    kinds: dict[str, ToolKind] = {}
    namespaces: dict[str, tuple[str, str]] = {}
    for t in tools:
        if isinstance(t, s.FunctionTool):
            specs.append(_function_spec(t, t.name))
            kinds[t.name] = "function"
        elif isinstance(t, s.CustomTool):
            specs.append(_custom_spec(t))
            kinds[t.name] = "custom"
        elif isinstance(t, s.NamespaceTool):
            for inner in t.tools:
                name = qualified_name(t.name, inner.name)
                namespaces[name] = (t.name, inner.name)
                if isinstance(inner, s.FunctionTool):
                    specs.append(_function_spec(inner, name))
                    kinds[name] = "function"
                else:
                    specs.append(_custom_spec(inner).model_copy(update={"name": name}))
                    kinds[name] = "custom"
        elif t.type == "local_shell":
            specs.append(
                ToolSpec(name=LOCAL_SHELL, description="Run a command on the local machine.", parameters=_LOCAL_SHELL_PARAMS)
            )
            kinds[LOCAL_SHELL] = "local_shell"
        # hosted tools (web_search, file_search, …) have no local executor: echoed, not offered
    return tuple(specs), kinds, namespaces


def _tool_choice(choice: Any, kinds: dict[str, ToolKind]) -> Any:
    if choice is None:
        return "auto" if kinds else "none"
    if isinstance(choice, str):
        if choice == "required" and not kinds:
            raise RequestError("invalid_request", "tool_choice 'required' needs at least one tool", param="tool_choice")
        return choice
    if isinstance(choice, s.NamedToolChoice):
        if choice.name not in kinds:
            raise RequestError(
                "invalid_request", f"tool_choice names '{choice.name}', which is not in tools", param="tool_choice"
            )
        if kinds[choice.name] != choice.type:  # a forced call is written in its tool's kind: say which one it is
            raise RequestError(
                "invalid_request",
                f"tool_choice names the {choice.type} tool '{choice.name}', but tools declare '{choice.name}' as a "
                f"{kinds[choice.name]} tool",
                param="tool_choice",
            )
        return NamedToolChoice(name=choice.name)
    if choice.get("type") == "local_shell" and LOCAL_SHELL in kinds:
        return NamedToolChoice(name=LOCAL_SHELL)
    return "required" if choice.get("mode") == "required" and kinds else ("auto" if kinds else "none")


def _parts(parts: list[Any], where: str, media: MediaPolicy, *, readable: bool = True) -> list[TextBlock | ImageBlock]:
    """Content parts in order, adjacent text joined; `where` names the list (`input[3].content`). `readable`: a
    place the model may be shown images (user messages, tool outputs)."""
    out: list[TextBlock | ImageBlock] = []
    texts: list[str] = []
    for j, part in enumerate(parts):
        at = f"{where}[{j}]"
        if isinstance(part, (s.InputText, s.OutputText)):
            texts.append(part.text)
        elif isinstance(part, s.Refusal):
            texts.append(part.refusal)
        elif isinstance(part, s.InputImage):
            if not part.image_url and media.images:
                raise RequestError("invalid_request", f"{at}: input_image needs image_url (file_id is not supported)",
                                   param=at)
            block = media.image(part.image_url or "", at, readable_here=readable)
            if isinstance(block, TextBlock):
                texts.append(block.text)
            else:
                if "".join(texts):
                    out.append(TextBlock(text="".join(texts)))
                texts.clear()
                out.append(block)
        elif isinstance(part, s.InputFile):
            texts.append(media.document(file_kind(getattr(part, "file_data", None)), at))
        else:
            raise RequestError("invalid_request", f"content part '{part.type}' is not supported", param=at)
    if "".join(texts):
        out.append(TextBlock(text="".join(texts)))
    return out


def _message_blocks(item: s.MessageItem, where: str, media: MediaPolicy) -> list[TextBlock | ImageBlock]:
    if isinstance(item.content, str):
        return [TextBlock(text=item.content)]
    return _parts(item.content, f"{where}.content", media, readable=item.role == "user") or [TextBlock(text="")]


class _Decoder:
    def __init__(self, sealer: Sealer, model: str, caller: str, media: MediaPolicy = TEXT_ONLY) -> None:
        self._sealer = sealer
        self._model = model
        self._media = media
        self._origins = Origins(caller)
        self.turns: list[Turn] = []
        self._assistant: list[Any] = []
        self._results: list[Any] = []

    def _flush(self) -> None:
        if self._assistant:
            self.turns.append(Turn(role="assistant", blocks=tuple(self._assistant)))
            self._assistant = []
        if self._results:
            self.turns.append(Turn(role="tool", blocks=tuple(self._results)))
            self._results = []

    def _assistant_block(self, block: Any) -> None:
        if self._results:
            self._flush()
        self._assistant.append(block)

    def _result(self, call_id: str, output: Any, where: str) -> None:
        if self._assistant:
            self._flush()
        if isinstance(output, str):
            self._results.append(ToolResultBlock(tool_call_id=call_id, content=output))
            return
        blocks = _parts(output, f"{where}.output", self._media)
        text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
        self._results.append(ToolResultBlock(tool_call_id=call_id, content=text))
        self._results.extend(b for b in blocks if isinstance(b, ImageBlock))  # right after the result they came in

    def origin(self) -> Origin:
        """Where reasoning added now stands (what it is sealed for): after the turns so far, results included."""
        if self._results:
            self._flush()  # an assistant turn starts here
        return self._origins.after(self.turns)

    def reasoning_text(self, item: s.ReasoningItem, where: str) -> str:
        """The model's own reasoning the item carries sealed ("" without a seal: see the module docstring)."""
        if not item.encrypted_content:
            return ""
        try:
            return self._sealer.open(item.encrypted_content, self.origin()).text
        except SealError as exc:
            raise RequestError(
                "invalid_request",
                f"encrypted_content of a reasoning item could not be verified ({exc}): it was not issued by this "
                "deployment to this caller at this place in the conversation, or was modified",
                param=f"{where}.encrypted_content",
                code="invalid_encrypted_content",
            ) from exc

    def add(self, item: Any, where: str) -> None:
        if isinstance(item, s.MessageItem):
            if item.role == "assistant":
                for block in _message_blocks(item, where, self._media):
                    if isinstance(block, TextBlock):
                        self._assistant_block(block)
                return
            self._flush()
            role = "system" if item.role in ("system", "developer") else "user"
            self.turns.append(Turn(role=role, blocks=tuple(_message_blocks(item, where, self._media))))
        elif isinstance(item, s.ReasoningItem):
            text = self.reasoning_text(item, where)
            if text:
                self._assistant_block(ReasoningBlock(text=text))
        elif isinstance(item, s.FunctionCallItem):
            name = qualified_name(item.namespace, item.name)
            self._assistant_block(ToolCallBlock(id=item.call_id, name=name, arguments=item.arguments))
        elif isinstance(item, s.CustomToolCallItem):
            name = qualified_name(item.namespace, item.name)
            self._assistant_block(
                ToolCallBlock(id=item.call_id, name=name, arguments=custom_tool_arguments(item.input))
            )
        elif isinstance(item, s.LocalShellCallItem):
            action = item.action.model_dump(exclude_none=True, exclude={"type"})
            call_id = item.call_id or item.id or ""
            self._assistant_block(
                ToolCallBlock(id=call_id, name=LOCAL_SHELL, arguments=json.dumps(action, ensure_ascii=False))
            )
        elif isinstance(item, (s.FunctionCallOutputItem, s.CustomToolCallOutputItem)):
            self._result(item.call_id, item.output, where)
        elif isinstance(item, s.LocalShellCallOutputItem):
            self._result(item.id, item.output, where)
        elif isinstance(item, s.ItemReference):
            raise RequestError(
                "invalid_request",
                "item_reference is not supported: send the item itself, or use previous_response_id",
                param=where,
            )

    def finish(self) -> list[Turn]:
        self._flush()
        return self.turns


def seal_reasoning(items: Sequence[dict[str, Any]], sealer: Sealer, *, caller: str, model: str) -> list[dict[str, Any]]:
    """`items` with every reasoning item that has no `encrypted_content` sealed where it stands (its `content`, else
    its summary), as this server issues it to `caller`: the history Codex would send back, for tests and benchmarks
    that build one the server did not generate. Items already sealed are kept as they are."""
    decoder = _Decoder(sealer, model, caller)
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(items):
        item = _ITEM.validate_python(raw)
        if isinstance(item, s.ReasoningItem) and not item.encrypted_content:
            text = "".join(p.text for p in item.content) if item.content else "\n\n".join(p.text for p in item.summary)
            sealed = SealedReasoning(text=text, model=model, response_id="resp_built", output_index=i)
            raw = {**raw, "encrypted_content": sealer.seal(sealed, decoder.origin())}
            item = _ITEM.validate_python(raw)
        decoder.add(item, f"input[{i}]")
        out.append(raw)
    return out


# Fields that would change the output and are not applied here (see apis/unapplied.py).
UNAPPLIED: Unapplied = {
    "max_tool_calls": None,
    "prompt": None,
    "conversation": None,
}
TEXT_UNAPPLIED: Unapplied = {
    "verbosity": lambda v: v != "medium",
}


def _output_format(text: dict[str, Any] | None) -> OutputFormat | None:
    """`text.format`: text (free), json_object, or json_schema {name, schema, strict} (Codex's --output-schema)."""
    fmt = (text or {}).get("format") or {}
    kind = fmt.get("type", "text") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat(kind="json_object", param="text.format")
    if kind != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise RequestError(
            "invalid_request", "text.format needs type text, json_object, or json_schema with a `schema` object",
            param="text.format",
        )
    return OutputFormat(kind="json_schema", schema_=fmt["schema"], param="text.format.schema")


def _reject_unapplied(req: s.ResponsesRequest) -> None:
    reject_unapplied(req, UNAPPLIED)
    if req.text is not None:
        reject_unapplied(s.TextConfig.model_validate(req.text), TEXT_UNAPPLIED, prefix="text.")


def decode(
    req: s.ResponsesRequest,
    *,
    request_id: str,
    model: str,
    sealer: Sealer,
    caller: str,
    history: list[Any] = (),  # type: ignore[assignment]  # items of previous_response_id, oldest first
    session_id: str | None = None,
    media: MediaPolicy = TEXT_ONLY,  # the model's images and documents policy (apis/media.py)
) -> Decoded:
    if req.background:
        raise RequestError("invalid_request", "background responses are not supported", param="background")
    _reject_unapplied(req)
    decoder = _Decoder(sealer, model, caller, media)
    if req.instructions:
        decoder.turns.append(Turn(role="system", blocks=(TextBlock(text=req.instructions),)))
    for i, item in enumerate(history):
        decoder.add(item, f"previous_response_id[{i}]")
    items = [s.MessageItem(role="user", content=req.input)] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        decoder.add(item, f"input[{i}]")
    turns = decoder.finish()
    origin = decoder.origin()  # the chain already walked while decoding: no second pass over the history
    if not any(t.role != "system" for t in turns) and not (req.generate is False and turns):
        # (a pre-warm, `generate: false`, may carry only instructions and developer items)
        raise RequestError("invalid_request", "input must contain at least one item", param="input")
    specs, kinds, namespaces = _tools(req.tools or [])
    sampling = SamplingParams(
        max_tokens=req.max_output_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        logprobs=(req.top_logprobs or 0) if "message.output_text.logprobs" in (req.include or ()) else None,
    )
    gen = GenerationRequest(
        request_id=request_id,
        model=model,
        conversation=Conversation(
            turns=tuple(turns),
            tools=specs,
            tool_choice=_tool_choice(req.tool_choice, kinds),
            parallel_tool_calls=req.parallel_tool_calls is not False,
        ),
        sampling=sampling,
        hints=AgentHints(session_id=session_id or req.prompt_cache_key or req.user),
        output_format=_output_format(req.text),
        reasoning_effort=reasoning_effort(req.reasoning.effort if req.reasoning else None, "reasoning.effort"),
    )
    return Decoded(request=gen, origin=origin, tool_kinds=kinds, namespaces=namespaces)

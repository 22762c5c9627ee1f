"""Tool choice, strict tools and output formats -> the model's own grammar, as an xgrammar structural tag.

vLLM applies the tag while decoding (structured outputs, xgrammar backend; it runs on CPU); the scripted engine
checks its replies against the same tag. Reasoning stays free: the tag opens with the model's reasoning block
(required when the prompt already opened it, optional otherwise) and the constraint starts after its end marker.
Tool calls are written in the configured tool-call parser's format, so the parsers read constrained calls exactly
as free ones; a format with no entry in CALL_FORMATS cannot be constrained, and a request that needs it is a 400.
A freeform tool with a grammar (Codex's `apply_patch`) is constrained to it once the model opens a call to it, even
under free tool choice: its one string argument is held to the grammar's sentences, JSON-escaped
(preprocess/freeform.py); text and other calls stay free. A grammar that cannot be translated leaves that tool free.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Literal

from agentserve.preprocess.freeform import Untranslatable, json_string_ebnf
from agentserve.protocol import FREEFORM_ARGUMENT, Conversation, NamedToolChoice, OutputFormat, ToolSpec
from agentserve.protocol.errors import RequestError

logger = logging.getLogger(__name__)

Tag = dict[str, Any]


@dataclass(frozen=True)
class CallFormat:
    trigger: str  # the text every call starts with
    tag: Callable[[str, Tag], Tag]  # (tool name, what its arguments must be) -> one call's tag


def _hermes(name: str, arguments: Tag) -> Tag:
    return {
        "type": "tag",
        "begin": '<tool_call>\n{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ',
        "content": arguments,
        "end": "}\n</tool_call>",
    }


CALL_FORMATS: dict[str, CallFormat] = {"hermes": CallFormat("<tool_call>", _hermes)}

Reasoning = Literal["off", "optional", "open"]  # no reasoning / the model may open a block / the prompt opened it
_GAP = {"type": "regex", "pattern": "(\\n| ){0,4}"}  # what a template puts between reasoning and the answer
_CALL_GAP = {"type": "regex", "pattern": "(\\n| ){0,2}"}
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class ReasoningMarkers:
    mode: Reasoning
    open: str = "<think>"
    close: str = "</think>"
    max_tokens: int | None = None  # the thinking budget: past it the grammar allows only the end marker


def _reasoning(m: ReasoningMarkers) -> list[Tag]:
    if m.mode == "off":
        return []
    text: Tag = {"type": "any_text"} if m.max_tokens is None else {"type": "any_text", "max_tokens": m.max_tokens}
    block = {"type": "tag", "begin": "" if m.mode == "open" else m.open, "content": text, "end": m.close}
    return [block if m.mode == "open" else {"type": "optional", "content": block}, _GAP]


def _freeform(tool: ToolSpec) -> Tag | None:
    """A freeform tool's arguments held to its grammar: `{"input": "<a sentence, JSON-escaped>"}`, written as
    apis/responses/decode.py's custom_tool_arguments writes it (None: no grammar, or one that cannot be translated)."""
    if tool.grammar is None:
        return None
    try:
        ebnf = json_string_ebnf(tool.grammar.syntax, tool.grammar.definition)
    except Untranslatable as exc:
        _unconstrained(tool.name, tool.grammar.syntax, str(exc))
        return None
    return {"type": "sequence", "elements": [
        {"type": "const_string", "value": "{" + json.dumps(FREEFORM_ARGUMENT) + ': "'},
        {"type": "grammar", "grammar": ebnf},
        {"type": "const_string", "value": '"}'},
    ]}


@functools.lru_cache(maxsize=256)
def _unconstrained(name: str, syntax: str, reason: str) -> None:
    """Said once, not at every turn of the session that sends the tool."""
    logger.warning("freeform tool %r is served unconstrained: its %s grammar uses %s", name, syntax, reason)


def _arguments(tool: ToolSpec, *, schema: bool) -> Tag:
    """What a call's arguments must be: a freeform tool's grammar, else its schema (`schema`, or a strict tool), else
    any JSON object."""
    freeform = _freeform(tool)
    if freeform is not None:
        return freeform
    return {"type": "json_schema", "json_schema": tool.parameters if schema or tool.strict else _ANY_OBJECT}


def _calls(fmt: CallFormat, tools: tuple[ToolSpec, ...], *, schema: bool, only_one: bool = False) -> Tag:
    """One call (`only_one`) or one or more calls, nothing else; calls may be separated by a newline or two."""
    tags = [fmt.tag(t.name, _arguments(t, schema=schema)) for t in tools]
    one = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    if only_one:
        return one
    more = {"type": "star", "content": {"type": "sequence", "elements": [_CALL_GAP, one]}}
    return {"type": "sequence", "elements": [one, more]}


def _output(fmt: OutputFormat) -> Tag:
    schema = fmt.schema_ if fmt.kind == "json_schema" and fmt.schema_ is not None else _ANY_OBJECT
    return {"type": "json_schema", "json_schema": schema}


def _call_format(parser: str | None, why: str, param: str) -> CallFormat:
    fmt = CALL_FORMATS.get(parser or "")
    if fmt is None:
        raise RequestError(
            "invalid_request",
            f"{why} cannot be enforced for this model: its tool-call format ({parser}) has no constrained form here",
            param=param,
        )
    return fmt


def structural_tag(
    conversation: Conversation,
    output_format: OutputFormat | None,
    *,
    tool_call_parser: str | None,
    reasoning: ReasoningMarkers,
    tool_choice_param: str = "tool_choice",
) -> str | None:
    """The structural tag this request's output must match, or None when nothing constrains it."""
    tools, choice = conversation.tools_in_force(), conversation.tool_choice
    strict = any(t.strict for t in tools)
    # Freeform grammars bind only where calls can be constrained; elsewhere those tools stay free, as before.
    freeform = tool_call_parser in CALL_FORMATS and any(_freeform(t) is not None for t in tools)
    body: Tag | None = None
    if tools and isinstance(choice, NamedToolChoice):
        fmt = _call_format(tool_call_parser, "tool_choice naming a tool", tool_choice_param)
        named = tuple(t for t in tools if t.name == choice.name)
        body = _calls(fmt, named, schema=True, only_one=True)
    elif tools and choice == "required":
        fmt = _call_format(tool_call_parser, "tool_choice requiring a call", tool_choice_param)
        body = _calls(fmt, tools, schema=True, only_one=not conversation.parallel_tool_calls)
    elif tools and choice == "none":
        fmt = CALL_FORMATS.get(tool_call_parser or "")
        if output_format is not None:
            body = _output(output_format)
        elif fmt is not None:
            body = {"type": "any_text", "excludes": [fmt.trigger]}
    elif tools and (strict or freeform or output_format is not None):  # auto
        fmt = _call_format(tool_call_parser, "strict tools" if strict else "an output format with tools", "tools")
        if output_format is not None:
            calls = _calls(fmt, tools, schema=False, only_one=not conversation.parallel_tool_calls)
            body = {"type": "or", "elements": [calls, _output(output_format)]}
        else:
            tags = [fmt.tag(t.name, _arguments(t, schema=False)) for t in tools]
            body = {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags}
    elif output_format is not None:
        body = _output(output_format)
    if body is None:
        return None
    tag = {"type": "structural_tag", "format": {"type": "sequence", "elements": [*_reasoning(reasoning), body]}}
    return json.dumps(tag, ensure_ascii=False)


_REFUSALS: "collections.OrderedDict[bytes, str | None]" = collections.OrderedDict()
_REFUSALS_LOCK = threading.Lock()
_REFUSALS_MAX_BYTES = 1 << 20  # what the memo may hold: entries are a digest and a reason, never the tag itself
_refusals_bytes = 0


def _refusal(tag: str) -> str | None:
    """Why xgrammar cannot build this tag's grammar (None: it can); an agent resends the same tools every turn, so
    the answer is remembered, under the tag's digest and bounded in bytes (tags are as large as the tools, MiBs
    each: a count bound held 512 of them)."""
    import xgrammar as xgr

    key = hashlib.blake2b(tag.encode(), digest_size=16).digest()
    with _REFUSALS_LOCK:
        if key in _REFUSALS:
            _REFUSALS.move_to_end(key)
            return _REFUSALS[key]
    try:
        xgr.Grammar.from_structural_tag(tag)
        reason = None
    except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError with the reason
        reason = str(exc)[:4096]
    global _refusals_bytes
    cost = lambda r: 128 + len(r or "")  # noqa: E731 - the node, the digest, the string
    with _REFUSALS_LOCK:
        if key not in _REFUSALS:
            _REFUSALS[key] = reason
            _refusals_bytes += cost(reason)
        while _refusals_bytes > _REFUSALS_MAX_BYTES:
            _refusals_bytes -= cost(_REFUSALS.popitem(last=False)[1])
    return reason


def check(tag: str, conversation: Conversation, output_format: OutputFormat | None) -> None:
    """Parse the tag once here, so a schema the grammar compiler refuses is a 400 naming its field."""
    import xgrammar as xgr

    reason = _refusal(tag)
    if reason is not None:
        param = output_format.param if output_format is not None else "tools"
        for i, t in enumerate(conversation.tools_in_force()):
            try:
                xgr.Grammar.from_json_schema(json.dumps(t.parameters))
            except Exception:  # noqa: BLE001
                param = f"tools[{i}]"
                break
        raise RequestError("invalid_request", f"cannot constrain the output to this schema: {reason}", param=param)

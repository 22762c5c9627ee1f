"""What a chat template can do with reasoning and tool calls, read from its source once at start-up."""

from __future__ import annotations

import re
from dataclasses import dataclass

import jinja2
from jinja2 import meta

# A `for x in <something>.tool_calls` loop whose body mentions reasoning_content.
_PER_CALL = re.compile(r"for\s+\w+\s+in\s+[\w.\[\]'\"]*tool_calls[^%]*%}(?:(?!endfor).)*reasoning_content", re.S)
# gpt-oss (harmony) reads an assistant message's analysis from `thinking`, not `reasoning_content`.
_THINKING_FIELD = re.compile(r"message\.thinking\b|[\"']thinking[\"']\s+in\s+message")
# Templates that render only the first call of a message (gpt-oss: "We assume max 1 tool call per message").
_FIRST_CALL_ONLY = re.compile(r"tool_calls\s*\[\s*0\s*\]")
# Arguments handled as a JSON string when they are one (Qwen3, Kimi, Nemotron v2, Magistral, the embedded template).
_ARGS_STRING_GUARD = re.compile(r"arguments['\"]?\]?\s+is\s+(?:not\s+)?string")
# Arguments read as a mapping: iterated (GLM, MiniMax, Qwen3-Coder/Nemotron 3) or passed through tojson (gpt-oss).
_ARGS_MAPPING = re.compile(
    r"arguments['\"]?\]?\s*(?:\|\s*(?:tojson|items)\b|\.items\(\)|\s+is\s+mapping|\s+or\s+\{\s*\})"
)
# A template that tests for a mapping first renders one as intended, its string branch only a fallback (Gemma 4 writes a
# string verbatim between its own braces, so JSON text there would render `{{"k": …}}`).
_ARGS_IS_MAPPING = re.compile(r"arguments['\"]?\]?\s+is\s+mapping")


@dataclass(frozen=True)
class TemplateCaps:
    reads_reasoning_content: bool  # the template reads prior reasoning from a message field (see reasoning_field)
    reasoning_per_call: bool
    variables: frozenset[str]  # undeclared template variables (enable_thinking, tools, ...)
    reasoning_field: str = "reasoning_content"  # "thinking" for gpt-oss's harmony template
    one_call_per_message: bool = False  # only tool_calls[0] is rendered: give each call its own message
    arguments_as_mapping: bool = False  # tool-call arguments must be a dict (iterated or tojson'd), not JSON text

    def accepts(self, name: str) -> bool:
        return name in self.variables


_COMMENT = re.compile(r"\{#.*?#\}", re.S)


def inspect_template(source: str) -> TemplateCaps:
    source = _COMMENT.sub("", source)  # a comment naming reasoning_content does not read it
    try:
        variables = frozenset(meta.find_undeclared_variables(jinja2.Environment().parse(source)))
    except jinja2.TemplateSyntaxError:
        variables = frozenset()
    reads_rc = "reasoning_content" in source
    thinking = not reads_rc and bool(_THINKING_FIELD.search(source))
    return TemplateCaps(
        reads_reasoning_content=reads_rc or thinking,
        reasoning_per_call=bool(_PER_CALL.search(source)),
        variables=variables,
        reasoning_field="thinking" if thinking else "reasoning_content",
        one_call_per_message=bool(_FIRST_CALL_ONLY.search(source)),
        arguments_as_mapping=bool(_ARGS_IS_MAPPING.search(source))
        or (not _ARGS_STRING_GUARD.search(source) and bool(_ARGS_MAPPING.search(source))),
    )

"""What a chat template can do with reasoning, read from its source once at start-up."""

from __future__ import annotations

import re
from dataclasses import dataclass

import jinja2
from jinja2 import meta

# A `for x in <something>.tool_calls` loop whose body mentions reasoning_content.
_PER_CALL = re.compile(r"for\s+\w+\s+in\s+[\w.\[\]'\"]*tool_calls[^%]*%}(?:(?!endfor).)*reasoning_content", re.S)


@dataclass(frozen=True)
class TemplateCaps:
    reads_reasoning_content: bool
    reasoning_per_call: bool
    variables: frozenset[str]  # undeclared template variables (enable_thinking, tools, ...)

    def accepts(self, name: str) -> bool:
        return name in self.variables


def inspect_template(source: str) -> TemplateCaps:
    try:
        variables = frozenset(meta.find_undeclared_variables(jinja2.Environment().parse(source)))
    except jinja2.TemplateSyntaxError:
        variables = frozenset()
    return TemplateCaps(
        reads_reasoning_content="reasoning_content" in source,
        reasoning_per_call=bool(_PER_CALL.search(source)),
        variables=variables,
    )

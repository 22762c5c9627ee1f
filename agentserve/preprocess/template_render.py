"""The model's chat template, rendered under a budget: a deadline in the render's own CPU time and a cap on what it
writes.

Why a budget inside the render rather than a timeout around it: rendering runs in a worker thread, and a Python
thread cannot be killed. A timeout around the call would answer the client and leave the thread spinning (a
nested `range(100000)` loop runs for hours); enough such requests pin every worker. So the render itself stops:
the template is compiled here, in a sandbox like transformers' (`ImmutableSandboxedEnvironment`, the same options,
filters and globals, so it renders the same text as `apply_chat_template`), whose hooks check the budget:

- every piece of output the root render yields, and every attribute/item access and call the template makes,
  reads the clock (~0.1 us each: a few ms on the largest agent prompts) against the deadline. The budget is the
  render thread's CPU time, not the wall clock: a loaded machine (other threads holding the GIL, both cores busy)
  slows a legitimate render without making it hostile, and a wall-clock budget refused long agent sessions as bad
  requests under load (the multi-node soak: 2 turns of a 676-turn Responses chain). The hooks read the cheap wall
  clock; only once it passes the deadline is the thread's CPU time read, and the deadline moved by the time the
  render was kept waiting;
- the text written so far is capped (`max_chars`): past it the prompt is refused before it is ever tokenized;
- `*` on strings and lists is intercepted so one expression cannot build a gigabyte (`'x' * 10**10`).

A template loop that neither writes, calls nor reads anything escapes the hooks, but only the template's source
can contain one, and clients cannot supply a template (preprocess/template_kwargs.py). The deployment also bounds
its wait on the worker (serve/deployments/preprocessor.py) as a backstop.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from agentserve.protocol.errors import RequestError

class RenderBudgetExceeded(RequestError):
    """The template ran past its deadline or wrote more than its cap: a 400 naming which."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_request", message, param="messages", code="render_budget_exceeded")

    def __reduce__(self):
        return (RenderBudgetExceeded, (self.message,))


class OutputTooLong(RequestError):
    """The rendering grew past `max_chars`: the preprocessor words it as its own error (the context window)."""

    def __init__(self, chars: int) -> None:
        super().__init__("invalid_request", f"the rendered prompt passed {chars} characters", param="messages")
        self.chars = chars

    def __reduce__(self):
        return (OutputTooLong, (self.chars,))


@dataclass(frozen=True, slots=True)
class RenderBudget:
    deadline_s: float = 5.0  # CPU seconds of one render (the largest legal agent bodies take well under 1 s)
    max_chars: int = 64 * 1024 * 1024  # text the template may write


class _Meter:
    """One render's spend, read by the environment's hooks through a thread-local (renders run in many threads)."""

    __slots__ = ("deadline", "budget", "max_chars", "chars", "cpu_start")

    def __init__(self, budget: RenderBudget, max_chars: int, deadline: float | None) -> None:
        self.budget = budget
        self.deadline = time.monotonic() + budget.deadline_s if deadline is None else deadline
        self.max_chars = max_chars
        self.chars = 0
        self.cpu_start = time.thread_time()

    def check_clock(self) -> None:
        if time.monotonic() > self.deadline:
            self._past_deadline()

    def _past_deadline(self) -> None:
        """The wall clock passed the deadline: refuse if the render spent its budget in CPU time, else move the
        deadline by what it has left (reading a thread's CPU clock is a system call: only here, not per hook)."""
        left = self.budget.deadline_s - (time.thread_time() - self.cpu_start)
        if left > 0:
            self.deadline = time.monotonic() + left
            return
        raise RenderBudgetExceeded(
            f"rendering the chat template took longer than its budget of {self.budget.deadline_s:g} CPU seconds"
        )

    def wrote(self, n: int) -> None:
        self.chars += n
        if self.chars > self.max_chars:
            raise OutputTooLong(self.chars)

    def product(self, left: Any, right: Any) -> None:
        """`left * right` before it is computed: a string or list that would pass the cap is refused."""
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * times > self.max_chars:
                raise RenderBudgetExceeded("the chat template built a value past the render budget")


_active = threading.local()


def _meter() -> _Meter | None:
    return getattr(_active, "meter", None)


class _BudgetedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*"})

    def getattr(self, obj: Any, attribute: str) -> Any:
        m = _meter()
        if m is not None:
            m.check_clock()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        m = _meter()
        if m is not None:
            m.check_clock()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja's spelling
        m = _meter()
        if m is not None:
            m.check_clock()
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        m = _meter()
        if m is not None and operator == "*":
            m.product(left, right)
        return super().call_binop(context, operator, left, right)


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}` block (it marks assistant tokens for training masks): its body, rendered."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
    # transformers' filter: no HTML escaping (jinja's own escapes <, >, &, ')
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> _BudgetedEnvironment:
    """The environment transformers renders chat templates in (utils/chat_template_utils.py), with budget hooks."""
    env = _BudgetedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


# Names the renderer sets itself (as transformers' render_jinja_template does) and the environment's globals.
RENDERER_NAMES = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
GLOBAL_NAMES = frozenset(_environment().globals)


class BudgetedTemplate:
    """`render(messages, ...)` equals `tokenizer.apply_chat_template(messages, ..., tokenize=False)` for the
    template it was built from, or raises a RequestError when the render breaks its budget."""

    def __init__(self, source: str, special_tokens: dict[str, Any], budget: RenderBudget = RenderBudget()) -> None:
        self.budget = budget
        self._special = dict(special_tokens)  # bos_token, eos_token, ...: variables every template may read
        self._template = _environment().from_string(source)

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        max_chars: int | None = None,
        deadline: float | None = None,
        **variables: Any,
    ) -> str:
        """`max_chars`: this render's cap on the text written (at most the budget's); `deadline`: a `time.monotonic()`
        instant shared by several renders of one request (default: the budget from now), moved while the render
        has CPU budget left."""
        limit = self.budget.max_chars if max_chars is None else min(max_chars, self.budget.max_chars)
        meter = _Meter(self.budget, limit, deadline)
        outer = _meter()
        _active.meter = meter
        try:
            context = {**self._special, **variables}
            pieces = self._template.generate(
                context, messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt
            )
            return "".join(self._metered(pieces, meter))
        finally:
            _active.meter = outer

    @staticmethod
    def _metered(pieces: Iterable[str], meter: _Meter) -> Iterable[str]:
        for piece in pieces:
            meter.wrote(len(piece))
            meter.check_clock()
            yield piece

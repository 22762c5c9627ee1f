"""Caps on the sampling fields whose cost grows with what the client sends, as the hosted APIs cap them.

Each stop string is searched for in every streamed delta and held back as a possible partial match, and each
`logit_bias` entry travels to the engine and is applied at every step: unbounded, one request could make every
delta of its stream slow. OpenAI caps Chat Completions' `stop` at 4 strings and `logit_bias` at 300 entries;
Anthropic documents no count for `stop_sequences`, so it gets a generous 16. Every stop string is at most
`MAX_STOP_CHARS` long. The Responses API has neither field.
"""

from __future__ import annotations

from typing import Iterable

from agentserve.protocol.errors import RequestError

CHAT_MAX_STOP = 4
ANTHROPIC_MAX_STOP = 16
MAX_STOP_CHARS = 1024
MAX_LOGIT_BIAS = 300


def stop_strings(stops: Iterable[str], *, param: str, max_count: int) -> tuple[str, ...]:
    """The non-empty stop strings, or a 400 naming `param` when there are more than `max_count` or one is too long."""
    out = tuple(s for s in stops if s)
    if len(out) > max_count:
        raise RequestError(
            "invalid_request", f"`{param}` takes at most {max_count} strings, got {len(out)}", param=param
        )
    for i, s in enumerate(out):
        if len(s) > MAX_STOP_CHARS:
            raise RequestError(
                "invalid_request", f"`{param}` strings are at most {MAX_STOP_CHARS} characters, got {len(s)}",
                param=f"{param}[{i}]",
            )
    return out


def check_logit_bias_size(n: int, param: str = "logit_bias") -> None:
    if n > MAX_LOGIT_BIAS:
        raise RequestError(
            "invalid_request", f"`{param}` takes at most {MAX_LOGIT_BIAS} entries, got {n}", param=param
        )

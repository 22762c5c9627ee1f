"""Which template variable switches thinking on and off, found by rendering, not by reading the template's source.

Templates name the switch differently (`enable_thinking` for Qwen3 / GLM / Nemotron, `thinking` for DeepSeek-V3.1
and Kimi, others something else) and some have none. Each undeclared variable is rendered True and False on a
one-message probe; the switch is the variable whose off render closes a reasoning block the on render leaves open
(Qwen3's pre-filled empty `<think></think>`, V3.1's `</think>` after the assistant tag where thinking gets `<think>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

# Variables every template receives from the renderer, never a thinking switch.
_RESERVED = frozenset(
    {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "pad_token", "unk_token",
     "raise_exception", "strftime_now", "documents", "tool_choice", "custom_tools", "builtin_tools", "date_string"}
)


@dataclass(frozen=True)
class ThinkingSwitch:
    name: str
    on: Any
    off: Any

    def kwargs(self, thinking: bool) -> dict[str, Any]:
        return {self.name: self.on if thinking else self.off}


def _closes_reasoning(off: str, on: str, open_marker: str, close_marker: str) -> bool:
    """`off` shuts reasoning where `on` leaves it to the model."""
    more_closed = off.count(close_marker) > on.count(close_marker)
    left_open = on.rstrip().endswith(open_marker) and not off.rstrip().endswith(open_marker)
    return more_closed or left_open


def probe(
    render: Callable[[dict[str, Any]], str],
    variables: Iterable[str],
    *,
    open_marker: str,
    close_marker: str,
) -> ThinkingSwitch | None:
    """`render(kwargs)` renders the probe conversation with extra template variables (raising on bad input)."""
    if not open_marker or not close_marker:
        return None
    for name in sorted(set(variables) - _RESERVED):
        try:
            on, off = render({name: True}), render({name: False})
        except Exception:  # noqa: BLE001 - not a boolean the template can take
            continue
        if on == off:
            continue
        if _closes_reasoning(off, on, open_marker, close_marker):
            return ThinkingSwitch(name, True, False)
        if _closes_reasoning(on, off, open_marker, close_marker):
            return ThinkingSwitch(name, False, True)  # e.g. `disable_thinking`
    return None

"""Where a model's own chat template accepts what harnesses send, found by rendering small probe conversations.

Two things harnesses send that templates handle differently:
- a system (or developer) message after the first one (Claude Code's mid-conversation system messages, Codex's
  developer items after `instructions`). Many templates render it in place; some raise ("System message must be at
  the beginning", "roles must alternate"), some drop it, some move the last one to the top of the prompt (which
  rewrites every earlier turn). It stays in place only where the template renders it there without changing the
  rendering of the turns before it; otherwise it is merged into the message before it (or, after an assistant turn,
  into the next one), which is the same in every later turn of the session, so the prefix still holds.
- tool results, which templates without a `tool` role drop or refuse ("roles must alternate"): there they go in
  one user message, each result in `<tool_response>` tags.
- text beside tool results in one user message (Claude Code's `<system-reminder>` next to `tool_result`). As a user
  message of its own, templates that keep only the reasoning after the last user query (Qwen3 style) take it for a
  new query and drop the reasoning of the current agent loop, so the next turn no longer extends the previous
  prompt. Where that happens, and putting the text in the last tool result keeps the reasoning, it goes there.

Decided by what the template renders, not by reading its source; once per template (cached by a hash of the
template source and the replay family), at start-up.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, replace
from typing import Callable

from agentserve.protocol import (
    Conversation,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Turn,
)

logger = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class Placement:
    system_in_place: bool = True  # a system message after the first is rendered where it stands
    text_with_results: bool = False  # text beside tool results goes into the last result (not its own user message)
    tool_role: bool = True  # tool results as `tool` messages; False: the template has no such role, a user message


# (conversation, placement, add_generation_prompt) -> the template's text; may raise what the template raises
RenderText = Callable[[Conversation, Placement, bool], str]

_SYSTEM = "You are a placement probe."
_MID = "PLACEMENT-PROBE-MID-SYSTEM"
_SECOND = "PLACEMENT-PROBE-SECOND-SYSTEM"
_REASONING = "PLACEMENT-PROBE-REASONING"
_RESULT = "PLACEMENT-PROBE-RESULT"
_BESIDE = "PLACEMENT-PROBE-REMINDER"
_TOOL = ToolSpec(
    name="probe_lookup",
    description="Look something up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


def _text(role: str, text: str) -> Turn:
    return Turn(role=role, blocks=(TextBlock(text=text),))  # type: ignore[arg-type]


def _try(render: RenderText, conv: Conversation, placement: Placement, generation: bool) -> str | None:
    try:
        return render(conv, placement, generation)
    except Exception:  # noqa: BLE001 - a template that raises on this shape is the answer
        return None


def _system_in_place_works(render: RenderText) -> bool:
    """A later system message renders in place, after the turns before it, which render as they did without it."""
    placement = Placement(system_in_place=True)
    before = (_text("system", _SYSTEM), _text("user", "probe question one"), _text("assistant", "probe answer one"),
              _text("user", "probe question two"))  # fmt: skip
    earlier = _try(render, Conversation(turns=before), placement, False)
    later = _try(render, Conversation(turns=before + (_text("system", _MID),)), placement, True)
    if earlier is None or later is None or not later.startswith(earlier) or _MID not in later[len(earlier) :]:
        return False
    leading = (_text("system", _SYSTEM), _text("system", _SECOND), _text("user", "probe question one"))
    rendered = _try(render, Conversation(turns=leading), placement, True)
    return rendered is not None and _SYSTEM in rendered and _SECOND in rendered


def _keeps_loop_reasoning(render: RenderText, placement: Placement) -> bool:
    """Text beside a tool result reaches the prompt and the reasoning of the loop's assistant turn stays."""
    conv = Conversation(
        turns=(
            _text("system", _SYSTEM),
            _text("user", "probe question"),
            Turn(role="assistant", blocks=(ReasoningBlock(text=_REASONING),
                                           ToolCallBlock(id="call_probe", name=_TOOL.name, arguments='{"q": "x"}'))),
            Turn(role="user", blocks=(ToolResultBlock(tool_call_id="call_probe", content=_RESULT),
                                      TextBlock(text=_BESIDE))),
        ),  # fmt: skip
        tools=(_TOOL,),
    )
    rendered = _try(render, conv, placement, True)
    return rendered is not None and all(s in rendered for s in (_REASONING, _RESULT, _BESIDE))


def _tool_role_works(render: RenderText) -> bool:
    """Tool results as `tool` messages reach the prompt (the template neither refuses nor drops them)."""
    conv = Conversation(
        turns=(
            _text("system", _SYSTEM),
            _text("user", "probe question"),
            Turn(role="assistant", blocks=(ToolCallBlock(id="call_probe", name=_TOOL.name, arguments='{"q": "x"}'),)),
            Turn(role="tool", blocks=(ToolResultBlock(tool_call_id="call_probe", content=_RESULT),)),
        ),
        tools=(_TOOL,),
    )
    rendered = _try(render, conv, Placement(), True)
    return rendered is not None and _RESULT in rendered


def probe_placement(render: RenderText) -> Placement:
    base = Placement(system_in_place=_system_in_place_works(render), tool_role=_tool_role_works(render))
    as_message = replace(base, text_with_results=False)
    if _keeps_loop_reasoning(render, as_message):
        return as_message
    in_result = replace(base, text_with_results=True)
    return in_result if _keeps_loop_reasoning(render, in_result) else as_message


_CACHE: dict[str, Placement] = {}
_LOCK = threading.Lock()


def placement_for(template: str, family: str, render: RenderText) -> Placement:
    """The template's placement, probed once per (template source, replay family) in this process."""
    key = hashlib.sha256(f"{family}\0{template}".encode()).hexdigest()
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        found = probe_placement(render)
        _CACHE[key] = found
    logger.info("chat template %s (%s): %s", key[:12], family, found)
    return found

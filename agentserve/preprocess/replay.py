"""How each model family wants its earlier reasoning replayed, as data.

A template that reads `reasoning_content` decides for itself how much prior thinking to keep
(Qwen3, for example, keeps only the current tool loop's). The policy below is what agentserve
applies when the template does not read it: keep the reasoning in the model's own text form, in
place, or drop it, separately for turns that ended in plain text and turns that called tools.
`enable` / `disable` are the template variables that switch thinking, applied only when the
template reads them and the client did not set them itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

Keep = Literal["keep", "drop"]


@dataclass(frozen=True)
class ReplayPolicy:
    family: str
    think_open: str  # reasoning's text form, as the model writes it
    think_close: str
    plain_turns: Keep  # prior reasoning on assistant turns that ended with text
    tool_turns: Keep  # prior reasoning on assistant turns that called tools
    enable: Mapping[str, Any] = field(default_factory=dict)
    disable: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


def _p(**kw: Any) -> ReplayPolicy:
    kw["enable"] = MappingProxyType(kw.get("enable", {}))
    kw["disable"] = MappingProxyType(kw.get("disable", {}))
    return ReplayPolicy(**kw)


POLICIES: dict[str, ReplayPolicy] = {
    p.family: p
    for p in (
        _p(family="qwen3", think_open="<think>\n", think_close="\n</think>\n\n", plain_turns="drop",
           tool_turns="keep", enable={"enable_thinking": True}, disable={"enable_thinking": False},
           note="template keeps reasoning after the last user query only"),
        _p(family="deepseek_r1", think_open="<think>\n", think_close="\n</think>\n\n", plain_turns="drop",
           tool_turns="drop", note="R1's template strips prior thinking from every turn"),
        _p(family="nemotron", think_open="<think>\n", think_close="\n</think>\n", plain_turns="drop",
           tool_turns="keep", enable={"enable_thinking": True, "truncate_history_thinking": False},
           disable={"enable_thinking": False}),
        _p(family="kimi", think_open="◁think▷", think_close="◁/think▷", plain_turns="drop",
           tool_turns="keep", enable={"thinking": True}, disable={"thinking": False}),
        _p(family="glm", think_open="<think>", think_close="</think>", plain_turns="drop",
           tool_turns="keep", enable={"enable_thinking": True, "clear_thinking": False},
           disable={"enable_thinking": False}),
        _p(family="gpt_oss", think_open="<|channel|>analysis<|message|>", think_close="<|end|>",
           plain_turns="drop", tool_turns="keep",
           note="harmony: drop analysis once a final answer closed the turn; keep it across tool calls"),
        _p(family="minimax", think_open="<think>\n", think_close="\n</think>\n\n", plain_turns="keep",
           tool_turns="keep", note="M2 is trained on interleaved thinking and needs all of it back"),
        _p(family="mistral", think_open="[THINK]", think_close="[/THINK]", plain_turns="drop",
           tool_turns="keep"),
        _p(family="agentserve_default", think_open="<think>\n", think_close="\n</think>\n\n",
           plain_turns="keep", tool_turns="keep", enable={"enable_thinking": True},
           disable={"enable_thinking": False}, note="the embedded template keeps every turn's reasoning"),
        _p(family="none", think_open="<think>\n", think_close="\n</think>\n\n", plain_turns="drop",
           tool_turns="drop", note="no reasoning parser: nothing to replay"),
    )
}

_BY_PARSER = {
    "qwen3": "qwen3",
    "deepseek_r1": "deepseek_r1",
    "nemotron_deci": "nemotron",
    "nemotron3": "nemotron",
    "nemotron_nano": "nemotron",
    "kimi": "kimi",
    "glm45": "glm",
    "gpt_oss": "gpt_oss",
    "minimax_append_think": "minimax",
    "mistral": "mistral",
}


def policy_for(reasoning_parser: str | None, family: str | None = None) -> ReplayPolicy:
    """The catalog may name a family outright; otherwise it follows from the reasoning parser."""
    if family is not None:
        return POLICIES[family]
    return POLICIES[_BY_PARSER.get(reasoning_parser or "", "none")]

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
           note="Qwen/Qwen3-8B tokenizer_config.json chat_template: reads reasoning_content, renders it only for "
                "assistant messages after the last real user query (last_query_index)"),
        _p(family="deepseek_r1", think_open="<think>\n", think_close="\n</think>\n\n", plain_turns="drop",
           tool_turns="drop",
           note="DeepSeek-R1(-Distill) chat_template: no reasoning_content; content.split('</think>')[-1] on "
                "every plain assistant turn; tool-call turns render only the calls; prompt ends '<think>\\n'"),
        _p(family="nemotron", think_open="<think>\n", think_close="\n</think>\n", plain_turns="drop",
           tool_turns="drop", enable={"enable_thinking": True, "truncate_history_thinking": False},
           disable={"enable_thinking": False},
           note="Nemotron Nano v2 template: no reasoning_content, splits '</think>' off every assistant turn "
                "(thinking via /think in the system prompt); Nemotron 3 reads reasoning_content and keeps "
                "all of it when truncate_history_thinking=false"),
        _p(family="kimi", think_open="<think>", think_close="</think>", plain_turns="drop",
           tool_turns="keep", enable={"thinking": True}, disable={"thinking": False},
           note="moonshotai/Kimi-K2-Thinking chat_template.jinja: reads reasoning_content, renders <think>rc</think> "
                "after the last assistant turn without tool calls, <think></think> before it; the `thinking` "
                "switch is not in that template (applied only where a template declares it)"),
        _p(family="glm", think_open="<think>", think_close="</think>", plain_turns="drop",
           tool_turns="keep", enable={"enable_thinking": True, "clear_thinking": False},
           disable={"enable_thinking": False},
           note="GLM-4.5/4.6 chat_template: reads reasoning_content after the last user message, <think></think> "
                "before it; GLM-4.7+ keeps every turn's when clear_thinking is false"),
        _p(family="gpt_oss", think_open="<|channel|>analysis<|message|>", think_close="<|end|>",
           plain_turns="drop", tool_turns="keep",
           note="openai/gpt-oss chat_template: analysis from the `thinking` field, kept on tool-call messages "
                "until a later final message, one call per message (tool_calls[0]), arguments|tojson"),
        _p(family="minimax", think_open="<think>\n", think_close="\n</think>\n\n", plain_turns="drop",
           tool_turns="keep",
           note="MiniMax-M2 chat_template: reads reasoning_content (or <think> in content) and renders it only "
                "after the last user message; prompt ends '<think>\\n'"),
        _p(family="mistral", think_open="[THINK]", think_close="[/THINK]", plain_turns="keep",
           tool_turns="keep",
           note="Magistral / Ministral-3 Reasoning chat_template: no reasoning_content; `thinking` content chunks "
                "render as [THINK]...[/THINK] in place on every assistant turn, calls after content"),
        _p(family="gemma4", think_open="<|channel>thought\n", think_close="\n<channel|>", plain_turns="drop",
           tool_turns="keep", enable={"enable_thinking": True}, disable={"enable_thinking": False},
           note="google/gemma-4 chat_template.jinja: reads reasoning (or reasoning_content), renders "
                "<|channel>thought\\n…\\n<channel|> only on tool-call turns after the last user message; strips "
                "channel blocks from every model turn's content; enable_thinking writes <|think|> in the system "
                "turn, off the prompt ends with an empty <|channel>thought\\n<channel|>"),
        _p(family="seed_oss", think_open="<seed:think>", think_close="</seed:think>", plain_turns="keep",
           tool_turns="keep",
           note="ByteDance-Seed/Seed-OSS-36B-Instruct chat_template.jinja: reads reasoning_content and renders "
                "<seed:think>rc|trim</seed:think> on every assistant turn, plain and tool-call alike. Its switch is "
                "thinking_budget (0: the prompt ends <seed:think><seed:cot_budget_reflect> and the model writes a "
                "budget note before </seed:think>, which a parser switched off would show as answer text), so "
                "thinking off is left to the engine's budget of 0"),
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
    "glm47": "glm",
    "gpt_oss": "gpt_oss",
    "minimax_append_think": "minimax",
    "mistral": "mistral",
    "gemma4": "gemma4",
    "seed_oss": "seed_oss",
}


def policy_for(reasoning_parser: str | None, family: str | None = None) -> ReplayPolicy:
    """The catalog may name a family outright; otherwise it follows from the reasoning parser."""
    if family is not None:
        return POLICIES[family]
    return POLICIES[_BY_PARSER.get(reasoning_parser or "", "none")]

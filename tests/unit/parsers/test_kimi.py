"""Kimi-K2-Thinking writes its reasoning in <think>…</think> (tokens of its tokenizer) and may open its tool-call
section without closing the thought. ◁think▷ (Kimi-VL-Thinking's marker) is plain text to it."""

from __future__ import annotations

from agentserve.parsers import ToolCallStart, parser_markers

from .helpers import run, summary

CALL = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>')
KW = {"reasoning": "kimi", "tool_calls": "kimi_k2", "special_markers": parser_markers("kimi", "kimi_k2")}


def test_kimi_k2_thinking_stream_splits_into_reasoning_text_and_call():
    text = f"<think>The user wants the weather in Paris.</think>Let me look it up.{CALL}"
    for chunks in ([text], list(text)):
        events = run(KW, chunks)
        assert summary(events) == [("R", "The user wants the weather in Paris."), ("T", "Let me look it up."),
                                   ("call", 0, "get_weather", {"city": "Paris"})]
        assert [e.id for e in events if isinstance(e, ToolCallStart)] == ["functions.get_weather:0"]


def test_kimi_k2_answer_without_thinking_is_text_and_vl_markers_are_not_kimi_k2s():
    assert summary(run(KW, ["Paris is sunny."])) == [("T", "Paris is sunny.")]
    assert summary(run(KW, ["◁think▷x◁/think▷y"])) == [("T", "◁think▷x◁/think▷y")]

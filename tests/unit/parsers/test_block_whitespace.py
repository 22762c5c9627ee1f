"""Whitespace around reasoning and tool-call blocks: kept between answer text (as vLLM and Dynamo keep it), dropped
only where it frames the answer (the template's `</think>\\n\\n` before the first answer text, the newline after the
last call)."""

from __future__ import annotations

import pytest

from .helpers import views

CALL = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'


def answer(view):
    return "".join(x[1] for x in view if x[0] == "T")


@pytest.mark.parametrize(("text", "expected"), [
    ("The answer is <think>x</think>42", "The answer is 42"),
    ("The answer is<think>x</think> 42", "The answer is 42"),
    ("a\n\n<think>x</think>\n\nb", "a\n\n\n\nb"),
    ("<think>x</think>\n\nThe answer.", "The answer."),  # framing newline at the start of the answer
    ("<think>x</think>\n\nmid <think>y</think> end", "mid  end"),
])
def test_reasoning_block_keeps_surrounding_whitespace(text, expected):
    assert answer(views({"reasoning": "qwen3"}, text)) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (f"I'll check. {CALL} Done.", "I'll check.  Done."),
    (f"I'll check.\n{CALL}\nDone.", "I'll check.\n\nDone."),
    (f"Let me check.\n\n{CALL}\n", "Let me check."),  # nothing follows: the whitespace only framed the call
    (f"{CALL}\n\nDone.", "Done."),
])
def test_tool_block_keeps_surrounding_whitespace(text, expected):
    view = views({"reasoning": "qwen3", "tool_calls": "hermes"}, text)
    assert answer(view) == expected
    assert [x for x in view if x[0] == "call"] == [("call", 0, "f", {})]


def test_text_call_text_order():
    assert views({"tool_calls": "hermes"}, f"I'll check. {CALL} Done.") == [
        ("T", "I'll check."), ("call", 0, "f", {}), ("T", "  Done.")
    ]

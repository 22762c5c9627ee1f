"""Llama 3.x writes its JSON call as the whole message or after a sentence, Llama 3.2 / 4 their pythonic lists the
same way: a bare call at the start of a line is a call, also after answer text. A `{` or `[` inside a sentence, a call
shown in a code fence, and JSON that is not a call stay answer text."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentserve.parsers.formats import TOOL_FORMATS

from .fixtures import CALL_A, CALL_B, TOOLS, r_llama3_bare, r_pythonic
from .helpers import run, split, summary

RENDER = {"llama3_json": r_llama3_bare, "pythonic": r_pythonic}
FMTS = sorted(RENDER)


def views(fmt, text):
    """The summary, the same fed whole and by characters; answer text without the line breaks around calls."""
    kw = {"tool_calls": fmt, "tools": TOOLS}
    whole = summary(run(kw, [text]))
    assert summary(run(kw, list(text))) == whole
    return [("T", v[1].strip("\n")) if v[0] == "T" else v for v in whole]


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("lead", ["I'll look that up.\n", "Checking the weather first.\n\n", "Sure:\n  "])
def test_call_after_a_sentence_on_its_own_line(fmt, lead):
    assert views(fmt, lead + RENDER[fmt]([CALL_A])) == [("T", lead.strip()), ("call", 0, *CALL_A)]


@pytest.mark.parametrize("fmt", FMTS)
def test_calls_on_several_lines_between_text(fmt):
    text = f"First:\n{RENDER[fmt]([CALL_A])}\nthen:\n{RENDER[fmt]([CALL_B])}\nDone."
    assert views(fmt, text) == [("T", "First:"), ("call", 0, *CALL_A), ("T", "then:"), ("call", 1, *CALL_B),
                                ("T", "Done.")]


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("shape", [
    "You could call {call} here.",  # inside a sentence
    "Example:\n```json\n{call}\n```\nThat is the shape.",  # in a code fence
    "Example:\n  ```\n  {call}\n  ```",  # an indented fence
    "One `{call}` inline.",
])
def test_calls_shown_in_prose_are_text(fmt, shape):
    text = shape.format(call=RENDER[fmt]([CALL_A]))
    assert views(fmt, text) == [("T", text)]


@pytest.mark.parametrize("text", [
    '{"city": "Paris", "days": 3}',  # a JSON answer, not a call
    'The config is:\n{"debug": true}\nas asked.',
    "{}",
])
def test_json_that_is_not_a_call_is_text(text):
    assert views("llama3_json", text) == [("T", text)]


@pytest.mark.parametrize("text", ["Links:\n[docs](https://example.com)", "Steps:\n[1, 2] and [x]"])
def test_bracketed_prose_at_a_line_start_is_text(text):
    assert views("pythonic", text) == [("T", text)]


PROSE = st.text(st.sampled_from("ab {}[]()`:=,\"'"), max_size=20).map(lambda s: "Note " + s)


@pytest.mark.parametrize("fmt", FMTS)
@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.one_of(
    PROSE.map(lambda s: ("prose", s)),
    st.sampled_from([CALL_A, CALL_B]).map(lambda c: ("call", c)),
    st.sampled_from([CALL_A, CALL_B]).map(lambda c: ("fenced", c)),
), min_size=1, max_size=6), data=st.data())
def test_only_line_start_calls_outside_fences_are_calls(fmt, items, data):
    lines = []
    for kind, v in items:
        lines.append(v if kind == "prose" else RENDER[fmt]([v]) if kind == "call" else
                     "```\n" + RENDER[fmt]([v]) + "\n```")
    text = "\n".join(lines)
    kw = {"tool_calls": fmt, "tools": TOOLS}
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=10))
    view = summary(run(kw, split(text, cuts)))
    assert view == summary(run(kw, [text]))
    assert [v[2:] for v in view if v[0] == "call"] == [v for kind, v in items if kind == "call"]
    answer = "".join(v[1] for v in view if v[0] == "T")
    for kind, v in items:
        if kind == "prose":
            assert v.strip() in answer
        elif kind == "fenced":
            assert RENDER[fmt]([v]) in answer


def test_the_flag_is_what_allows_calls_after_prose(monkeypatch):
    monkeypatch.setitem(TOOL_FORMATS, "pythonic", replace(TOOL_FORMATS["pythonic"], bare_after_prose=False))
    call = r_pythonic([CALL_A])
    assert views("pythonic", "Sure.\n" + call) == [("T", "Sure.\n" + call)]
    assert views("pythonic", "  " + call) == [("call", 0, *CALL_A)]

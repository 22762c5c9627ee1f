"""The doctor names each cache-buster, on prompts rendered by the real template and tokenizer.

Every case runs through both faces, the offline SessionTracker and the serving path's PrefixDoctor
(async, byte-bounded memory, diagnosis on a worker thread with a GIL-releasing decode): same report.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from agentserve.config import ModelSpec
from agentserve.doctor import PrefixDoctor, SessionTracker
from agentserve.doctor.decode import releasing_decode
from agentserve.doctor.trace import TraceTurn, TraceWriter, read_trace
from agentserve.offline.doctor_replay import replay
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import (
    Conversation,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Turn,
)

TOOL_A = ToolSpec(name="read_file", parameters={"type": "object", "properties": {"path": {"type": "string"}}})
TOOL_B = ToolSpec(name="run_shell", parameters={"type": "object", "properties": {"cmd": {"type": "string"}}})
TOOL_C = ToolSpec(name="web_search", parameters={"type": "object", "properties": {"q": {"type": "string"}}})

OUTPUT = (
    "<think>\nI should read the file first.\n</think>\n\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
)


@pytest.fixture(scope="module")
def pre(model_path):
    return Preprocessor(ModelSpec(replay_family="agentserve_default"), str(model_path), 16)


@pytest.fixture(scope="module")
def tok(pre):
    return pre._tok


def _conv(system: str, turns: list[Turn], tools=(TOOL_A, TOOL_B)) -> Conversation:
    return Conversation(turns=(Turn(role="system", blocks=(TextBlock(text=system),)), *turns), tools=tuple(tools))


USER = Turn(role="user", blocks=(TextBlock(text="Fix the bug in a.py"),))
RESULT = Turn(role="tool", blocks=(ToolResultBlock(tool_call_id="c1", content="print('hi')"),))
CALL = ToolCallBlock(id="c1", name="read_file", arguments='{"path": "a.py"}')
REASON = ReasoningBlock(text="I should read the file first.")


def _both(tok, prompt: list[int], out_ids: list[int], next_prompt: list[int]):
    """The report of the offline tracker, after checking the serving-path doctor gives the same one."""
    tracker = SessionTracker(tok.decode, frozenset(tok.all_special_ids))
    tracker.record("s", prompt, out_ids)
    expected = tracker.check("s", next_prompt)

    async def served():
        doctor = PrefixDoctor(releasing_decode(tok), frozenset(tok.all_special_ids))
        try:
            doctor.record("s", prompt, out_ids)
            return await doctor.check("s", next_prompt)
        finally:
            doctor.close()

    assert asyncio.run(served()) == expected
    return expected


def _report(pre, tok, first: Conversation, second: Conversation, output: str = OUTPUT):
    prompt = pre.render(first).token_ids
    out_ids = tok.encode(output, add_special_tokens=False) + [tok.eos_token_id]
    return _both(tok, prompt, out_ids, pre.render(second).token_ids)


def _history(assistant_blocks, system="You are a coding agent.", tools=(TOOL_A, TOOL_B)):
    return _conv(system, [USER, Turn(role="assistant", blocks=tuple(assistant_blocks)), RESULT], tools)


def test_faithful_replay_reuses_everything(pre, tok):
    r = _report(pre, tok, _conv("You are a coding agent.", [USER]), _history([REASON, CALL]))
    assert r.cause is None and r.reuse_ratio == 1.0


def test_interleaved_turn_replays_in_place(pre, tok):
    output = (
        "<think>\nFirst read a.py.\n</think>\n\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
        "<think>\nThen run the tests.\n</think>\n\n"
        '<tool_call>\n{"name": "run_shell", "arguments": {"cmd": "pytest"}}\n</tool_call>'
    )
    blocks = [
        ReasoningBlock(text="First read a.py."),
        ToolCallBlock(id="c1", name="read_file", arguments='{"path": "a.py"}'),
        ReasoningBlock(text="Then run the tests."),
        ToolCallBlock(id="c2", name="run_shell", arguments='{"cmd": "pytest"}'),
    ]
    r = _report(pre, tok, _conv("You are a coding agent.", [USER]), _history(blocks), output=output)
    assert r.cause is None and r.reuse_ratio == 1.0


def test_billing_header(pre, tok):
    first = _conv("x-anthropic-billing-header: cc_version=2.1; cch=aaaa1;\nYou are a coding agent.", [USER])
    second = _history([REASON, CALL], system="x-anthropic-billing-header: cc_version=2.1; cch=bbbb2;\nYou are a coding agent.")
    r = _report(pre, tok, first, second)
    assert r.cause == "billing_header" and r.reuse_ratio < 0.2


def test_date_line(pre, tok):
    first = _conv("You are a coding agent.\nToday's date is 2026-11-29.", [USER])
    second = _history([REASON, CALL], system="You are a coding agent.\nToday's date is 2026-11-30.")
    assert _report(pre, tok, first, second).cause == "date_line"


def test_system_prompt_changed(pre, tok):
    first = _conv("You are a coding agent.", [USER])
    second = _history([REASON, CALL], system="You are a careful coding agent.")
    assert _report(pre, tok, first, second).cause == "system_prompt_changed"


def test_tools_reordered(pre, tok):
    first = _conv("You are a coding agent.", [USER], tools=(TOOL_A, TOOL_B))
    second = _history([REASON, CALL], tools=(TOOL_B, TOOL_A))
    assert _report(pre, tok, first, second).cause == "tools_reordered"


def test_tools_changed(pre, tok):
    first = _conv("You are a coding agent.", [USER], tools=(TOOL_A, TOOL_B))
    second = _history([REASON, CALL], tools=(TOOL_A, TOOL_C))
    assert _report(pre, tok, first, second).cause == "tools_changed"


def test_reasoning_dropped(pre, tok):
    r = _report(pre, tok, _conv("You are a coding agent.", [USER]), _history([CALL]))
    assert r.cause == "reasoning_dropped"
    # Everything up to the model's output is still reused.
    assert r.reused_tokens >= len(pre.render(_conv("You are a coding agent.", [USER])).token_ids)


def test_reasoning_reordered(pre, tok):
    output = (
        "<think>\nFirst read a.py.\n</think>\n\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
        "<think>\nThen run the tests.\n</think>\n\n"
        '<tool_call>\n{"name": "run_shell", "arguments": {"cmd": "pytest"}}\n</tool_call>'
    )
    # What a server that lost the interleaving replays: both reasoning spans first, then both calls.
    blocks = [
        ReasoningBlock(text="First read a.py."),
        ReasoningBlock(text="Then run the tests."),
        ToolCallBlock(id="c1", name="read_file", arguments='{"path": "a.py"}'),
        ToolCallBlock(id="c2", name="run_shell", arguments='{"cmd": "pytest"}'),
    ]
    r = _report(pre, tok, _conv("You are a coding agent.", [USER]), _history(blocks), output=output)
    assert r.cause == "reasoning_reordered"


def test_retokenization_drift(pre, tok):
    first = _conv("You are a coding agent.", [USER])
    text_reply = Turn(role="assistant", blocks=(TextBlock(text="Hello world"),))
    second = _conv("You are a coding agent.", [USER, text_reply, Turn(role="user", blocks=(TextBlock(text="thanks"),))])
    prompt = pre.render(first).token_ids
    # The same text, tokenized one character at a time: what a model may sample, not what re-encoding gives.
    odd = [tok.convert_tokens_to_ids(c) for c in "Hello"] + tok.encode(" world", add_special_tokens=False)
    assert _both(tok, prompt, odd + [tok.eos_token_id], pre.render(second).token_ids).cause == "retokenization"


def test_trace_round_trip_and_replay(tmp_path, pre, tok):
    path = tmp_path / "trace.jsonl"
    w = TraceWriter(path)
    p1 = pre.render(_conv("You are a coding agent.", [USER])).token_ids
    out = tok.encode(OUTPUT, add_special_tokens=False) + [tok.eos_token_id]
    w.write(TraceTurn("s", p1, out))
    w.write(TraceTurn("s", pre.render(_history([CALL])).token_ids, [tok.eos_token_id]))
    reports = [r for _, r in replay(read_trace(path), tok.decode, frozenset(tok.all_special_ids))]
    assert reports[0] is None and reports[1].cause == "reasoning_dropped"
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(ValueError, match="trace.jsonl:3"):
        list(read_trace(path))
    assert json.loads(path.read_text().splitlines()[0])["session"] == "s"


def test_cli_reports_each_turn(tmp_path, pre, tok, capsys):
    from agentserve.cli import main

    path = tmp_path / "trace.jsonl"
    w = TraceWriter(path)
    p1 = pre.render(_conv("You are a coding agent.", [USER])).token_ids
    w.write(TraceTurn("sess", p1, tok.encode(OUTPUT, add_special_tokens=False) + [tok.eos_token_id]))
    w.write(TraceTurn("sess", pre.render(_history([CALL])).token_ids, [tok.eos_token_id]))
    code = main(["doctor", str(path), "--model-path", str(pre._tok.name_or_path)])
    out = capsys.readouterr().out
    assert "reasoning_dropped" in out and "(first turn)" in out
    assert code == 2  # a turn reused less than 98% of the previous one


def test_reasoning_dropped_from_an_older_turn(pre, tok):
    """A proxy that trims old thinking: the divergence is inside the previous prompt, not its output."""
    older = Turn(role="assistant", blocks=(REASON, CALL))
    turn_n = _conv("You are a coding agent.", [USER, older, RESULT, Turn(role="user", blocks=(TextBlock(text="go on"),))])
    trimmed = _conv(
        "You are a coding agent.",
        [USER, Turn(role="assistant", blocks=(CALL,)), RESULT, Turn(role="user", blocks=(TextBlock(text="go on"),)),
         Turn(role="assistant", blocks=(TextBlock(text="Done."),)), Turn(role="user", blocks=(TextBlock(text="thanks"),))],
    )
    r = _report(pre, tok, turn_n, trimmed, output="Done.")
    assert r.cause == "reasoning_dropped"


def test_output_rerendered_is_named_when_the_preprocessor_says_the_output_went_through_the_template(pre, tok):
    """The model wrote no newlines around its reasoning; the template re-renders them. Told the previous output
    was re-rendered (no kept turn placed), the doctor names `output_rerendered`, else only `history_changed`."""
    output = '<think>I should read the file first.</think><tool_call>\n{"name":"read_file","arguments":{"path":"a.py"}}\n</tool_call>'
    prompt = pre.render(_conv("You are a coding agent.", [USER])).token_ids
    out_ids = tok.encode(output, add_special_tokens=False) + [tok.eos_token_id]
    following = pre.render(_history([REASON, CALL])).token_ids
    tracker = SessionTracker(tok.decode, frozenset(tok.all_special_ids))
    tracker.record("s", prompt, out_ids)
    assert tracker.check("s", following).cause == "history_changed"

    async def served(rerendered: bool):
        doctor = PrefixDoctor(releasing_decode(tok), frozenset(tok.all_special_ids))
        try:
            doctor.record("s", prompt, out_ids)
            return await doctor.check("s", following, rerendered)
        finally:
            doctor.close()

    report = asyncio.run(served(True))
    assert report.cause == "output_rerendered" and len(prompt) < report.reused_tokens < len(prompt) + len(out_ids)
    assert asyncio.run(served(False)).cause == "history_changed"

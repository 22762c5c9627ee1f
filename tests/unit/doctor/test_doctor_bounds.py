"""The doctor against prompts an attacker writes: every scan is linear and windowed, each diagnosis has a deadline,
and a request's admission never waits on a diagnosis (the counts are exact at once; the cause when it is ready)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentserve.config import ModelSpec
from agentserve.doctor import PrefixDoctor, SessionTracker
from agentserve.doctor import prefix_doctor
from agentserve.doctor.causes import WINDOW_TOKENS, Divergence, attribute
from agentserve.doctor.report import common_prefix
from agentserve.doctor.decode import releasing_decode
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import Conversation, TextBlock, Turn


@pytest.fixture(scope="module")
def pre(model_path):
    return Preprocessor(ModelSpec(replay_family="agentserve_default", context_window=200_000), str(model_path), 16)


def _user(text: str) -> Turn:
    return Turn(role="user", blocks=(TextBlock(text=text),))


def _turns(tok, pre, body: str, edited: str) -> tuple[list[int], list[int], list[int]]:
    system = Turn(role="system", blocks=(TextBlock(text="You are a coding agent."),))
    prompt = pre.render(Conversation(turns=(system, _user("hello"), _user(body)))).token_ids
    output = tok.encode("<think>\n" * 2000 + "ok", add_special_tokens=False) + [tok.eos_token_id]
    return prompt, output, pre.render(Conversation(turns=(system, _user("hello"), _user(edited)))).token_ids


@pytest.mark.parametrize("where", ["prompt", "output"])
def test_ten_thousand_unclosed_openers_are_diagnosed_in_well_under_a_second(pre, tokenizer, where):
    """The cause regex rescanned to the end from every unclosed `<think>`: 10K openers took seconds and held the
    doctor's one worker (every diverging request's admission waited behind it)."""
    openers = "<think>" * 10_000
    if where == "prompt":  # the divergence is at a line of openers in the earlier prompt
        body, edited = "x\n" + openers, "x\nzzz" + openers
        prompt, output, next_prompt = _turns(tokenizer, pre, body, edited)
    else:  # inside the output the model wrote, full of openers
        prompt, _, _ = _turns(tokenizer, pre, "x", "x")
        output = tokenizer.encode(openers + "\nend", add_special_tokens=False)
        next_prompt = [*prompt, *tokenizer.encode("<think>\n" + openers[:70_000 // 2] + "different", add_special_tokens=False)]
    tracker = SessionTracker(releasing_decode(tokenizer), frozenset(tokenizer.all_special_ids))
    tracker.record("s", prompt, output)
    started = time.perf_counter()
    report = tracker.check("s", next_prompt)
    elapsed = time.perf_counter() - started
    assert report is not None and report.cause not in (None, "undiagnosed")
    assert elapsed < 0.5, elapsed


def test_a_diagnosis_past_its_deadline_is_undiagnosed_with_exact_counts(tokenizer):
    ids = tokenizer.encode("line one\nline two\n", add_special_tokens=False)
    d = Divergence(expected=ids, actual=ids[:3] + [5, 6], at=3, prompt_len=len(ids))
    assert attribute(d, tokenizer.decode, deadline=time.monotonic() - 1) == "undiagnosed"
    assert attribute(d, tokenizer.decode) not in ("undiagnosed",)


def _blocked_doctor(tokenizer, release: threading.Event) -> PrefixDoctor:
    decode = releasing_decode(tokenizer)

    def slow(ids):
        release.wait(10)
        return decode(ids)

    return PrefixDoctor(slow, frozenset(tokenizer.all_special_ids))


def test_admission_takes_the_counts_at_once_when_the_worker_is_busy(tokenizer):
    """One caller's expensive diagnosis holds the worker: another caller's check answers within the report wait,
    with exact counts and cause `undiagnosed`, and the cause still comes to whoever waits for it."""
    release = threading.Event()
    doctor = _blocked_doctor(tokenizer, release)
    prompt, output = list(range(100, 400)), [7, 8]
    edited = prompt[:150] + [9] + prompt[151:] + output

    async def go():
        for key in ("a", "b"):
            doctor.record(key, prompt, output)
        hog = doctor.start("a", edited)  # the worker is now stuck in this one's decode
        started = time.perf_counter()
        check = doctor.start("b", edited)
        fast = await check.report(prefix_doctor.REPORT_WAIT_S)
        waited = time.perf_counter() - started
        release.set()
        full = await check.report()
        await hog.report()
        return fast, waited, full

    try:
        fast, waited, full = asyncio.run(go())
    finally:
        release.set()
        doctor.close()
    assert fast.cause == "undiagnosed" and (fast.reused_tokens, fast.expected_tokens) == (150, 302)
    assert waited < prefix_doctor.REPORT_WAIT_S + 0.2
    assert full.cause not in (None, "undiagnosed") and full.reused_tokens == 150


def test_a_backlog_of_diagnoses_is_bounded(tokenizer, monkeypatch):
    monkeypatch.setattr(prefix_doctor, "MAX_BACKLOG", 3)
    release = threading.Event()
    doctor = _blocked_doctor(tokenizer, release)
    prompt, output = list(range(100, 200)), [7]
    edited = [1] + prompt[1:] + output

    async def go():
        doctor.record("s", prompt, output)
        checks = [doctor.start("s", edited) for _ in range(6)]
        extra = [c for c in checks if c._diagnosis is None]
        release.set()
        reports = [await c.report() for c in checks]
        return extra, reports

    try:
        extra, reports = asyncio.run(go())
    finally:
        release.set()
        doctor.close()
    assert len(extra) == 3  # past the backlog: answered at once, not queued
    assert [r.cause == "undiagnosed" for r in reports] == [False] * 3 + [True] * 3


@pytest.mark.parametrize("lines", [1_000, 30_000])  # ~11K and ~330K tokens of history
def test_a_diagnosis_decodes_windows_around_the_divergence_not_the_history(tokenizer, lines):
    """Naming a cause decoded both histories whole (~125 ms at 250K tokens, on a core the serving path shares, for
    every diverging turn of a long session); now the same windows at any length, and the same causes."""
    line = tokenizer.encode("the agent read a file and wrote a line of code\n", add_special_tokens=False)
    thought = tokenizer.encode("<think>\nan old thought\n</think>\nthe answer\n", add_special_tokens=False)
    history = line * (lines // 2) + thought + line * (lines // 2)
    output = tokenizer.encode("<think>\nnow\n</think>\ndone", add_special_tokens=False)
    decoded: list[int] = []

    def decode(ids):
        decoded.append(len(ids))
        return tokenizer.decode(ids)

    edited = tokenizer.encode("an edited line\n", add_special_tokens=False)
    at = len(line) * (lines // 4)
    cases = {
        "history_changed": history[:at] + edited + history[at:],
        "reasoning_dropped": history[: len(line) * (lines // 2)] + history[len(line) * (lines // 2) + len(thought) - 4:],
    }
    for cause, actual in cases.items():
        decoded.clear()
        expected = history + output
        d = Divergence(expected, actual, common_prefix(expected, actual), len(history))
        assert attribute(d, decode) == cause
        assert sum(decoded) <= 5 * WINDOW_TOKENS + 2 * len(output), (cause, sum(decoded), len(history))

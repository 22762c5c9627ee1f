"""The Ingress's request trace observer (ingress/observers/request_traces.py): what a finished agent session's
records say, and what they never carry."""

from __future__ import annotations

import json
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.ingress.observers import Timings, TurnEnded
from agentserve.ingress.observers.request_traces import RequestTraces
from agentserve.ingress.output.request_state import RequestState
from agentserve.protocol import (
    AgentHints, Conversation, EngineDelta, EngineRequest, GenerationRequest, Preprocessed, PromptReport, RouteDecision,
    RouteRequest, SamplingParams, TextBlock, Turn,
)
from agentserve.traces.blocks import trace_salt
from agentserve.traces.jsonl import read_records
from agentserve.traces.record import TraceRecord
from agentserve.traces.writer import RequestTraceWriter

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
SCOPE = "ab" * 32  # a key digest


def _writer(tmp_path) -> RequestTraceWriter:
    return RequestTraceWriter(tmp_path / "r.jsonl", salt=trace_salt("k" * 32), max_bytes_per_file=1 << 20,
                              keep_files=1, max_pending_bytes=1 << 24)


def _ended(tokenizer, *, rid: str, prompt: list[int], output_text: str, kind: str, at: float, took: float,
           session: str | None = "sess-1", parent: str | None = None, text: str = "hi", cached: int = 0,
           metered: bool = True) -> TurnEnded:
    request = GenerationRequest(
        request_id=rid, model="m", hints=AgentHints(session_id=session, parent_session_id=parent, kind=kind),
        conversation=Conversation(turns=(Turn(role="user", blocks=(TextBlock(text=text),)),)),
    )
    prepared = Preprocessed(
        engine=EngineRequest(request_id=rid, model="m", token_ids=prompt, sampling=SamplingParams(), max_tokens=64),
        route=RouteRequest(request_id=rid, model="m", block_hashes=[], prompt_tokens=len(prompt), max_tokens=64),
        report=PromptReport(session_key=session or ""),
    )
    state = RequestState(tokenizer, reasoning_parser=None, tool_call_parser="hermes", tools=TOOLS)
    output = tokenizer.encode(output_text, add_special_tokens=False)
    state.feed(EngineDelta(token_ids=output, finish_reason="stop", prompt_tokens=len(prompt),
                           num_cached_tokens=cached))
    base = 1000.0  # perf_counter seconds at the session's start
    timings = Timings(1_700_000_000.0 + at, base + at, base + at + 0.01, base + at + 0.05, base + at + took)
    return TurnEnded(request=request, model="m", prepared=prepared, route=RouteDecision(replica_id="engine-1"),
                     state=state, session=f"x/m/{session}", warm_only=False, metered=metered, api="anthropic",
                     scope=SCOPE, timings=timings)


CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "/home/alice/SECRET_PLAN.txt"}}\n</tool_call>'


def _session(tokenizer, traces: RequestTraces) -> list[list[int]]:
    """Three turns of one agent session: a user message, then two tool results, each prompt extending the last
    prompt and output token for token."""
    p1 = list(range(100, 140))
    t1 = _ended(tokenizer, rid="r1", prompt=p1, output_text=CALL, kind="user_message", at=0.0, took=1.0)
    traces.turn_ended(t1)
    p2 = p1 + list(t1.state.output_ids) + list(range(500, 530))
    t2 = _ended(tokenizer, rid="r2", prompt=p2, output_text=CALL, kind="tool_result", at=3.5, took=0.5,
                cached=len(p1))
    traces.turn_ended(t2)
    p3 = p2 + list(t2.state.output_ids) + list(range(600, 610))
    traces.turn_ended(_ended(tokenizer, rid="r3", prompt=p3, output_text="All done.", kind="tool_result", at=6.0,
                             took=0.2, cached=len(p2) // 16 * 16))
    return [p1, p2, p3]


def test_an_agent_sessions_records(tokenizer, tmp_path):
    writer = _writer(tmp_path)
    traces = RequestTraces(writer, block_size={"m": 16}, session_memo_bytes=1 << 20)
    prompts = _session(tokenizer, traces)
    assert writer.flush(timeout=10)
    r1, r2, r3 = read_records(tmp_path / "r.jsonl")
    assert [r.kind for r in (r1, r2, r3)] == ["user_message", "tool_result", "tool_result"]
    assert [r.finish_reason for r in (r1, r2, r3)] == ["tool_calls", "tool_calls", "stop"]
    assert r1.tool_calls == ("read_file",) and r3.tool_calls == ()
    assert r1.gap_s is None and r2.gap_s == pytest.approx(2.5) and r3.gap_s == pytest.approx(2.0)
    assert [r.prompt_tokens for r in (r1, r2, r3)] == [len(p) for p in prompts]
    assert r2.cached_tokens == len(prompts[0])
    assert r1.queue_s == pytest.approx(0.01) and r1.ttft_s == pytest.approx(0.05) and r1.duration_s == 1.0
    assert r1.replica == "engine-1" and r1.key == SCOPE[:12] and r1.api == "anthropic" and r1.session == "sess-1"
    # A replay sees each turn's prompt and output blocks come back as the next turn's prefix.
    for this, nxt in ((r1, r2), (r2, r3)):
        reused = this.input_blocks + this.output_blocks
        assert reused and nxt.input_blocks[: len(reused)] == reused


def test_records_carry_no_payload(tokenizer, tmp_path):
    writer = _writer(tmp_path)
    traces = RequestTraces(writer, block_size={"m": 16}, session_memo_bytes=1 << 20)
    prompts = _session(tokenizer, traces)
    assert writer.flush(timeout=10)
    text = (tmp_path / "r.jsonl").read_text()
    for word in ("SECRET_PLAN", "alice", "All done", "arguments", "hi"):
        assert word not in text
    for line in text.splitlines():
        raw = json.loads(line)
        assert set(raw) == set(TraceRecord.model_fields)  # nothing besides the schema's fields
        numbers = {v for k, v in raw.items() if isinstance(v, list) and k.endswith("_blocks") for v in v}
        assert not numbers & {t for p in prompts for t in p}  # hashes only, never a token id


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.text(alphabet=st.characters(min_codepoint=48, max_codepoint=122), min_size=6, max_size=40))
def test_no_text_from_the_conversation_or_the_output_reaches_a_record(tokenizer, tmp_path_factory, tail):
    secret = "Zq" + tail  # (a capital Z appears in no field a record has)
    tmp = tmp_path_factory.mktemp("t")
    writer = _writer(tmp)
    traces = RequestTraces(writer, block_size={"m": 16}, session_memo_bytes=1 << 20)
    prompt = tokenizer.encode(secret, add_special_tokens=False)
    traces.turn_ended(_ended(tokenizer, rid="r", prompt=prompt, output_text=f"Echo {secret}", kind="user_message",
                             at=0, took=0.1, session=None, text=secret))
    writer.close()
    assert secret not in (tmp / "r.jsonl").read_text()


def test_work_the_server_chose_is_not_a_record_and_the_gap_map_is_bounded(tokenizer, tmp_path):
    writer = _writer(tmp_path)
    traces = RequestTraces(writer, block_size={"m": 16}, session_memo_bytes=300)  # room for one session's entry
    traces.turn_ended(_ended(tokenizer, rid="spec", prompt=[1] * 20, output_text="x", kind="other", at=0, took=0.1,
                             metered=False))
    for s in range(4):
        traces.turn_ended(_ended(tokenizer, rid=f"a{s}", prompt=[1] * 20, output_text="x", kind="user_message",
                                 at=s, took=0.1, session=f"s{s}"))
    traces.turn_ended(_ended(tokenizer, rid="b3", prompt=[1] * 20, output_text="x", kind="user_message", at=9,
                             took=0.1, session="s3"))
    traces.turn_ended(_ended(tokenizer, rid="b0", prompt=[1] * 20, output_text="x", kind="user_message", at=9,
                             took=0.1, session="s0"))
    writer.close()
    records = {r.request_id: r for r in read_records(tmp_path / "r.jsonl")}
    assert "spec" not in records
    assert records["b3"].gap_s == pytest.approx(5.9)  # the most recent sessions are remembered
    assert records["b0"].gap_s is None  # the oldest was pushed out: unknown, not invented


def test_a_request_that_overlaps_its_sessions_previous_one_gets_no_negative_gap(tokenizer, tmp_path):
    writer = _writer(tmp_path)
    traces = RequestTraces(writer, block_size={"m": 16}, session_memo_bytes=1 << 20)
    traces.turn_ended(_ended(tokenizer, rid="long", prompt=[1] * 20, output_text="x", kind="user_message", at=0,
                             took=5.0))
    traces.turn_ended(_ended(tokenizer, rid="side", prompt=[2] * 20, output_text="x", kind="other", at=1, took=5.0))
    writer.close()
    assert {r.request_id: r.gap_s for r in read_records(tmp_path / "r.jsonl")}["side"] == 0.0


def test_a_subagent_names_its_parent(tokenizer, tmp_path):
    writer = _writer(tmp_path)
    traces = RequestTraces(writer, block_size={"m": 16}, session_memo_bytes=1 << 20)
    traces.turn_ended(_ended(tokenizer, rid="sub", prompt=list(array("I", range(40))), output_text="ok",
                             kind="subagent_spawn", at=0, took=0.1, session="sess-1/agent-7", parent="sess-1"))
    writer.close()
    (r,) = read_records(tmp_path / "r.jsonl")
    assert (r.session, r.parent_session, r.kind, r.gap_s) == ("sess-1/agent-7", "sess-1", "subagent_spawn", None)


def test_a_caller_without_a_key_has_no_key_id(tokenizer, tmp_path):
    from dataclasses import replace

    from agentserve.ingress.middleware.auth import identity_of

    writer = _writer(tmp_path)
    traces = RequestTraces(writer, block_size={"m": 16}, session_memo_bytes=1 << 20)
    ended = _ended(tokenizer, rid="anon", prompt=[1] * 20, output_text="x", kind="user_message", at=0, took=0.1)
    traces.turn_ended(replace(ended, scope=identity_of(None)))
    writer.close()
    assert [r.key for r in read_records(tmp_path / "r.jsonl")] == [None]

"""Request traces through the real graph: a 3-turn agent session with tool results, driven with the official
`anthropic` SDK, leaves one record per request (kinds, tool gaps, cached tokens, block reuse, the engine replica, no
payload), and with an OTLP endpoint each request is one trace with spans from Ingress, Preprocessor, Router and
Engine, tagged with the session."""

from __future__ import annotations

import hashlib
import os
import stat
import time

import anthropic
import pytest
from ray import serve

from agentserve.traces.jsonl import read_records
from tests.support.graph import running_graph
from tests.support.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.integration

SESSION = "trace-session-1"
KEY = "sk-trace-test-key"
CALL_LS = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls /home/alice/PRIVATE_DIR"}}\n</tool_call>'
CALL_CAT = '<tool_call>\n{"name": "Read", "arguments": {"path": "NOTES_SECRET.md"}}\n</tool_call>'
RULES = [
    {"match": "TR_LIST_FILES", "reply": CALL_LS, "itl_ms": 0},
    {"match": "TR_LS_OUTPUT", "reply": CALL_CAT, "itl_ms": 0},
    {"match": "TR_NOTES_BODY", "reply": "The notes say hello.", "itl_ms": 0},
    {"match": "", "reply": "ok", "itl_ms": 0},
]
TOOLS = [
    {"name": name, "description": f"{name} tool", "input_schema": {"type": "object", "properties": {arg: {"type": "string"}}}}
    for name, arg in (("Bash", "command"), ("Read", "path"))
]
SYSTEM = "You are a careful coding agent working in a repository. " * 12
GAP_S = 0.3


@pytest.fixture(scope="module")
def graph(model_path, tmp_path_factory):
    directory = tmp_path_factory.mktemp("request-traces")
    with OtlpReceiver() as rx:
        args = {
            "engine": {"kind": "scripted", "block_size": 16, "rules": RULES},
            "request_traces": {"enabled": True, "directory": str(directory), "otlp_endpoint": rx.endpoint,
                               "otlp_export_interval_s": 0.2},
        }
        with running_graph(args) as url:
            yield url, directory, rx


def _records(directory, n: int, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        files = sorted(directory.glob("requests-*.jsonl"))
        records = [r for f in files for r in read_records(f)]
        if len(records) >= n or time.monotonic() > deadline:
            return files, records
        time.sleep(0.05)


def test_an_agent_session_leaves_its_records_and_one_trace_per_request(graph):
    url, directory, rx = graph
    client = anthropic.Anthropic(base_url=url, api_key=KEY, default_headers={"x-claude-code-session-id": SESSION},
                                 max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "TR_LIST_FILES please"}]
    results = ["TR_LS_OUTPUT README.md src", "TR_NOTES_BODY remember the milk"]
    for turn in range(3):
        reply = client.messages.create(model="smollm2", max_tokens=200, system=SYSTEM, tools=TOOLS,
                                       messages=messages)
        if turn == 2:
            assert reply.stop_reason == "end_turn"
            break
        assert reply.stop_reason == "tool_use"
        call = next(b for b in reply.content if b.type == "tool_use")
        time.sleep(GAP_S)  # the tool runs
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                   "content": results[turn]}]}]

    files, records = _records(directory, 3)
    assert len(records) == 3
    r1, r2, r3 = sorted(records, key=lambda r: r.t)
    assert [r.kind for r in (r1, r2, r3)] == ["user_message", "tool_result", "tool_result"]
    assert [r.finish_reason for r in (r1, r2, r3)] == ["tool_calls", "tool_calls", "stop"]
    assert [r.tool_calls for r in (r1, r2, r3)] == [("Bash",), ("Read",), ()]
    assert {r.session for r in records} == {SESSION} and all(r.api == "anthropic" for r in records)
    assert r1.gap_s is None and all(GAP_S <= r.gap_s < GAP_S + 2.0 for r in (r2, r3))
    assert r1.cached_tokens == 0
    assert all(r.cached_tokens >= 16 * len(p.input_blocks) - 16 for r, p in ((r2, r1), (r3, r2)))
    for this, nxt in ((r1, r2), (r2, r3)):  # the next turn extends this one's prompt and output token for token
        reused = this.input_blocks + this.output_blocks
        assert this.output_blocks and nxt.input_blocks[: len(reused)] == reused
    engines = serve.get_deployment_handle("Router", app_name="agentserve").stats.remote().result().replicas
    assert {r.replica for r in records} <= set(engines) and r1.replica is not None
    assert all(r.queue_s is not None and 0 <= r.queue_s <= r.ttft_s <= r.duration_s for r in records)
    assert {r.key for r in records} == {hashlib.sha256(KEY.encode()).hexdigest()[:12]}
    text = "".join(f.read_text() for f in files)
    for payload in ("TR_LIST_FILES", "PRIVATE_DIR", "NOTES_SECRET", "remember the milk", "careful coding", KEY):
        assert payload not in text
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files)

    # OpenTelemetry: each request one trace, spans from all four deployments, each with the session.
    roots = {r.request_id for r in records}
    services = {"agentserve.ingress", "agentserve.preprocessor", "agentserve.router", "agentserve.engine"}

    def every_request_traced_by_every_deployment(received) -> bool:
        # Each replica exports on its own schedule: wait until every request's trace holds all four services.
        roots_seen = {x.attributes.get("agentserve.request_id"): x.trace_id
                      for x in received if x.name == "ingress.request"}
        return roots <= set(roots_seen) and all(
            {x.service for x in received if x.trace_id == roots_seen[r]} >= services for r in roots)

    spans = rx.wait_for(every_request_traced_by_every_deployment, timeout=30.0)
    by_root = {s.attributes.get("agentserve.request_id"): s for s in spans if s.name == "ingress.request"}
    assert roots <= set(by_root)
    assert len({by_root[r].trace_id for r in roots}) == 3
    for rid in roots:
        trace = [s for s in spans if s.trace_id == by_root[rid].trace_id]
        assert {s.service for s in trace} == services
        assert all(s.attributes.get("session.id") == SESSION for s in trace)
        assert all(s.parent_span_id == by_root[rid].span_id for s in trace if s is not by_root[rid])

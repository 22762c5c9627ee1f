"""The live replayer, against an in-process Anthropic Messages endpoint (httpx MockTransport, the real SDK): the
trace's shared prefixes come back as equal text, each turn extends the previous messages with the server's reply,
subagents start after their spawning request and a waiting parent after them, a 529 is retried and counted."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import anthropic
import httpx2 as httpx  # the SDK's own HTTP package

from agentserve.bench import trace_prompts
from agentserve.bench.trace_live import LiveReplay
from agentserve.offline import trace_workload as tw
from agentserve.traces.synthetic import TraceShape, generate


def _sse(reply: str, cached: int, prompt_words: int) -> bytes:
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "m", "type": "message", "role": "assistant", "model": "x", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": prompt_words - cached, "output_tokens": 0,
                                             "cache_read_input_tokens": cached}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": reply}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


class Server:
    def __init__(self) -> None:
        self.calls: list[tuple[float, dict, dict]] = []
        self.overloaded_once: set[str] = set()

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sid = request.headers["x-agentserve-session-id"]
        if sid not in self.overloaded_once:  # every session's first attempt is turned away once
            self.overloaded_once.add(sid)
            return httpx.Response(529, headers={"retry-after": "0"},
                                  json={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
        self.calls.append((time.perf_counter(), dict(request.headers), body))
        words = len(body.get("system", "").split()) + sum(
            len(m["content"].split()) if isinstance(m["content"], str) else 1 for m in body["messages"])
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=_sse(f"reply {len(self.calls)}", 0, words))


def test_live_replay_keeps_prefixes_and_dependencies():
    shape = TraceShape(sessions=3, seed=11, subagent_share=1.0, short_share=0.0, long_turns=(4, 6, 5),
                       subagent_turns=(2, 3), system_tokens=(1_000, 2_000), context_at_30=(10_000, 20_000),
                       harnesses=1, block_size=64, session_rate=10.0, tool_gap_median_s=0.01, tool_gap_max_s=0.02,
                       user_turn_share=0.0)
    records = generate(shape)
    sessions = tw.sessions_from_trace(records)
    server = Server()
    client = anthropic.AsyncAnthropic(base_url="http://test", api_key="k", max_retries=0,
                                      http_client=httpx.AsyncClient(transport=httpx.MockTransport(server.handler)))
    args = argparse.Namespace(model="m", token_scale=0.05, time_scale=0.01, speedup=100.0, retries=2)
    replay = LiveReplay(client, sessions, args, 64)
    asyncio.run(replay.run())
    assert len(replay.requests) == len(records) and not any(r.shed for r in replay.requests)
    assert replay.overloaded == len(sessions)  # one 529 per session, each retried
    by_session: dict[str, list] = {}
    for t, headers, body in server.calls:
        by_session.setdefault(headers["x-agentserve-session-id"], []).append((t, headers, body))
    # one harness: every context's first request sends the same system text
    assert len({b.get("system") for calls in by_session.values() for _, _, b in calls[:1]}) == 1
    extended = 0
    for calls in by_session.values():
        for (_, _, prev), (_, _, cur) in zip(calls, calls[1:]):
            if len(cur["messages"]) > 1:  # not a context started over (a compaction's summary)
                n = len(prev["messages"])
                assert cur["messages"][:n] == prev["messages"] and cur.get("system") == prev.get("system")
                assert cur["messages"][n]["role"] == "assistant" and "reply" in cur["messages"][n]["content"][0]["text"]
                extended += 1
    assert extended >= len(records) - 2 * len(by_session)
    # subagents: first request after the parent's spawning request ended
    served = {(r.session, r.turn): r for r in replay.requests}
    for s in sessions:
        for k, children in s.spawns.items():
            for c in children:
                assert served[(c, 0)].arrival >= served[(s.sid, k)].end
        for k, (children, _) in s.joins.items():
            assert served[(s.sid, k)].arrival >= max(served[(c, len(replay.by_id[c].turns) - 1)].end for c in children)
    assert any(s.joins for s in sessions) and any(s.parent is not None for s in sessions)


def test_shared_prefixes_map_to_equal_text():
    scale = trace_prompts.Scale(16, 0.5)
    texts = trace_prompts.BlockText(scale, max_blocks=2)
    a, b = texts.blocks([1, 2, 3]), texts.blocks([1, 2, 4])
    assert a.split()[:16] == b.split()[:16] and a != b and len(a.split()) == 24
    assert texts.blocks([1, 2, 3]) == a  # dropped from the bounded map, the same text again
    assert trace_prompts.shared_prefix_blocks([[1, 2, 3], [1, 2, 4], [9]]) == [2, 2, 0]


def test_a_live_rows_unobserved_preemptions_print_as_dashes_and_a_simulated_zero_as_zero():
    from agentserve.bench import trace_report

    base = trace_report.summarize([], []) | {"replicas": 2, "load": 0.0, "speedup": 10.0, "retries": 3}
    live = base | {"policy": "live", "preemptions": None, "recomputed_tokens": None}
    sim = base | {"policy": "sim"}
    cells = {line.split("|")[3].strip(): [c.strip() for c in line.split("|")] for line in
             trace_report.table([live, sim]).splitlines()[2:]}
    header = [c.strip() for c in trace_report.table([live]).splitlines()[0].split("|")]
    at = header.index("preemptions")
    assert cells["live"][at:at + 2] == ["-", "-"] and cells["sim"][at:at + 2] == ["0", "0.00"]
    assert cells["live"][header.index("retries")] == "3"

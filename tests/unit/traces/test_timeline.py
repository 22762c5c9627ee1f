"""`agentserve trace timeline` (traces/timeline.py): Chrome trace-event JSON that Perfetto opens."""

from __future__ import annotations

import json

from agentserve.cli import main
from agentserve.traces.jsonl import write_records
from agentserve.traces.record import TraceRecord
from agentserve.traces.timeline import timeline


def rec(rid: str, t: float, session: str | None, *, kind="tool_result", parent=None, gap=None, dur=2.0):
    return TraceRecord(request_id=rid, t=t, session=session, parent_session=parent, kind=kind, model="m",
                       prompt_tokens=1000, cached_tokens=900, output_tokens=50, queue_s=0.1, ttft_s=0.4,
                       duration_s=dur, block_size=16, gap_s=gap, tool_calls=("Bash",), finish_reason="tool_calls")


RECORDS = [
    rec("a1", 100.0, "main", kind="user_message"),
    rec("a2", 105.0, "main", gap=3.0),
    rec("s1", 106.0, "main/agent-1", kind="subagent_spawn", parent="main"),
    rec("s2", 110.0, "main/agent-1", parent="main", gap=2.0),
    rec("a3", 106.5, "main", kind="other", dur=0.5),  # a side request while a2 still runs
    rec("o1", 101.0, "other", kind="user_message"),
]


def _slices(out, cat=None):
    return [e for e in out["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def _names(out, what):
    meta = (e for e in out["traceEvents"] if e["ph"] == "M" and e["name"] == what)
    return {(e["pid"], e.get("tid")): e["args"]["name"] for e in meta}


def test_one_process_per_session_tree_one_track_per_session():
    out = json.loads(json.dumps(timeline(RECORDS)))  # plain JSON
    procs = _names(out, "process_name")
    assert sorted(procs.values()) == ["session main", "session other"]
    threads = _names(out, "thread_name")
    main_pid = next(pid for (pid, _), name in procs.items() if name == "session main")
    main_tracks = sorted(name for (pid, _), name in threads.items() if pid == main_pid)
    # The side request that overlaps a2 gets a track of its own.
    assert main_tracks == ["main", "main (2)", "subagent main/agent-1"]
    requests = _slices(out, "request")
    assert len(requests) == len(RECORDS) and requests[0]["ts"] == 0.0  # times from the first arrival, in µs


def test_phases_nest_in_their_request_and_the_gap_ends_at_arrival():
    out = timeline(RECORDS)
    a2 = next(e for e in _slices(out, "request") if e["args"]["request_id"] == "a2")
    track = [e for e in _slices(out) if (e["pid"], e["tid"]) == (a2["pid"], a2["tid"])]
    phases = {e["name"]: e for e in track if e["cat"] == "phase" and a2["ts"] <= e["ts"] < a2["ts"] + a2["dur"]}
    assert [phases[n]["ts"] - a2["ts"] for n in ("queue", "prefill", "decode")] == [0.0, 100_000.0, 400_000.0]
    assert phases["decode"]["ts"] + phases["decode"]["dur"] == a2["ts"] + a2["dur"]
    gap = next(e for e in track if e["cat"] == "gap" and e["ts"] + e["dur"] == a2["ts"])
    assert gap["name"] == "tool gap" and gap["dur"] == 3_000_000.0
    # Slices on one track never overlap unless nested: Perfetto draws them as a stack.
    for t in set((e["pid"], e["tid"]) for e in _slices(out)):
        tops = sorted((e for e in _slices(out) if (e["pid"], e["tid"]) == t and e["cat"] != "phase"),
                      key=lambda e: e["ts"])
        assert all(x["ts"] + x["dur"] <= y["ts"] + 1e-6 for x, y in zip(tops, tops[1:]))


def test_a_sessions_timeline_holds_it_and_its_subagents_only(tmp_path):
    trace, rotated = tmp_path / "t.jsonl", tmp_path / "t.jsonl.1"  # a replica's file and its rotation
    write_records(trace, RECORDS[3:])
    write_records(rotated, RECORDS[:3])
    out_path = tmp_path / "out.json"
    assert main(["trace", "timeline", str(trace), str(rotated), "--session", "main", "-o", str(out_path)]) == 0
    out = json.loads(out_path.read_text())
    ids = {e["args"]["request_id"] for e in _slices(out, "request")}
    assert ids == {"a1", "a2", "a3", "s1", "s2"}
    assert main(["trace", "timeline", str(trace), "--session", "nobody", "-o", str(out_path)]) == 2

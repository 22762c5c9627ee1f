"""Long Claude Code sessions against the graph (scripted engine): two sessions in parallel, each a multi-step task
of five tool calls in the main thread (Read, Bash, Edit, Write, Agent) and one subagent (the Agent tool, Claude
Code's Task tool) that makes its own Read call. Each step's tool result carries the marker (or the path) that the
next scripted reply answers, so a step only happens if the previous tool really ran and its result came back.

Per main-thread turn, the prompt must reuse the previous turn: the engine's cached tokens (Claude Code's own
usage figures) cover at least 95% of the previous main turn's prompt, and `x-agentserve-prefix` (read by a
recording proxy between Claude Code and the graph) reports reuse >= 0.95 whenever the previous request of that
Claude Code session was a main-thread turn. The subagent shares the session id but not the conversation.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentserve.bench.recording_proxy import RecordingProxy
from tests.e2e.test_claude_code import MODEL, _claude_binary, claude_env

pytestmark = [pytest.mark.e2e, pytest.mark.graph("harness")]  # tests/e2e/harness_graph.py

TAGS = ("A", "B")


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def session_rules(tag: str, work: Path) -> list[dict]:
    """The scripted model's side of one session; markers carry the session tag so the two never cross."""
    note, written, sub = work / "note.txt", work / f"step4-written-{tag}.txt", work / "sub.txt"
    return [
        {"match": f"SUBNOTE-REPORTED-{tag}", "reply": f"FINAL-{tag}: five steps and the subagent are done."},
        {"match": f"SUBNOTE-OK-{tag}", "reply": f"The sub note says SUBNOTE-REPORTED-{tag}."},
        {"match": f"AS_SUBAGENT_TASK-{tag}", "reply": _call("Read", {"file_path": str(sub)})},
        {"match": f"step4-written-{tag}", "reply": _call("Agent", {
            "description": "Read the sub note", "subagent_type": "general-purpose", "run_in_background": False,
            "prompt": f"AS_SUBAGENT_TASK-{tag}: read {sub} and report what it says."})},
        {"match": f"{note} has been updated", "reply": _call("Write", {"file_path": str(written), "content": "done\n"})},
        {"match": f"STEP2-ECHO-{tag}", "reply": _call("Edit", {
            "file_path": str(note), "old_string": "status=draft", "new_string": f"status=STEP3-EDITED-{tag}"})},
        {"match": f"STEP1-NOTE-{tag}", "reply": _call("Bash", {"command": f"echo STEP2-ECHO-{tag}",
                                                             "description": "Echo the step marker"})},
        {"match": f"AS_LONG_START-{tag}", "reply": _call("Read", {"file_path": str(note)})},
    ]


def _workdirs(work: Path) -> dict[str, Path]:
    return {tag: work / f"cc-long-{tag}" for tag in TAGS}


def scripted_rules(work: Path) -> list[dict]:
    """Both sessions' rules (tests/e2e/harness_graph.py), in the work directories under `work`."""
    workdirs = _workdirs(work)
    rules = [r for tag in TAGS for r in session_rules(tag, workdirs[tag])]
    rules.append({"match": "", "reply": "OK.", "itl_ms": 0})
    return rules


@pytest.fixture(scope="module")
def workdirs(harness_dir) -> dict[str, Path]:
    dirs = {}
    for tag, d in _workdirs(harness_dir).items():
        d.mkdir()
        (d / "note.txt").write_text(f"STEP1-NOTE-{tag} status=draft\n")
        (d / "sub.txt").write_text(f"SUBNOTE-OK-{tag}\n")
        dirs[tag] = d
    return dirs


@pytest.fixture(scope="module")
def long_graph(harness_graph, workdirs):
    return harness_graph  # its prefix cache holds both sessions and the subagent (~20K-token prompts each)


def _main_turns(lines: list[dict]) -> list[dict]:
    """Usage of each main-thread request, in order (Claude Code prints one line per content block)."""
    seen: dict[str, dict] = {}
    for m in lines:
        if m.get("type") == "assistant" and not m.get("parent_tool_use_id"):
            seen.setdefault(m["message"]["id"], m["message"]["usage"])
    return list(seen.values())


def _prompt(usage: dict) -> int:
    return usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) + usage.get("cache_creation_input_tokens", 0)


def test_two_parallel_sessions_with_five_tools_and_a_subagent_reuse_every_prefix(long_graph, workdirs, tmp_path):
    claude = _claude_binary()
    with RecordingProxy(long_graph) as proxy:
        procs = {}
        for tag in TAGS:
            home = tmp_path / f"home-{tag}"
            home.mkdir()
            procs[tag] = subprocess.Popen(
                [str(claude), "-p", f"AS_LONG_START-{tag}: work through note.txt step by step with your tools.",
                 "--output-format", "stream-json", "--verbose", "--model", MODEL, "--max-turns", "12",
                 "--permission-mode", "acceptEdits", "--allowedTools", "Read,Edit,Write,Agent,Bash(echo:*)"],
                cwd=workdirs[tag], env=claude_env(proxy.url, home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True,
            )
        outputs = {tag: p.communicate(timeout=420) for tag, p in procs.items()}
        exchanges = proxy.generations()

    for tag in TAGS:
        out, err = outputs[tag]
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        detail = f"session {tag}: exit {procs[tag].returncode}\nstdout:\n{out[-4000:]}\nstderr:\n{err[-2000:]}"
        assert procs[tag].returncode == 0, detail
        calls = [(c["name"], m.get("parent_tool_use_id") is not None) for m in lines if m.get("type") == "assistant"
                 for c in m["message"]["content"] if c.get("type") == "tool_use"]
        assert calls == [("Read", False), ("Bash", False), ("Edit", False), ("Write", False), ("Agent", False),
                         ("Read", True)], detail
        results = [c for m in lines if m.get("type") == "user" and isinstance(m["message"]["content"], list)
                   for c in m["message"]["content"] if c.get("type") == "tool_result"]
        assert len(results) == 6 and not any(r.get("is_error") for r in results), detail
        assert "status=STEP3-EDITED-" + tag in (workdirs[tag] / "note.txt").read_text()
        assert (workdirs[tag] / f"step4-written-{tag}.txt").read_text() == "done\n"
        final = [m for m in lines if m.get("type") == "result"][-1]
        assert final["subtype"] == "success" and final["result"].startswith(f"FINAL-{tag}"), detail
        assert len(_main_turns(lines)) == 6, detail

    # Per Claude Code session (its session id header), main-thread requests in order: the engine served each
    # turn's prompt from the previous turn's blocks, and the prefix doctor says so whenever the previous request
    # of the session was a main-thread turn (the subagent shares the session id, not the conversation).
    by_session: dict[str, list] = {}
    for ex in exchanges:
        by_session.setdefault(ex.request_headers.get("x-claude-code-session-id", ""), []).append(ex)
    checked, sessions = 0, 0
    for session, exs in by_session.items():
        main = ["AS_LONG_START-" in json.dumps(json.loads(e.body)["messages"][0]) for e in exs]
        turns = [e for e, m in zip(exs, main) if m]
        if not turns:
            continue
        sessions += 1
        assert len(turns) == 6, session
        for n in range(1, len(turns)):
            cached, before = turns[n].anthropic_usage()["cache_read_input_tokens"], _prompt(turns[n - 1].anthropic_usage())
            assert cached >= 0.95 * before, f"session {session} turn {n + 1}: {cached} cached of {before}"
        for i in range(1, len(exs)):
            if main[i] and main[i - 1]:
                reuse = exs[i].prefix_reuse()
                assert reuse is not None and reuse >= 0.95, (session, i, exs[i].headers.get("x-agentserve-prefix"))
                checked += 1
    assert sessions == 2
    assert checked >= 2 * 4  # per session: turns 2-5 follow a main turn; turn 6 follows the subagent

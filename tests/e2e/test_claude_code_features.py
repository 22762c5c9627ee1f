"""The real Claude Code CLI, headless, against the graph (scripted engine), with two newer features on:

- tool search (`ENABLE_TOOL_SEARCH=true`): Claude Code names its deferred tools in a system message and sends only
  a `defer_loading` placeholder; the model loads NotebookEdit with ToolSearch, Claude Code answers with a
  `tool_reference` and from then on sends NotebookEdit with `defer_loading: true`. agentserve brings it into force
  where the reference stands, so the model can call it and the turn reuses the whole previous prompt from the cache.
- thinking shown as "updates" (what 2.1.332 sends): thinking blocks reach Claude Code without their text, and the
  block it sends back (empty text, the signature carrying it) renders the model's reasoning, so the prefix holds.
- WebSearch: the model calls Claude Code's WebSearch tool; Claude Code runs it as its own request carrying only the
  `web_search_20250305` server tool, which nothing here can run: it is served as a text answer (docs/HARNESSES.md),
  and the main loop goes on with it as the tool's result.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentserve.bench.recording_proxy import RecordingProxy
from tests.e2e.test_claude_code import MODEL, _claude_binary, claude_env

pytestmark = [pytest.mark.e2e, pytest.mark.graph("harness")]  # tests/e2e/harness_graph.py

TS_START, TS_EDITED, TS_FINAL = "AS_TS_START", "agentserve-notebook-edited-2207", "The notebook cell now prints the marker."
WS_START, WS_QUERY, WS_FINAL = "AS_WS_START", "agentserve websearch 6620", "The search found nothing here to cite."
WS_ANSWER = "This server cannot search the web: no results for that query."
TH_START, TH_NOTE, TH_FINAL = "AS_TH_START", "agentserve-thinking-note-4410", "The note was read after some thought."
TH_REASONING = "The user wants the note; I will read it first."


def _notebook(work: Path) -> Path:
    return work / "cc-ts-work" / "analysis.ipynb"


def scripted_rules(work: Path) -> list[dict]:
    """The scripted model's side (tests/e2e/harness_graph.py)."""
    def call(name: str, arguments: dict) -> str:
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"

    edit = {"notebook_path": str(_notebook(work)), "cell_id": "cell-1", "new_source": f"print('{TS_EDITED}')",
            "edit_mode": "replace"}
    return [
        {"match": TS_EDITED, "reply": TS_FINAL, "itl_ms": 0},  # NotebookEdit's result
        {"match": "Tool: NotebookEdit", "reply": call("NotebookEdit", edit), "itl_ms": 0},  # ToolSearch loaded it
        {"match": "agentserve-notebook-original", "reply": call("ToolSearch", {"query": "select:NotebookEdit"}),
         "itl_ms": 0},  # Read's result
        {"match": TS_START, "reply": call("Read", {"file_path": str(_notebook(work))}), "itl_ms": 0},
        {"match": "Web search results for query", "reply": WS_FINAL, "itl_ms": 0},  # WebSearch's result
        {"match": f"Perform a web search for the query: {WS_QUERY}", "reply": WS_ANSWER, "itl_ms": 0},  # its request
        {"match": WS_START, "reply": call("WebSearch", {"query": WS_QUERY}), "itl_ms": 0},
        {"match": TH_NOTE, "reply": TH_FINAL, "itl_ms": 0},  # Read's result
        {"match": TH_START, "reply": f"<think>{TH_REASONING}</think>"
         + call("Read", {"file_path": str(work / "cc-th-work" / "note.txt")}), "itl_ms": 0},
        {"match": "", "reply": "OK.", "itl_ms": 0},
    ]


@pytest.fixture(scope="module")
def ts_workdir(harness_dir) -> Path:
    nb = _notebook(harness_dir)
    nb.parent.mkdir(exist_ok=True)
    nb.write_text(json.dumps({
        "cells": [{"cell_type": "code", "id": "cell-1", "metadata": {}, "execution_count": None, "outputs": [],
                   "source": ["print('agentserve-notebook-original')"]}],
        "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}))
    return nb.parent


def _run(claude: Path, url: str, home: Path, cwd: Path, prompt: str, tools: str, **env_extra: str):
    """Claude Code's stream-json lines and what the graph was sent and answered (a recording proxy between)."""
    home.mkdir()
    with RecordingProxy(url) as proxy:
        env = {**claude_env(proxy.url, home), **env_extra}
        proc = subprocess.run(
            [str(claude), "-p", prompt, "--output-format", "stream-json", "--verbose", "--model", MODEL,
             "--allowedTools", tools, "--max-turns", "6"],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=150,
        )
        exchanges = proxy.generations()
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-5000:]}\nstderr:\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, detail
    assert exchanges and all(ex.status == 200 for ex in exchanges), [(ex.path, ex.status) for ex in exchanges]
    return lines, exchanges, detail


def _blocks(lines: list[dict], role: str, kind: str) -> list[dict]:
    return [c for m in lines if m.get("type") == role and isinstance(m["message"]["content"], list)
            for c in m["message"]["content"] if c.get("type") == kind]


def test_tool_search_loads_a_deferred_tool_that_then_edits_a_notebook(harness_graph, ts_workdir, tmp_path):
    claude = _claude_binary()
    lines, exchanges, detail = _run(claude, harness_graph, tmp_path / "home", ts_workdir,
                                    f"{TS_START}: make the first cell of analysis.ipynb print the marker.",
                                    "Read,ToolSearch,NotebookEdit", ENABLE_TOOL_SEARCH="true")
    calls = _blocks(lines, "assistant", "tool_use")
    assert [c["name"] for c in calls] == ["Read", "ToolSearch", "NotebookEdit"], detail
    results = {r["tool_use_id"]: r for r in _blocks(lines, "user", "tool_result")}
    assert all(not results[c["id"]].get("is_error") for c in calls), detail
    assert {"type": "tool_reference", "tool_name": "NotebookEdit"} in results[calls[1]["id"]]["content"], detail
    assert TS_EDITED in _notebook(ts_workdir.parent).read_text(), detail  # the deferred tool ran
    final = [m for m in lines if m.get("type") == "result"][-1]
    assert final["subtype"] == "success" and final["result"] == TS_FINAL, detail
    # What Claude Code sent: NotebookEdit only named at first, then a deferred tool the tool_reference brought in.
    bodies = [json.loads(ex.body) for ex in exchanges]
    assert len(bodies) == 4, [b["messages"][-1] for b in bodies]
    first_tools = {t["name"]: t for t in bodies[0]["tools"]}
    assert "NotebookEdit" not in first_tools and any(t.get("defer_loading") for t in first_tools.values())
    added = {t["name"]: t for t in bodies[3]["tools"]}["NotebookEdit"]
    assert added.get("defer_loading") is True
    # The request after the tool came into force reused the whole previous prompt from the prefix cache.
    before, after = exchanges[2].anthropic_usage(), exchanges[3].anthropic_usage()
    prompt_before = before["input_tokens"] + before["cache_read_input_tokens"]
    assert after["cache_read_input_tokens"] >= 0.95 * prompt_before, (before, after)
    assert (exchanges[3].prefix_reuse() or 0) >= 0.95, exchanges[3].headers.get("x-agentserve-prefix")


def test_websearch_is_answered_in_text_and_the_session_goes_on(harness_graph, tmp_path):
    claude = _claude_binary()
    work = tmp_path / "ws-work"
    work.mkdir()
    lines, exchanges, detail = _run(claude, harness_graph, tmp_path / "home", work,
                                    f"{WS_START}: search the web for it.", "WebSearch", ENABLE_TOOL_SEARCH="false")
    calls = _blocks(lines, "assistant", "tool_use")
    assert [(c["name"], c["input"]) for c in calls] == [("WebSearch", {"query": WS_QUERY})], detail
    (result,) = _blocks(lines, "user", "tool_result")
    text = json.dumps(result["content"])
    assert not result.get("is_error") and WS_ANSWER in text, detail  # the server-tool request's text answer
    final = [m for m in lines if m.get("type") == "result"][-1]
    assert final["subtype"] == "success" and final["result"] == WS_FINAL, detail
    # Claude Code's own request for the search carried only the server tool: served (200), in text.
    search = [ex for ex in exchanges if [t.get("type") for t in json.loads(ex.body).get("tools", [])]
              == ["web_search_20250305"]]
    assert len(search) == 1 and WS_ANSWER in search[0].output_text(), [ex.body[:300] for ex in exchanges]


def test_thinking_shown_as_updates_round_trips_without_its_text(harness_graph, harness_dir, tmp_path):
    claude = _claude_binary()
    work = harness_dir / "cc-th-work"
    work.mkdir(exist_ok=True)
    (work / "note.txt").write_text(f"{TH_NOTE}\n")
    lines, exchanges, detail = _run(claude, harness_graph, tmp_path / "home", work,
                                    f"{TH_START}: read note.txt and tell me what it says.", "Read")
    assert json.loads(exchanges[0].body)["thinking"].get("display") == "updates", exchanges[0].body[:300]
    thinking = _blocks(lines, "assistant", "thinking")
    assert len(thinking) == 1 and thinking[0]["thinking"] == "", detail
    assert TH_REASONING not in exchanges[0].response.decode(), "the reasoning text left the server"
    sent_back = [b for m in json.loads(exchanges[1].body)["messages"] if m["role"] == "assistant"
                 for b in m["content"] if b["type"] == "thinking"]
    assert sent_back == [{"type": "thinking", "thinking": "", "signature": thinking[0]["signature"]}], sent_back
    final = [m for m in lines if m.get("type") == "result"][-1]
    assert final["subtype"] == "success" and final["result"] == TH_FINAL, detail
    # The replayed turn renders the reasoning the model wrote: the second prompt extends the first from the cache.
    before, after = exchanges[0].anthropic_usage(), exchanges[1].anthropic_usage()
    prompt_before = before["input_tokens"] + before["cache_read_input_tokens"]
    assert after["cache_read_input_tokens"] >= prompt_before + before["output_tokens"] - 32, (before, after)
    assert (exchanges[1].prefix_reuse() or 0) >= 0.95, exchanges[1].headers.get("x-agentserve-prefix")

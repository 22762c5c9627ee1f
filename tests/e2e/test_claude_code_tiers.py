"""The real Claude Code CLI, headless, against one graph serving two catalog models: its main tier
(ANTHROPIC_MODEL) and its haiku tier (ANTHROPIC_DEFAULT_HAIKU_MODEL, and ANTHROPIC_SMALL_FAST_MODEL for older
versions) reach two different engines.

Which calls use the haiku tier: `claude -p` (2.1.332) sends no title, summary, topic or quota request in headless
mode, even with non-essential model calls allowed (observed through the recording proxy: one request per turn,
all on ANTHROPIC_MODEL). What does run on the haiku tier there is a subagent declared with `model: haiku`
(Claude Code's documented subagent field, here passed with `--agents`): the main model delegates to it with the
Agent tool, Claude Code runs the subagent's own conversation on the haiku model, and hands its answer back to the
main model as the tool result. Background calls stay allowed (DISABLE_NON_ESSENTIAL_MODEL_CALLS unset), so a
version that does send them is checked the same way.

Engines are scripted (the test double at the engine boundary: what is tested is routing by model, not the model's
output): each model's Engine deployment holds its own rules, so a reply tagged MAIN-TIER can only come from the
main model's engine and one tagged HAIKU-TIER only from the haiku model's. A recording proxy between Claude Code
and the graph pairs each request's `model` with the engine that answered it; the main model's last reply only
happens when the haiku engine's answer came back through Claude Code.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.graph import running_graph
from tests.support.keys import signing_key
from agentserve.bench.recording_proxy import Exchange, RecordingProxy
from tests.e2e.test_claude_code import _claude_binary, claude_env

pytestmark = pytest.mark.e2e

MAIN_ID, HAIKU_ID = "tiers/main", "tiers/haiku"
MAIN, HAIKU = "claude-main", "claude-haiku"  # the aliases Claude Code is pointed at (as in docs/HARNESSES.md)
AGENT = "note-summarizer"
AGENT_PROMPT = "You summarize notes in one line. AS_TIERS_SUBAGENT_SYSTEM."
HAIKU_REPLY = "HAIKU-TIER: the note is a one-line status report."
FINAL = "MAIN-TIER: the summarizer on the haiku tier reported back."


def _agent_call(note: Path) -> str:
    call = {
        "name": "Agent",
        "arguments": {
            "description": "MAIN-TIER delegates the summary",
            "subagent_type": AGENT,
            "run_in_background": False,
            "prompt": f"AS_TIERS_SUB: summarize {note} in one line.",
        },
    }
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cc-tiers")
    (d / "note.txt").write_text("status: all green\n")
    return d


@pytest.fixture(scope="module")
def tiers_graph(model_path, workdir):
    main_rules = [
        {"match": "HAIKU-TIER", "reply": FINAL},  # the subagent's answer came back as the Agent tool's result
        {"match": "AS_TIERS_START", "reply": _agent_call(workdir / "note.txt")},
        {"match": "", "reply": "MAIN-TIER: nothing scripted for this."},
    ]
    haiku_rules = [{"match": "", "reply": HAIKU_REPLY}]
    args = {
        "secret_key": signing_key("graph"),
        "models": [
            {"id": MAIN_ID, "aliases": [MAIN], "context_window": 200_000,
             "engine": {"kind": "scripted", "block_size": 16, "rules": main_rules}},
            {"id": HAIKU_ID, "aliases": [HAIKU], "context_window": 32_768,
             "engine": {"kind": "scripted", "block_size": 16, "rules": haiku_rules}},
        ],
    }
    with running_graph(args) as url:
        yield url


def _requests_by_model(url: str) -> Counter:
    """agentserve_requests_total{api="anthropic"} per model, from the ingress's /metrics."""
    counts: Counter = Counter()
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("agentserve_requests_total{") and 'api="anthropic"' in line:
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
            counts[labels["model"].strip('"')] += float(line.rsplit(" ", 1)[1])
    return counts


def _answer(ex: Exchange) -> str:
    """The text and tool input the engine streamed back (Anthropic SSE deltas)."""
    out = []
    for line in ex.response.decode("utf-8", "replace").splitlines():
        if line.startswith("data:") and '"content_block_delta"' in line:
            delta = json.loads(line[5:])["delta"]
            out.append(delta.get("text") or delta.get("partial_json") or "")
    return "".join(out)


def test_main_and_haiku_tiers_reach_different_engines(tiers_graph, workdir, tmp_path):
    from ray import serve

    claude = _claude_binary()
    engines = {n for n in serve.status().applications["agentserve"].deployments if n.startswith("Engine")}
    assert engines == {"Engine-tiers-main", "Engine-tiers-haiku"}

    home = tmp_path / "home"
    home.mkdir()
    before = _requests_by_model(tiers_graph)
    with RecordingProxy(tiers_graph) as proxy:
        env = claude_env(proxy.url, home)
        env.pop("DISABLE_NON_ESSENTIAL_MODEL_CALLS")  # background model calls allowed: any would be routed too
        env["ANTHROPIC_MODEL"] = MAIN
        for tier in ("ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL"):
            env[tier] = MAIN
        for tier in ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL"):
            env[tier] = HAIKU
        agents = {AGENT: {"description": "Summarizes a note in one line.", "prompt": AGENT_PROMPT,
                          "model": "haiku", "tools": ["Read"]}}
        proc = subprocess.run(
            [str(claude), "-p", "AS_TIERS_START: have the note-summarizer agent summarize note.txt.",
             "--output-format", "stream-json", "--verbose", "--agents", json.dumps(agents),
             "--allowedTools", "Agent", "--max-turns", "4"],
            cwd=workdir, env=env, capture_output=True, text=True, timeout=150,
        )
        generations = proxy.generations()
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    seen = [(json.loads(e.body).get("model"), e.status, _answer(e)[:120]) for e in generations]
    detail = f"exit {proc.returncode}\nrequests: {seen}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, detail

    # Claude Code's own view: the run ended with the main model's answer, which it only gives once the haiku
    # engine's summary came back, and it billed both models.
    final = [m for m in lines if m.get("type") == "result"][-1]
    assert final["subtype"] == "success" and final["result"] == FINAL, detail
    assert {MAIN, HAIKU} <= set(final.get("modelUsage", {})), detail

    # Per request: the tier Claude Code chose (`model`) and the engine that answered (its scripted tag).
    by_tier: dict[str, list[Exchange]] = {}
    for ex in generations:
        assert ex.status == 200, detail
        by_tier.setdefault(json.loads(ex.body)["model"], []).append(ex)
    assert set(by_tier) == {MAIN, HAIKU}, detail
    assert len(by_tier[MAIN]) >= 2 and len(by_tier[HAIKU]) >= 1, detail
    for ex in by_tier[MAIN]:
        assert "MAIN-TIER" in _answer(ex) and "HAIKU-TIER" not in _answer(ex), detail
    for ex in by_tier[HAIKU]:
        assert _answer(ex) == HAIKU_REPLY, detail
    # The subagent's conversation (its own system prompt and tools, not the main loop's) ran on the haiku tier.
    subagent = [json.loads(ex.body) for ex in by_tier[HAIKU] if AGENT_PROMPT in json.dumps(json.loads(ex.body).get("system"))]
    assert subagent, detail
    assert all("Agent" not in {t["name"] for t in body.get("tools", [])} for body in subagent), detail
    assert "Agent" in {t["name"] for t in json.loads(by_tier[MAIN][0].body)["tools"]}, detail

    # The server counted each tier under its own catalog model (aliases resolved to ids).
    after = _requests_by_model(tiers_graph)
    assert after[MAIN_ID] - before[MAIN_ID] == len(by_tier[MAIN]), (before, after)
    assert after[HAIKU_ID] - before[HAIKU_ID] == len(by_tier[HAIKU]), (before, after)

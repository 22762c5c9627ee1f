"""The real Claude Code CLI, headless, against the graph (scripted engine): a tool round trip end to end.

The scripted model's first reply calls Claude Code's own `Read` tool on a file in a temp directory; Claude Code
must run it and send the tool_result back, which the second rule answers with the final text. Claude Code's
billing header (sent by default) must be stripped: the graph's /metrics counter says so.
The CLI comes from scripts/install_harnesses.sh (pinned, in .harness/); the test is skipped only when it could
not be installed (npm missing or the registry unreachable).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from agentserve.bench import harness
from tests.e2e.harness_bins import harness_bin, install_pinned

pytestmark = [pytest.mark.e2e, pytest.mark.graph("harness")]  # tests/e2e/harness_graph.py

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = harness_bin("claude")
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
MARKER = "agentserve-marker-7431"
FINAL = "The note says the marker is in place."


def _claude_binary() -> Path:
    if not CLAUDE.exists():
        install_pinned(timeout=300)
    if not CLAUDE.exists():
        pytest.skip("Claude Code CLI not installed: npm is missing or the npm registry is unreachable")
    return CLAUDE


def scripted_rules(work: Path) -> list[dict]:
    """The scripted model's side (tests/e2e/harness_graph.py); it reads the note in `work`/cc-work."""
    read_call = json.dumps({"name": "Read", "arguments": {"file_path": str(work / "cc-work" / "note.txt")}})
    return [
        {"match": MARKER, "reply": FINAL, "itl_ms": 0},  # the tool_result came back
        {"match": "AS_E2E_START", "reply": f"<tool_call>\n{read_call}\n</tool_call>", "itl_ms": 0},
        {"match": "", "reply": "OK.", "itl_ms": 0},  # titles, topic checks and other side requests
    ]


@pytest.fixture(scope="module")
def workdir(harness_dir) -> Path:
    d = harness_dir / "cc-work"
    d.mkdir()
    (d / "note.txt").write_text(f"{MARKER}\n")
    return d


@pytest.fixture(scope="module")
def cc_graph(harness_graph, workdir):
    return harness_graph


def _preamble_stripped(url: str) -> float:
    total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("agentserve_anthropic_preamble_stripped_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def claude_env(base_url: str, home: Path) -> dict[str, str]:
    """Claude Code pointed at `base_url`, offline, with its state under `home` (the benchmarks' environment)."""
    return harness.claude_env(base_url, home, MODEL)


def test_claude_code_runs_a_tool_and_finishes(cc_graph, workdir, tmp_path):
    claude = _claude_binary()
    home = tmp_path / "home"
    home.mkdir()
    env = claude_env(cc_graph, home)
    before = _preamble_stripped(cc_graph)
    proc = subprocess.run(
        [str(claude), "-p", "AS_E2E_START: read note.txt with the Read tool and tell me what it says.",
         "--output-format", "stream-json", "--verbose", "--model", MODEL,
         "--allowedTools", "Read", "--max-turns", "4"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=150,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, detail

    tool_uses = [c for m in lines if m.get("type") == "assistant"
                 for c in m["message"]["content"] if c.get("type") == "tool_use"]
    assert [t["name"] for t in tool_uses] == ["Read"], detail
    assert tool_uses[0]["id"].startswith("toolu_")
    results = [c for m in lines if m.get("type") == "user" and isinstance(m["message"]["content"], list)
               for c in m["message"]["content"] if c.get("type") == "tool_result"]
    assert results and results[0]["tool_use_id"] == tool_uses[0]["id"], detail
    assert MARKER in json.dumps(results[0]["content"]) and not results[0].get("is_error"), detail
    final = [m for m in lines if m.get("type") == "result"][-1]
    assert final["subtype"] == "success" and final["result"] == FINAL, detail
    # Claude Code sent its x-anthropic-billing-header; the server removed it before tokenizing.
    assert _preamble_stripped(cc_graph) >= before + 2, detail

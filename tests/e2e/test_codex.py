"""The real Codex CLI (`codex exec`) against the graph (scripted engine): a shell tool round trip end to end, over
the Responses WebSocket transport (`supports_websockets = true` in the generated config), and `codex exec resume`.

Codex is configured only through `agentserve codex-config` (custom provider, `wire_api = "responses"`, the
model catalog file), with CODEX_HOME and HOME in a temp dir so nothing of the user's set-up leaks in. The
scripted model's first reply calls Codex's shell tool (`exec_command`, what the profile's
`shell_type: shell_command` gives in this Codex version); Codex must run it and send the command's output back
as a `function_call_output`, which the second rule answers with the final text. The CLI comes from
scripts/install_harnesses.sh (pinned, in .harness/); the test is skipped only when it could not be installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e.harness_bins import harness_bin, install_pinned

pytestmark = [pytest.mark.e2e, pytest.mark.graph("harness")]  # tests/e2e/harness_graph.py

ROOT = Path(__file__).resolve().parents[2]
CODEX = harness_bin("codex")
MARKER = "agentserve-codex-marker-5150"
FINAL = "Final: the probe printed its marker."
PROMPT = "AS_CODEX_START: please run the probe."
RESUMED = "Resumed: the earlier turn is still here."


def _codex_binary() -> Path:
    if not CODEX.exists():
        install_pinned(timeout=300)
    if not CODEX.exists():
        pytest.skip("Codex CLI not installed: npm is missing or the npm registry is unreachable")
    return CODEX


SHELL_CALL = json.dumps({"name": "exec_command", "arguments": {"cmd": f"echo {MARKER}"}})
ARGS = {
    "engine": {
        "kind": "scripted",
        "block_size": 16,
        "rules": [
            # --output-schema: unconstrained the first reply would be prose; text.format makes the engine's grammar
            # accept only the JSON one (the scripted engine replays the first reply the grammar accepts).
            {"match": "AS_CODEX_SCHEMA", "reply": "Sure, the answer is 42.", "itl_ms": 0},
            {"match": "AS_CODEX_SCHEMA", "reply": '<think>Fill the schema.</think>{"answer": 42, "sure": true}',
             "itl_ms": 0},
            {"match": "AS_CODEX_RESUME", "reply": RESUMED, "itl_ms": 0},
            {"match": MARKER, "reply": f"<think>The command ran.</think>{FINAL}", "itl_ms": 0},  # the output came back
            {"match": "AS_CODEX_START", "reply": f"<think>Run it.</think><tool_call>\n{SHELL_CALL}\n</tool_call>", "itl_ms": 0},
            {"match": "", "reply": "OK.", "itl_ms": 0},
        ],
    },
    # Codex's own prompt and tools are ~6k tokens; the scripted engine does not care about the real window.
    "model": {"context_window": 131_072},
}


def scripted_rules(work: Path) -> list[dict]:
    """ARGS' rules, for the harness graph (tests/e2e/harness_graph.py); Codex's config still comes from ARGS."""
    return ARGS["engine"]["rules"]


@pytest.fixture(scope="module")
def codex_graph(harness_graph):
    return harness_graph


def _metric(url: str, name: str, **labels: str) -> float:
    """The sum of a counter/histogram-count series of the ingress's /metrics over the given labels."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def codex_home(url: str, args: dict, root: Path) -> tuple[Path, dict]:
    """A CODEX_HOME under `root` written by `agentserve codex-config` for the graph at `url` serving `args`, a work
    dir, and Codex's environment: (work dir, env)."""
    home, work = root / "codex-home", root / "work"
    work.mkdir()
    serve_config = root / "serve_config.yaml"
    serve_config.write_text(yaml.safe_dump({"applications": [{"args": args}]}))
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "agentserve.cli", "codex-config",
         "--codex-home", str(home), "--base-url", f"{url}/v1", "--serve-config", str(serve_config)],
        cwd=ROOT, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "AGENTSERVE_API_KEY": "e2e-key",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    return work, env


@pytest.fixture(scope="module")
def codex_setup(codex_graph, tmp_path_factory):
    """Codex set up for the module's graph: (binary, work dir, env)."""
    codex = _codex_binary()
    work, env = codex_home(codex_graph, ARGS, tmp_path_factory.mktemp("codex"))
    return codex, work, env


def _exec(codex: Path, work: Path, env: dict, *args: str) -> list[dict]:
    proc = subprocess.run(
        [str(codex), "exec", *args], cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=150,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_codex_exec_runs_the_shell_tool_and_finishes(codex_graph, codex_setup):
    codex, work, env = codex_setup
    ws_before = _metric(codex_graph, "agentserve_requests_total", api="responses_ws", status="200")
    http_before = _metric(codex_graph, "agentserve_requests_total", api="responses")
    warm_before = _metric(codex_graph, "agentserve_time_to_first_token_seconds_count", api="responses_prewarm")
    events = _exec(codex, work, env, "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                   PROMPT)  # fmt: skip
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert commands, f"Codex ran no command: {items}"
    assert MARKER in commands[0]["command"] and MARKER in commands[0]["aggregated_output"]
    assert commands[0]["exit_code"] == 0
    # The final text only comes back if the command's output reached the model as function_call_output.
    messages = [i["text"] for i in items if i.get("type") == "agent_message"]
    assert messages and messages[-1] == FINAL
    usage = next(e["usage"] for e in events if e.get("type") == "turn.completed")
    assert usage["input_tokens"] > 0 and usage["cached_input_tokens"] > 0
    # Reasoning reached Codex as a reasoning item (summary events: the resolved profile asks for summaries).
    assert any(i.get("type") == "reasoning" and "Run it." in i.get("text", "") for i in items), items
    # Over the WebSocket: both turns (the call, then its output) as response.create frames, none over HTTP, and
    # the session's prompt pre-warmed (generate: false) before the first turn.
    assert _metric(codex_graph, "agentserve_requests_total", api="responses_ws", status="200") - ws_before >= 3
    assert _metric(codex_graph, "agentserve_requests_total", api="responses") == http_before
    assert _metric(codex_graph, "agentserve_time_to_first_token_seconds_count", api="responses_prewarm") - warm_before >= 1


def test_codex_exec_resume_replays_the_session(codex_graph, codex_setup):
    """`codex exec resume <id>`: a new process and a new connection, so the whole history is sent again; it must
    be accepted and reuse the first run's prompt from the prefix cache."""
    codex, work, env = codex_setup
    first = _exec(codex, work, env, "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                  PROMPT)  # fmt: skip
    thread = next(e["thread_id"] for e in first if e.get("type") == "thread.started")
    first_usage = next(e["usage"] for e in first if e.get("type") == "turn.completed")
    resumed = _exec(codex, work, env, "resume", "--json", "--skip-git-repo-check",
                    "--dangerously-bypass-approvals-and-sandbox", thread, "AS_CODEX_RESUME: and now?")  # fmt: skip
    assert next(e["thread_id"] for e in resumed if e.get("type") == "thread.started") == thread
    items = [e["item"] for e in resumed if e.get("type") == "item.completed"]
    assert [i["text"] for i in items if i.get("type") == "agent_message"][-1] == RESUMED
    usage = next(e["usage"] for e in resumed if e.get("type") == "turn.completed")
    # The resumed turn's prompt holds the first run's turns (longer than its last request) and reuses them.
    per_request_first = first_usage["input_tokens"] / 2  # the first run made two requests (call, then final)
    assert usage["input_tokens"] > per_request_first
    assert usage["cached_input_tokens"] >= 0.8 * per_request_first


def test_codex_exec_output_schema_returns_json_that_validates(codex_setup, tmp_path):
    codex, work, env = codex_setup
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    events = _exec(codex, work, env, "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                   "--output-schema", str(path), "AS_CODEX_SCHEMA: what is six times seven?")  # fmt: skip
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    final = json.loads([i["text"] for i in items if i.get("type") == "agent_message"][-1])
    assert set(final) == {"answer", "sure"} and isinstance(final["answer"], int) and isinstance(final["sure"], bool)

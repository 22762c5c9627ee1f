"""A three-turn Codex session against the graph (scripted engine): `codex exec` whose model edits the workspace
with `apply_patch` (Codex's freeform custom tool), then two `codex exec resume` turns of the same thread, one
running a shell command that reads the patched file back. Each step's reply only comes if the previous tool's
output reached the model. Per turn, the prompt must reuse the previous one: the engine's cached tokens (Codex's
own `turn.completed` usage) cover at least 95% of the turn's input tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_codex import _codex_binary, _exec, codex_home

pytestmark = [pytest.mark.e2e, pytest.mark.graph("harness")]  # tests/e2e/harness_graph.py

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+CXL-PATCHED\n*** End Patch\n"
PATCH_CALL = json.dumps({"name": "apply_patch", "arguments": {"input": PATCH}})
CAT_CALL = json.dumps({"name": "exec_command", "arguments": {"cmd": "cat hello.txt"}})
ARGS = {
    "engine": {
        "kind": "scripted",
        "block_size": 16,
        "rules": [
            {"match": "CXL-PATCHED", "reply": "T2-DONE: hello.txt says CXL-PATCHED."},  # cat's output came back
            {"match": "hello.txt", "reply": "T1-DONE: hello.txt is created."},  # apply_patch's output came back
            {"match": "AS_CXL_T3", "reply": "T3-DONE: nothing left to do."},
            {"match": "AS_CXL_T2", "reply": f"<tool_call>\n{CAT_CALL}\n</tool_call>"},
            {"match": "AS_CXL_T1", "reply": f"<think>Add the file.</think><tool_call>\n{PATCH_CALL}\n</tool_call>"},
            {"match": "", "reply": "OK."},
        ],
    },
    "model": {"context_window": 131_072},
}


def scripted_rules(work: Path) -> list[dict]:
    """ARGS' rules, for the harness graph (tests/e2e/harness_graph.py); Codex's config still comes from ARGS."""
    return ARGS["engine"]["rules"]


@pytest.fixture(scope="module")
def codex_long(harness_graph, tmp_path_factory):
    codex = _codex_binary()
    work, env = codex_home(harness_graph, ARGS, tmp_path_factory.mktemp("codex-long"))
    return codex, work, env


def _turn(events: list[dict]) -> tuple[list[dict], dict]:
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    return items, next(e["usage"] for e in events if e.get("type") == "turn.completed")


def test_three_turns_with_apply_patch_and_resumed_execs_reuse_the_prefix(codex_long):
    codex, work, env = codex_long
    flags = ("--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox")
    first = _exec(codex, work, env, *flags, "AS_CXL_T1: add the greeting file with apply_patch.")
    thread = next(e["thread_id"] for e in first if e.get("type") == "thread.started")
    items, usage1 = _turn(first)
    patches = [i for i in items if i.get("type") == "file_change"]
    assert patches and patches[0]["status"] == "completed", items
    assert (work / "hello.txt").read_text() == "CXL-PATCHED\n"
    assert [i["text"] for i in items if i.get("type") == "agent_message"][-1].startswith("T1-DONE"), items

    second = _exec(codex, work, env, "resume", *flags, thread, "AS_CXL_T2: show me the file.")
    items, usage2 = _turn(second)
    assert next(e["thread_id"] for e in second if e.get("type") == "thread.started") == thread
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert commands and "CXL-PATCHED" in commands[0]["aggregated_output"], items
    assert [i["text"] for i in items if i.get("type") == "agent_message"][-1].startswith("T2-DONE"), items

    third = _exec(codex, work, env, "resume", *flags, thread, "AS_CXL_T3: anything else?")
    items, usage3 = _turn(third)
    assert [i["text"] for i in items if i.get("type") == "agent_message"][-1].startswith("T3-DONE"), items

    # Each resumed turn sends the whole history again (a new process, a new connection): its prompts must come
    # from the prefix cache, all but the few tokens each request adds.
    for n, usage in ((2, usage2), (3, usage3)):
        assert usage["cached_input_tokens"] >= 0.95 * usage["input_tokens"], (n, usage)
    assert usage3["input_tokens"] > usage1["input_tokens"] / 2  # turn 3's one request holds turns 1 and 2
    # Turn 1 is cold but for Codex's pre-warm of its instructions and tools, so most of it is cached too.
    assert usage1["cached_input_tokens"] >= 0.5 * usage1["input_tokens"], usage1

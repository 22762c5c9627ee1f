"""One scripted graph for the harness e2e modules that drive one model (Claude Code, its long sessions, Codex, its
long session, OpenClaw): deployed once, at the first of them (they run one after another: marker graph("harness")).

Each module keeps its scripted model's side as `scripted_rules(work)` (`work`: the session's harness directory, under
which a module that names files in its rules keeps its work directories). The graph replays their union: every rule
matches on a marker of its own module, then the one catch-all every module ends with ("OK.": titles, topic checks
and other side requests). The model takes the largest context window and every alias the modules use; the engine's
prefix cache holds all their sessions without eviction. What a harness is told about the model comes from its
module's own args, as before (Codex: `agentserve codex-config` over test_codex.ARGS; OpenClaw: its provider file).
test_claude_code_tiers.py keeps a graph of its own: a two-model catalog is what it tests.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

MODULES = (
    "tests.e2e.test_claude_code",
    "tests.e2e.test_claude_code_features",
    "tests.e2e.test_claude_code_long",
    "tests.e2e.test_codex",
    "tests.e2e.test_codex_long",
    "tests.e2e.test_openclaw",
)
CATCH_ALL = {"match": "", "reply": "OK.", "itl_ms": 0}


def harness_args(work: Path) -> dict[str, Any]:
    rules = []
    for name in MODULES:
        for rule in importlib.import_module(name).scripted_rules(work):
            if rule["match"]:
                rules.append(rule)
            else:  # the catch-all: the same in every module, once at the end
                assert rule["reply"] == CATCH_ALL["reply"] and rule.get("itl_ms", 0) == 0, (name, rule)
    return {
        "engine": {"kind": "scripted", "block_size": 16, "rules": [*rules, CATCH_ALL],
                   "cache": {"capacity_blocks": 32768}},  # every module's sessions (~20K-token prompts) stay cached
        "model": {"context_window": 200_000, "aliases": ["smollm2", "smollm2-135m-instruct", "claude-smollm2"]},
        # The modules read each turn's prefix report; without API keys it is off unless asked for (one trusted user
        # on loopback, as here: docs/OPERATIONS.md, threat model).
        "doctor": {"header": "always"},
    }

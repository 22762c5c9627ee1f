"""docs/COMPATIBILITY.md from test runs: one row per harness feature, one column per harness version.

`make test` leaves its JUnit reports in .test-results/ (unit.xml, graph.xml: the real CLIs at their pinned versions
in .harness/, and the harnesses' request shapes replayed through the real graph; any other *.xml there, such as one
module's run with `--junitxml`, is read after them); `make test-harness-latest` runs
the same CLI tests against the registry's newest versions in .harness-latest/ (latest.xml). A cell says what the
tests of that feature found for that version: the real CLI's run where one exercises the feature, else the replayed
request shape (version-independent, so shown in the pinned column only), or why nothing can run it here.

    python scripts/compatibility_matrix.py [--results .test-results] [--out docs/COMPATIBILITY.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESSES = {  # harness -> its npm package
    "Claude Code": "@anthropic-ai/claude-code",
    "Codex": "@openai/codex",
    "OpenClaw": "openclaw",
}


@dataclass(frozen=True)
class Feature:
    harness: str
    name: str
    cli: tuple[str, ...] = ()  # test ids (file::name prefix) that drive the real CLI through the feature
    replay: tuple[str, ...] = ()  # tests of the harness's request shape through the graph (or its decoder)
    why: str = ""  # what the embedded model or this machine cannot show, if anything


CC, CX, OC = "tests/e2e/test_claude_code", "tests/e2e/test_codex", "tests/e2e/test_openclaw.py"
AM = "tests/integration/api/test_anthropic_messages.py"
RW = "tests/integration/api/test_responses_websocket.py"
RE = "tests/integration/api/test_responses_events.py"
FEATURES: tuple[Feature, ...] = (
    Feature("Claude Code", "basic and streamed messages", (f"{CC}.py::test_claude_code_runs_a_tool",),
            (f"{AM}::test_f1_streaming_text_grammar",)),
    Feature("Claude Code", "tool use", (f"{CC}.py::test_claude_code_runs_a_tool", f"{CC}_long.py::"),
            (f"{AM}::test_f2_f3_tools",)),
    Feature("Claude Code", "parallel tool calls", (), (f"{AM}::test_f2_f3_tools", f"{AM}::test_disable_parallel")),
    Feature("Claude Code", "thinking", (), (f"{AM}::test_f2_f3_tools", "tests/integration/api/test_reasoning_controls.py"
                                             "::test_anthropic_budget_tokens"),
            "claude -p sends adaptive thinking to a model id it does not know; the scripted replies carry thinking"),
    Feature("Claude Code", "thinking + tools (interleaved)", (), (f"{AM}::test_f4_interleaved",)),
    Feature("Claude Code", "thinking display omitted / updates (signature only)",
            (f"{CC}_features.py::test_thinking_shown_as_updates",),
            (f"{AM}::test_thinking_display_omitted", "tests/unit/apis/test_anthropic_thinking_omitted.py::"),
            "claude -p sends display \"updates\" with adaptive thinking"),
    Feature("Claude Code", "fine-grained tool streaming", (),
            ("tests/unit/apis/test_anthropic_encode.py::test_live_args_when_fine_grained",)),
    Feature("Claude Code", "prompt-caching fields (cache_control, ttl, scope)", (),
            (f"{AM}::test_f5_f6_claude_code_request", "tests/unit/apis/test_anthropic_decode.py::test_system_forms")),
    Feature("Claude Code", "count_tokens", (), (f"{AM}::test_f5_f6_claude_code_request", f"{AM}::test_f6_count_tokens")),
    Feature("Claude Code", "models", (), (f"{AM}::test_f7_models",)),
    Feature("Claude Code", "long session: every turn reuses the previous prompt", (f"{CC}_long.py::",)),
    Feature("Claude Code", "subagents (Agent tool; haiku tier)", (f"{CC}_long.py::", f"{CC}_tiers.py::"),
            (f"{AM}::test_request_kinds",)),
    Feature("Claude Code", "compaction", (), (f"{AM}::test_request_kinds", "tests/unit/ingress/test_lineage.py::"
                                               "test_compaction_is_recognised"),
            "a real compaction needs a session past the auto-compact window: its request shape is replayed"),
    Feature("Claude Code", "tool search (deferred tools, tool_reference, tool_addition)",
            (f"{CC}_features.py::test_tool_search",),
            (f"{AM}::test_tool_search", "tests/unit/preprocess/test_tool_changes.py::"),
            "the CLI loads deferred tools by tool_reference; tool_addition system messages are replayed"),
    Feature("Claude Code", "server tools (WebSearch, web_fetch, code_execution)", (f"{CC}_features.py::test_websearch",),
            ("tests/unit/apis/test_anthropic_server_tools.py::",),
            "nothing here can run them: accepted and not offered; WebSearch answers in text (docs/HARNESSES.md)"),
    Feature("Claude Code", "Anthropic-defined client tools (bash_, text_editor_, computer_, memory_)", (),
            (f"{AM}::test_anthropic_defined_client_tools", "tests/unit/apis/test_anthropic_client_tools.py::"),
            "Claude Code sends its own custom tools; these types come from Agent-SDK-style clients: replayed"),
    Feature("Claude Code", "images", (), ("tests/unit/apis/test_media",),
            "SmolLM2 reads no images: a 400 naming the block, or a placeholder where configured"),
    Feature("Claude Code", "PDF documents", (), ("tests/unit/apis/test_media",),
            "SmolLM2 reads no PDFs: a 400 naming the block, or a placeholder where configured"),
    Feature("Codex", "exec (shell tool, WebSocket transport)", (f"{CX}.py::test_codex_exec_runs_the_shell_tool",),
            (f"{RW}::test_websocket_turn_streams",)),
    Feature("Codex", "exec resume", (f"{CX}.py::test_codex_exec_resume", f"{CX}_long.py::"),
            ("tests/integration/api/test_responses_state.py::test_previous_response_id",)),
    Feature("Codex", "apply_patch (freeform tool)", (f"{CX}_long.py::",),
            (f"{RW}::test_custom_tool_input_round_trips", f"{RE}::test_custom_tool_call",
             "tests/e2e/test_vllm_apply_patch.py::", "tests/unit/preprocess/test_freeform_tools.py::"),
            "the CLI run edits a file through apply_patch on the scripted engine (its call held to the grammar); on "
            "real vLLM (SmolLM2-135M, which never chooses apply_patch under Codex's auto choice) Codex's exact tool, "
            "named or required (the model then picks it), gives patches its Lark grammar accepts, streamed and not, at "
            "temperature 0.7, and fails with the constraint off; real `codex exec` calling apply_patch on vLLM is not run"),
    Feature("Codex", "output schema", (f"{CX}.py::test_codex_exec_output_schema",),
            ("tests/integration/api/test_constrained.py::test_responses_text_format",)),
    Feature("Codex", "MCP tools (namespaced)", (), (f"{RW}::test_namespaced_tool_call",),
            "no MCP server is configured in the CLI runs: the namespaced tool shape is replayed"),
    Feature("Codex", "pre-warm (generate: false)", (), (f"{RW}::test_prewarm",)),
    Feature("Codex", "model catalog (/models, ETag)", (f"{CX}.py::",),
            ("tests/integration/api/test_responses_http.py::test_codex_models_catalog",)),
    Feature("Codex", "compaction, subagents (x-codex-turn-metadata, x-openai-subagent)", (),
            ("tests/unit/ingress/test_lineage.py::test_codex_threads",),
            "a real compaction needs a session past the auto-compact window: its headers are replayed"),
    Feature("OpenClaw", "read tool (Anthropic Messages)", (f"{OC}::test_openclaw_runs_a_tool",)),
    Feature("OpenClaw", "edit tool", (f"{OC}::test_openclaw_edit_tool",)),
)


@dataclass
class Outcomes:
    """Each test case's outcome in one set of JUnit reports: passed, failed, error, or skipped (with the reason)."""

    cases: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, paths: list[Path]) -> "Outcomes":
        out = cls()
        for path in paths:
            for case in ET.parse(path).getroot().iter("testcase"):
                file = (case.get("file") or case.get("classname", "").replace(".", "/") + ".py")
                outcome, reason = "passed", ""
                for kind in ("failure", "error", "skipped"):
                    el = case.find(kind)
                    if el is not None:
                        outcome, reason = kind, (el.get("message") or "")[:160]
                        break
                out.cases[f"{file}::{case.get('name')}"] = (outcome, reason)
        return out

    def matching(self, prefixes: tuple[str, ...]) -> list[tuple[str, str, str]]:
        return [(tid, *res) for tid, res in self.cases.items() if any(tid.startswith(p) for p in prefixes)]


def cell(found: list[tuple[str, str, str]], label: str) -> str:
    if not found:
        return ""
    bad = [f"`{tid.split('::')[-1]}` {o}" for tid, o, _ in found if o in ("failure", "error")]
    if bad:
        return "FAIL: " + "; ".join(bad)
    passed = sum(o == "passed" for _, o, _ in found)
    if passed == 0:
        return "skipped: " + found[0][2]
    return f"pass ({passed} {label})"


def installed_version(prefix: Path, package: str) -> str | None:
    manifest = prefix / "node_modules" / package / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.exists() else None


def newest_on_registry(package: str) -> str | None:
    try:
        out = subprocess.run(["npm", "view", package, "version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else None


def render(pinned: Outcomes, latest: Outcomes | None, results: Path) -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    lines = [
        "# Harness compatibility",
        "",
        f"Generated by `python scripts/compatibility_matrix.py` from the JUnit reports in `{results.name}/` "
        f"(git {head.strip() or '?'}, {datetime.date.today().isoformat()}): `make test` for the pinned versions, "
        "`make test-harness-latest` for the registry's newest. **CLI** cells count runs of the real harness CLI "
        "against the real graph (scripted engine); **replay** cells count tests of the harness's request shape "
        "through the real graph or its decoder, which do not depend on the installed version. Where nothing here "
        "can run a feature, the last column says why.",
        "",
    ]
    for harness, package in HARNESSES.items():
        pinned_v = installed_version(ROOT / ".harness", package) or "not installed"
        latest_v = installed_version(ROOT / ".harness-latest", package) if latest else None
        newest = newest_on_registry(package)
        lines += [f"## {harness}", "",
                  f"Pinned: {pinned_v}. Newest on the npm registry at generation: {newest or 'unknown'}"
                  + (f"; tested: {latest_v}." if latest_v else " (`make test-harness-latest` not run)."), ""]
        cols = [f"{pinned_v} (pinned)"] + ([f"{latest_v} (newest)"] if latest_v else [])
        lines += ["| feature | " + " | ".join(cols) + " | notes |", "|---|" + "---|" * len(cols) + "---|"]
        for f in (f for f in FEATURES if f.harness == harness):
            cli = cell(pinned.matching(f.cli), "CLI") if f.cli else ""
            replay = cell(pinned.matching(f.replay), "replay") if f.replay else ""
            first = "; ".join(c for c in (cli, replay) if c) or "not run"
            row = [first]
            if latest_v:
                row.append(cell(latest.matching(f.cli), "CLI") or "—" if f.cli else "— (replay only)")
            lines.append(f"| {f.name} | " + " | ".join(row) + f" | {f.why} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / ".test-results")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "COMPATIBILITY.md")
    ns = ap.parse_args()
    # unit.xml and graph.xml from `make test`, then any other report of the pinned versions (a module run on its
    # own with --junitxml): a later report's outcome of the same test replaces an earlier one's.
    named = [ns.results / "unit.xml", ns.results / "graph.xml"]
    others = sorted((p for p in ns.results.glob("*.xml") if p not in named and p.name != "latest.xml"),
                    key=lambda p: p.stat().st_mtime)
    pinned_files = [p for p in (*named, *others) if p.exists()]
    if not pinned_files:
        raise SystemExit(f"no JUnit reports in {ns.results}: run `make test` first")
    latest_file = ns.results / "latest.xml"
    latest = Outcomes.read([latest_file]) if latest_file.exists() else None
    ns.out.write_text(render(Outcomes.read(pinned_files), latest, ns.results) + "\n")
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()

"""What a tool added mid-session costs the prefix cache: in place (agentserve) against folded into the tool list.

Claude Code with tool search (`ENABLE_TOOL_SEARCH=true`) holds MCP tools back (`defer_loading`) and brings one into
force mid-session with a `role: "system"` message carrying a `tool_addition` block. agentserve renders the change
where it stands (preprocess/tool_changes.py); a server that folds the tool into `tools` (the anchor: how a proxy in
front of vLLM's chat template serves it) re-renders the template's tool list, and with it everything after it.

A Claude Code-shaped session (bench/claude_code_shape.py: ~12K-token system prompt, 20 tools, ~790 tokens a turn)
with 8 deferred MCP tools; at turn N (swept) one of them is added, and the next request's prompt is compared with the
previous request's prompt and output by the prefix doctor (SessionTracker: the reused share is the leading tokens
equal to what the engine holds). Both conditions get the same conversation through the real Anthropic decoder,
template and tokenizer; no engine runs, the shares are exact token arithmetic.

    agentserve bench tool-addition [--turns 1,5,20,60]    # a table; docs/benchmarks/tool_addition.{json,png}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from agentserve.apis import anthropic
from agentserve.bench import claude_code_shape as shape
from agentserve.bench import conditions, results
from agentserve.config import ModelSpec
from agentserve.doctor import SessionTracker
from agentserve.prepare.model import prepare_model
from agentserve.preprocess.preprocessor import Preprocessor

MCP = [f"mcp__github__{verb}" for verb in ("create_issue", "list_prs", "get_pr", "merge_pr", "add_comment",
                                            "list_repos", "search_code", "get_file")]
CONDITIONS = ("in_place", "anchor")


def _mcp_tool(name: str, deferred: bool) -> dict[str, Any]:
    tool = {"name": name, "description": f"GitHub MCP server: {name.rsplit('__', 1)[1].replace('_', ' ')}.",
            "input_schema": {"type": "object", "properties": {"owner": {"type": "string"}, "repo": {"type": "string"},
                                                              "body": {"type": "string"}}, "required": ["repo"]}}
    return {**tool, "defer_loading": True} if deferred else tool


def _request(turns: int, condition: str, added: bool) -> dict[str, Any]:
    """The session's request after `turns` turns; `added`: after the addition (one more turn, and the new tool)."""
    body = shape.body(turns + (1 if added else 0))
    deferred = condition == "in_place"
    tools = [*shape.tools(), *(_mcp_tool(n, deferred) for n in MCP)]
    if condition == "anchor":  # the deferred tools are not in the prompt until added: folded into the list then
        tools = [*shape.tools(), *([_mcp_tool(MCP[0], False)] if added else [])]
    body["tools"] = tools
    if added and condition == "in_place":
        addition = {"role": "system", "content": [
            {"type": "text", "text": "The github MCP server connected."},
            {"type": "tool_addition", "tool": {"type": "tool_reference", "name": MCP[0]}}]}
        # Where Claude Code puts it: after the assistant's call, before the user message with its result.
        body["messages"] = [*body["messages"][:-1], addition, body["messages"][-1]]
    return body


def _prompt(pre: Preprocessor, body: dict[str, Any]) -> list[int]:
    req = anthropic.MessagesRequest.model_validate(body)
    return list(pre.render(anthropic.conversation(req, None, caller="bench")).token_ids)


def measure(pre: Preprocessor, turns: int, condition: str) -> dict[str, Any]:
    tracker = SessionTracker(pre._tok.decode, frozenset(pre._tok.all_special_ids))
    before = _prompt(pre, _request(turns, condition, added=False))
    reply = shape.step(turns + 1).reply()
    tracker.record("s", before, pre._tok.encode(reply, add_special_tokens=False) + [pre._tok.eos_token_id])
    after = _prompt(pre, _request(turns, condition, added=True))
    report = tracker.check("s", after)
    assert report is not None
    return {"turns": turns, "condition": condition, "prompt_tokens": len(after),
            "expected_tokens": report.expected_tokens, "reused_tokens": report.reused_tokens,
            "reused_share": round(report.reuse_ratio, 4), "prefilled_tokens": len(after) - report.reused_tokens,
            "cause": str(report.cause) if report.cause else None}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench tool-addition", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", default="1,5,20,60", help="the turns at which a tool is added (comma-separated)")
    ap.add_argument("--out-dir", type=Path, default=None, help="default docs/benchmarks/")
    ns = ap.parse_args(argv)
    out = ns.out_dir or results.out_dir()
    spec = ModelSpec(replay_family="agentserve_default", context_window=1 << 20)  # rendering only: no window
    pre = Preprocessor(spec, str(prepare_model()), 16)
    rows = [measure(pre, int(t), c) for t in ns.turns.split(",") for c in CONDITIONS]
    print(f"{'turn':>5} {'condition':<9} {'prompt':>8} {'reused':>8} {'share':>7} {'prefilled':>10}")
    for r in rows:
        print(f"{r['turns']:>5} {r['condition']:<9} {r['prompt_tokens']:>8} {r['reused_tokens']:>8} "
              f"{r['reused_share']:>7.3f} {r['prefilled_tokens']:>10}")
    doc = {"command": results.command("tool-addition", argv), "conditions": conditions.snapshot(), "rows": rows}
    results.write_json(out / "tool_addition.json", doc)
    plt = results.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for c, color in zip(CONDITIONS, ("#55a868", "#c44e52")):
        pts = [r for r in rows if r["condition"] == c]
        ax.plot([r["prompt_tokens"] / 1000 for r in pts], [r["prefilled_tokens"] / 1000 for r in pts], "o-",
                color=color, label="in place (agentserve)" if c == "in_place" else "folded into tools (anchor)")
    ax.set_xlabel("prompt after the addition (K tokens)")
    ax.set_ylabel("tokens prefilled again (K)")
    ax.set_title("A tool added mid-session: what the next turn prefills")
    ax.legend()
    fig.tight_layout()
    results.save_figure(fig, out / "tool_addition.png", dpi=120)


if __name__ == "__main__":
    main(sys.argv[1:])

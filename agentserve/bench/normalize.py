"""What `normalize_sort_tools` saves: prefix reuse for sessions whose harness reorders its tools between turns.

Renders 5-turn sessions with the real template and tokenizer (no engine: reuse is exact token arithmetic, the
prefix doctor's), with normalization off and on, for a client that keeps its tool order and one that shuffles it.

    agentserve bench normalize      # prints a table, writes docs/benchmarks/normalize.{json,png}
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Sequence

from agentserve.bench import results
from agentserve.bench.stats import p50
from agentserve.config import ModelSpec
from agentserve.doctor import SessionTracker
from agentserve.prepare.model import prepare_model
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import Conversation, TextBlock, ToolCallBlock, ToolResultBlock, ToolSpec, Turn

TOOLS = [
    ToolSpec(name=f"tool_{i}", description=f"Tool number {i} " * 6,
             parameters={"type": "object", "properties": {"arg": {"type": "string"}}})
    for i in range(12)
]


def session(pre: Preprocessor, shuffle: bool, seed: int, turns: int = 5) -> list[float]:
    rng = random.Random(seed)
    tracker = SessionTracker(pre._tok.decode, frozenset(pre._tok.all_special_ids))
    history: list[Turn] = [Turn(role="user", blocks=(TextBlock(text=f"Task {seed}: refactor the parser."),))]
    ratios = []
    for t in range(turns):
        tools = list(TOOLS)
        if shuffle:
            rng.shuffle(tools)
        conv = Conversation(
            turns=(Turn(role="system", blocks=(TextBlock(text="You are a coding agent."),)), *history),
            tools=tuple(tools),
        )
        prompt = pre.render(conv).token_ids
        report = tracker.check("s", prompt)
        if report is not None:
            ratios.append(report.reuse_ratio)
        call = ToolCallBlock(id=f"c{t}", name="tool_3", arguments='{"arg": "x"}')
        output_text = '<tool_call>\n{"name": "tool_3", "arguments": {"arg": "x"}}\n</tool_call>'
        output = pre._tok.encode(output_text, add_special_tokens=False) + [pre._tok.eos_token_id]
        tracker.record("s", prompt, output)
        history += [
            Turn(role="assistant", blocks=(call,)),
            Turn(role="tool", blocks=(ToolResultBlock(tool_call_id=f"c{t}", content=f"result {t}"),)),
        ]
    return ratios


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench normalize", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=None, help="default docs/benchmarks/")
    out = ap.parse_args(argv).out_dir or results.out_dir()
    path = str(prepare_model())
    rows = []
    for sort in (False, True):
        pre = Preprocessor(ModelSpec(replay_family="agentserve_default"), path, 16, sort_tools=sort)
        for shuffle in (False, True):
            ratios = [r for seed in range(20) for r in session(pre, shuffle, seed)]
            rows.append({"normalize_sort_tools": sort, "client_shuffles_tools": shuffle,
                         "reuse_median": p50(ratios), "reuse_min": min(ratios), "turns": len(ratios)})
    print(f"{'sort_tools':<11} {'client shuffles':<16} {'reuse median':>12} {'reuse min':>10}")
    for r in rows:
        print(f"{str(r['normalize_sort_tools']):<11} {str(r['client_shuffles_tools']):<16} "
              f"{r['reuse_median']:>12.3f} {r['reuse_min']:>10.3f}")
    results.write_json(out / "normalize.json", rows, newline=False)
    plt = results.pyplot()

    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels = [f"sort={'on' if r['normalize_sort_tools'] else 'off'}\n{'shuffled' if r['client_shuffles_tools'] else 'stable'} tools" for r in rows]
    ax.bar(labels, [r["reuse_median"] for r in rows], color=["#4c72b0", "#dd8452", "#4c72b0", "#55a868"])
    ax.set_ylabel("prefix reuse (median)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Tool-order normalization and prefix reuse")
    fig.tight_layout()
    results.save_figure(fig, out / "normalize.png", dpi=120)


if __name__ == "__main__":
    main(sys.argv[1:])

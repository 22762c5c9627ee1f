"""Per-delta work is O(delta): structural checks on the scanners' character counters, plus a loose timing ratio."""

from __future__ import annotations

import json
import time

import pytest

from agentserve.parsers import StreamParser

from .fixtures import TOOLS, r_deepseek_v31, r_harmony, r_hermes, r_pythonic, r_qwen3_coder

FORMATS = [
    ("hermes", None, r_hermes),
    ("qwen3_coder", None, r_qwen3_coder),
    ("deepseek_v31", "deepseek_r1", r_deepseek_v31),
    ("pythonic", None, r_pythonic),
    ("harmony", "gpt_oss", r_harmony),
]


def _text(render, n_chars: int, reasoning: str | None) -> str:
    body = ("ab \"c\" {d} [e] \\ é日 " * (n_chars // 20 + 1))[:n_chars]
    pre = "</think>" if reasoning == "deepseek_r1" else ""
    return pre + render([("search", {"s": body, "n": 1})])


def _feed_chunks(tool, reasoning, text, size):
    p = StreamParser(reasoning=reasoning, tool_calls=tool, tools=TOOLS)
    per = []
    for i in range(0, len(text), size):
        before = sum(sc.work for sc in p.scanners)
        p.feed(text[i : i + size])
        per.append(sum(sc.work for sc in p.scanners) - before)
    p.finish()
    return per


@pytest.mark.parametrize(("tool", "reasoning", "render"), FORMATS, ids=[f[0] for f in FORMATS])
def test_scanner_looks_only_at_new_text_plus_bounded_holdback(tool, reasoning, render):
    text = _text(render, 32_000, reasoning)
    for size in (1, 7):
        per = _feed_chunks(tool, reasoning, text, size)
        # each character is examined a bounded number of times: no re-scan of the accumulated output
        assert sum(per) <= 3 * len(text) + 200
        assert max(per) <= 4 * (size + 40)


@pytest.mark.parametrize(("tool", "reasoning", "render"), FORMATS, ids=[f[0] for f in FORMATS])
def test_per_delta_time_does_not_grow_with_output_length(tool, reasoning, render):
    def per_delta(n):
        text = _text(render, n, reasoning)
        best = float("inf")
        for _ in range(3):
            p = StreamParser(reasoning=reasoning, tool_calls=tool, tools=TOOLS)
            t0 = time.perf_counter()
            for i in range(0, len(text), 4):
                p.feed(text[i : i + 4])
            p.finish()
            best = min(best, (time.perf_counter() - t0) / (len(text) / 4))
        return best

    small, large = per_delta(1_000), per_delta(32_000)
    # quadratic work would make this ratio ~32; allow generous noise on a shared 2-core box
    assert large < 6 * small, (small, large)


def test_long_arguments_roundtrip_exactly():
    body = "x" * 100_000
    text = r_hermes([("f", {"s": body})])
    p = StreamParser(tool_calls="hermes")
    events = []
    for i in range(0, len(text), 3):
        events += p.feed(text[i : i + 3])
    events += p.finish()
    assert json.loads(events[-1].arguments) == {"s": body}

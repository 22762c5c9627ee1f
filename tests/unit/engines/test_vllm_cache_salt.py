"""The vLLM engine hands a request's cache salt to vLLM in its prompt (`TokensPrompt.cache_salt`, vLLM 0.32), where
it keys the prompt's first block and so every block: the same partition the router's hashes and the scripted
engine use."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from agentserve.config import EngineSpec
from agentserve.engines.vllm import VllmEngine
from agentserve.protocol import EngineRequest, SamplingParams


class _RecordingLLM:
    def __init__(self) -> None:
        self.prompts: list[dict] = []

    @staticmethod
    def prompt_ids(prompt) -> list[int]:
        """The prompt as vLLM's output reports it (a text prompt: the ids sent)."""
        return list(prompt["prompt_token_ids"])

    def generate(self, prompt, sampling, request_id, **kw):
        self.prompts.append(dict(prompt))

        async def stream():
            out = SimpleNamespace(token_ids=[7], logprobs=None, finish_reason="stop")
            ids = self.prompt_ids(prompt)
            yield SimpleNamespace(outputs=[out], finished=True, num_cached_tokens=0, prompt_token_ids=ids)

        return stream()


def _run(salt: str | None) -> dict:
    engine = VllmEngine(EngineSpec(kv_events=False), Path("/nonexistent"), context_window=64)
    llm = _RecordingLLM()
    engine._llm = llm  # type: ignore[assignment]
    req = EngineRequest(request_id="r", model="m", token_ids=[1, 2, 3], sampling=SamplingParams(), max_tokens=4,
                        cache_salt=salt)

    async def go():
        return [d async for d in engine.generate(req)]

    asyncio.run(go())
    return llm.prompts[0]


def test_the_salt_reaches_vllms_prompt_and_none_means_the_shared_cache():
    assert _run("abc123") == {"prompt_token_ids": [1, 2, 3], "cache_salt": "abc123"}
    assert _run(None) == {"prompt_token_ids": [1, 2, 3]}

"""A vision model's images reach vLLM's prompt as `multi_modal_data` (PIL images, in order); a model the catalog
declares text-only runs as its language model alone."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from PIL import Image

from agentserve.config import EngineSpec, ModelSpec
from agentserve.engines.vllm import VllmEngine, engine_args
from agentserve.protocol import EngineRequest, SamplingParams
from tests.unit.engines.test_vllm_cache_salt import _RecordingLLM


def _png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGBA", size, (*color, 255)).save(buf, format="PNG")
    return buf.getvalue()


IMAGE_TOKENS = 64  # what the fake processor expands each image's placeholder to


class _ExpandingLLM(_RecordingLLM):
    """Reports the prompt as vLLM does for a vision model: each image's placeholder token (2 here) replaced by the
    image's tokens."""

    @staticmethod
    def prompt_ids(prompt) -> list[int]:
        out: list[int] = []
        for t in prompt["prompt_token_ids"]:
            out.extend([2] * IMAGE_TOKENS if t == 2 and "multi_modal_data" in prompt else [t])
        return out


def _generate(images: tuple[bytes, ...]) -> tuple[dict, list]:
    engine = VllmEngine(EngineSpec(kv_events=False), Path("/nonexistent"), context_window=64, reads_images=True)
    llm = _ExpandingLLM()
    engine._llm = llm  # type: ignore[assignment]
    req = EngineRequest(request_id="r", model="m", token_ids=[1, 2, 3], sampling=SamplingParams(), max_tokens=4,
                        images=images)

    async def go():
        return [d async for d in engine.generate(req)]

    deltas = asyncio.run(go())
    return llm.prompts[0], deltas


def _prompt(images: tuple[bytes, ...]) -> dict:
    return _generate(images)[0]


def test_usage_counts_an_image_as_the_tokens_vllm_expands_it_to():
    """Placeholder [1, <image>, 3] is 3 ids here; vLLM runs (and caches) 2 + IMAGE_TOKENS, which is what usage says."""
    _, deltas = _generate((_png((255, 0, 0), (4, 3)),))
    assert deltas[0].prompt_tokens == 2 + IMAGE_TOKENS
    _, text = _generate(())
    assert text[0].prompt_tokens == 3  # a text prompt: the ids sent


def test_images_go_to_vllm_as_pil_images_in_order():
    prompt = _prompt((_png((255, 0, 0), (4, 3)), _png((0, 0, 255), (2, 5))))
    assert prompt["prompt_token_ids"] == [1, 2, 3]
    first, second = prompt["multi_modal_data"]["image"]
    assert isinstance(first, Image.Image) and first.mode == "RGB"  # as vLLM's own loader converts them
    assert (first.size, first.getpixel((0, 0))) == ((4, 3), (255, 0, 0))
    assert (second.size, second.getpixel((1, 1))) == ((2, 5), (0, 0, 255))
    assert "multi_modal_data" not in _prompt(())  # a text prompt stays the plain TokensPrompt


def test_a_text_only_declaration_runs_a_vision_checkpoint_as_its_language_model():
    spec = EngineSpec(kv_events=False)
    assert engine_args(spec, Path("/m"), 64, reads_images=False)["language_model_only"] is True
    assert "language_model_only" not in engine_args(spec, Path("/m"), 64, reads_images=True)
    assert "language_model_only" not in engine_args(spec, Path("/m"), 64)  # not said: vLLM's default
    from agentserve.engines.factory import make_engine

    vision = make_engine(spec, ModelSpec(input_modalities=("text", "image")), Path("/m"))
    text = make_engine(spec, ModelSpec(), Path("/m"))
    assert "language_model_only" not in vision._kwargs  # type: ignore[attr-defined]
    assert text._kwargs["language_model_only"] is True  # type: ignore[attr-defined]

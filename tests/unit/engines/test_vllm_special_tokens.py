"""The vLLM adapter's decode path with special-token markers: vLLM hands over token ids (its own text is not used),
the ingress decodes them, and the parsers get the markers they need while the client sees none.

AsyncLLM is replaced by a double that streams vLLM's own `RequestOutput`s (DELTA kind, one token per step, as the
engine core does), so what is tested is the adapter and everything after it; that a real vLLM engine returns special
ids in `token_ids` needs no model to show (detokenization is off or only for stop strings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentserve.config import EngineSpec
from agentserve.engines.vllm import VllmEngine
from agentserve.protocol import EngineRequest, SamplingParams
from tests.unit.ingress.test_special_tokens import CASES, leaks, outcome, post_for, tokenizers  # noqa: F401 - fixture


class StreamingAsyncLLM:
    """Streams a fixed list of token ids as vLLM's AsyncLLM does with RequestOutputKind.DELTA."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.params: Any = None

    async def generate(self, prompt, params, request_id, **_: Any):
        from vllm.outputs import CompletionOutput, RequestOutput

        self.params = params
        for i, tid in enumerate(self.ids):
            last = i == len(self.ids) - 1
            # with detokenize=False vLLM fills no text: nothing it decodes can reach the client
            done = CompletionOutput(0, "", [tid], None, None, finish_reason="stop" if last else None)
            yield RequestOutput(request_id, None, prompt["prompt_token_ids"], None, [done], last, num_cached_tokens=0)

    async def abort(self, request_id: str) -> None:
        pass


def request(stop: tuple[str, ...] = ()) -> EngineRequest:
    return EngineRequest(
        request_id="r1", model="m", token_ids=[1, 2, 3], max_tokens=64,
        sampling=SamplingParams(stop=stop),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_vllm_adapter_ids_parse_into_calls_without_marker_text(tokenizers, case) -> None:
    tok = tokenizers[case.name]
    ids = tok.encode(case.output, add_special_tokens=False) + [tok.eos_token_id]
    engine = VllmEngine(EngineSpec(kv_events=False), Path("/unused"), context_window=4096)
    engine._llm = llm = StreamingAsyncLLM(ids)
    post = post_for(tok, case)
    events: list[Any] = []
    async for delta in engine.generate(request()):
        events += post.feed(delta)
    assert llm.params.detokenize is False  # no stop strings: the ingress alone turns ids into text
    assert post.output_ids == ids  # every id, special ones included, crossed the adapter unchanged
    reasoning, text, calls, _ = outcome(events)
    assert (reasoning, text, calls) == (case.reasoning_text, case.text, case.calls)
    assert leaks(tok, events) == []


async def test_vllm_matches_stop_strings_on_text_with_special_tokens(tokenizers) -> None:
    """With stops vLLM decodes for itself; its text keeps special tokens, so a stop string never matches across a
    marker there either (as in the ingress and the scripted engine), and still none of it reaches the client."""
    case = next(c for c in CASES if c.name == "hermes")
    tok = tokenizers[case.name]
    ids = tok.encode(case.output, add_special_tokens=False)
    engine = VllmEngine(EngineSpec(kv_events=False), Path("/unused"), context_window=4096)
    engine._llm = llm = StreamingAsyncLLM(ids)
    post = post_for(tok, case, stop=("zzz",))
    events: list[Any] = []
    async for delta in engine.generate(request(stop=("zzz",))):
        events += post.feed(delta)
    assert llm.params.detokenize is True and llm.params.skip_special_tokens is False
    assert outcome(events)[2] == case.calls and leaks(tok, events) == []

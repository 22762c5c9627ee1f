"""Speculative prefill after a turn: what it prefills (serve/speculative.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agentserve.protocol import (
    Conversation, GenerationRequest, PreprocessedRequest, RouteDecision, SamplingParams, TextBlock, Turn,
)
from agentserve.protocol.events import ReasoningDelta, TextDelta
from agentserve.serve.speculative import SpeculativePrefill, TurnCollector


class Handles:
    def __init__(self) -> None:
        self.rendered: list[Any] = []
        self.prefilled: list[list[int]] = []

        async def render_tokens(conv, kwargs, add_generation_prompt, *rest):
            self.rendered.append(conv)
            return [9, 9, 9]

        async def route_to(req, replica):
            return RouteDecision(replica_id=replica)

        async def generate(spec, route):
            self.prefilled.append(spec.token_ids)
            yield None

        self.pre = SimpleNamespace(render_tokens=SimpleNamespace(remote=render_tokens))
        self.router = SimpleNamespace(route_to=SimpleNamespace(remote=route_to),
                                      release=SimpleNamespace(remote=lambda rid: None))
        self.engine = SimpleNamespace(generate=SimpleNamespace(remote=generate))


def _run(generated: list[int] | None) -> Handles:
    h = Handles()
    spec = SpeculativePrefill(preprocessor=h.pre, router=h.router, engine=h.engine, block_size=16, enabled=True,
                              max_in_flight=4)
    request = GenerationRequest(request_id="r", model="m", conversation=Conversation(
        turns=(Turn(role="user", blocks=(TextBlock(text="hi"),)),)))
    pre = PreprocessedRequest(request_id="r", model="m", token_ids=[1, 2, 3], block_hashes=[],
                              sampling=SamplingParams(), max_tokens=8)
    collector = TurnCollector()
    collector.feed([ReasoningDelta("think"), TextDelta("hello")])

    async def go() -> None:
        spec.after(request, pre, RouteDecision(replica_id="r0"), collector, generated)
        while spec.in_flight:
            await asyncio.sleep(0.01)

    asyncio.run(go())
    return h


def test_a_kept_turn_prefills_its_prompt_and_generated_tokens_without_rendering():
    h = _run([1, 2, 3, 7, 8, 2])
    assert h.prefilled == [[1, 2, 3, 7, 8, 2]] and h.rendered == []


def test_a_turn_not_kept_is_rendered_as_it_will_be_replayed():
    h = _run(None)
    assert h.prefilled == [[9, 9, 9]]
    assert [t.role for t in h.rendered[0].turns] == ["user", "assistant"]

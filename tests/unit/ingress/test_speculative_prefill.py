"""Speculative prefill after a turn (ingress/observers/speculative.py): what it prefills, through the lifecycle."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agentserve.config import ServeArgs
from agentserve.doctor import PrefixDoctor
from agentserve.ingress.lifecycle import RequestPath
from agentserve.ingress.observers import TurnEnded
from agentserve.ingress.observers.speculative import SpeculativePrefill
from agentserve.ingress.output.request_state import RequestState
from agentserve.protocol import (
    AgentHints, Conversation, EngineDelta, EngineRequest, GenerationRequest, Preprocessed, PromptReport, RouteDecision,
    RouteRequest, SamplingParams, TextBlock, Turn,
)
from tests.unit.fake_handles import Method


class Handles:
    def __init__(self, *, saturated: bool = False) -> None:
        self.rendered: list[Any] = []
        self.prefilled: list[list[int]] = []
        self.pinned: list[str] = []

        async def render_tokens(conv, kwargs, add_generation_prompt, *rest):
            self.rendered.append(conv)
            return [9, 9, 9]

        async def route_to(req, replica, affinity=None):
            self.pinned.append(replica)
            return None if saturated else RouteDecision(replica_id=replica)

        async def generate(spec, route):
            self.prefilled.append(spec.token_ids.tolist())
            yield EngineDelta(token_ids=[7], finish_reason="length", prompt_tokens=len(spec.token_ids))

        class Stream:
            def __init__(self, gen) -> None:
                self._gen = gen

            def __aiter__(self):
                return self

            def __anext__(self):
                return self._gen.__anext__()

            def cancel(self) -> None:
                pass

        self.pre = SimpleNamespace(render_tokens=Method(render_tokens))
        self.router = SimpleNamespace(route_to=Method(route_to), release=Method(lambda rid, model: None))
        self.engine = SimpleNamespace(generate=Method(lambda spec, route: Stream(generate(spec, route))))
        self.engine.options = lambda **_: self.engine


def _run(tokenizer, *, kept: bool, saturated: bool = False) -> Handles:
    h = Handles(saturated=saturated)
    spec = SpeculativePrefill(block_size={"m": 16}, enabled=True, max_in_flight=4, token_exact=True)
    args = ServeArgs()
    RequestPath(
        args, preprocessor=h.pre, router=h.router, engines={"m": h.engine}, tokenizers={"m": tokenizer},
        doctor=PrefixDoctor.from_args(args, tokenizer), observers=[spec],
    )
    request = GenerationRequest(
        request_id="r", model="m", hints=AgentHints(speculative_prefill=True),
        conversation=Conversation(turns=(Turn(role="user", blocks=(TextBlock(text="hi"),)),)),
    )
    prepared = Preprocessed(
        engine=EngineRequest(request_id="r", model="m", token_ids=[1, 2, 3], sampling=SamplingParams(), max_tokens=8),
        route=RouteRequest(request_id="r", model="m", block_hashes=[], prompt_tokens=3, max_tokens=8),
        report=PromptReport(replay_prefix="digest" if kept else ""),
    )
    state = RequestState(tokenizer, reasoning_parser=None, tool_call_parser=None, tools=[])
    output = tokenizer.encode("hello", add_special_tokens=False)
    state.feed(EngineDelta(token_ids=output, finish_reason="stop", prompt_tokens=3))
    ended = TurnEnded(request=request, model="m", prepared=prepared, route=RouteDecision(replica_id="r0"),
                      state=state, session="", warm_only=False)

    async def go() -> None:
        spec.turn_ended(ended)
        while spec.in_flight:
            await asyncio.sleep(0.01)

    asyncio.run(go())
    h.output = output  # type: ignore[attr-defined]
    return h


def test_a_kept_turn_prefills_its_prompt_and_generated_tokens_without_rendering(tokenizer):
    h = _run(tokenizer, kept=True)
    assert h.prefilled == [[1, 2, 3, *h.output]] and h.rendered == []
    assert h.pinned == ["r0"]  # on the turn's own replica


def test_a_turn_not_kept_is_rendered_as_it_will_be_replayed(tokenizer):
    h = _run(tokenizer, kept=False)
    assert h.prefilled == [[9, 9, 9]]
    assert [t.role for t in h.rendered[0].turns] == ["user", "assistant"]


def test_a_saturated_replica_gets_no_prefill(tokenizer):
    h = _run(tokenizer, kept=True, saturated=True)
    assert h.pinned == ["r0"] and h.prefilled == []

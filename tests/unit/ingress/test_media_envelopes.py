"""An image or PDF sent to a text-only model, through the ingress app in process (auth off, the real handlers and
error envelopes; fake Preprocessor, Router and engine handles from test_lifecycle.py): a 400 in the envelope of the
API it came through, naming the block; with `unsupported_media: placeholder` the turn is served and the model is
shown the placeholder instead."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from agentserve.apis.media import IMAGE_PLACEHOLDER
from agentserve.apis.models import Catalog
from agentserve.apis.responses.store import ResponseStore
from agentserve.config import ModelSpec, ServeArgs
from agentserve.ingress.app import IngressParts, make_app
from agentserve.ingress.context import IngressContext
from agentserve.protocol import EngineDelta
from tests.support.keys import signing_key
from tests.unit.apis.test_media import DATA_URL, PDF_B64, a_image, a_pdf
from tests.unit.fake_handles import Method
from tests.unit.ingress import test_lifecycle
from tests.unit.ingress.test_lifecycle import FakeStream, Graph

MODEL_ID = ModelSpec().id  # the fake graph's engine and tokenizer are keyed by it


class App:
    def __init__(self, tokenizer: Any, model: ModelSpec) -> None:
        test_lifecycle.TOKENIZER[:] = [tokenizer]
        ids = tokenizer.encode("Looked.", add_special_tokens=False)
        deltas = [EngineDelta(token_ids=ids, prompt_tokens=3, num_cached_tokens=0),
                  EngineDelta(token_ids=[], finish_reason="stop")]  # fmt: skip
        self.graph = Graph([])
        self.graph.engine.generate = Method(lambda pre, route: FakeStream(list(deltas)))

        async def render_tokens(*_: Any) -> list[int]:
            return [1, 2, 3]

        ctx = IngressContext(args=ServeArgs(secret_key=signing_key("unit")), catalog=Catalog((model,)),
                             path=self.graph.path, preprocessor=SimpleNamespace(render_tokens=Method(render_tokens)))
        self.app = make_app(IngressParts(ctx=ctx, store=ResponseStore(max_entries=10, max_bytes=10**6, ttl_s=60)))

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://test") as c:
                return await c.post(path, json={"model": MODEL_ID, **body}, headers={"anthropic-version": "2023-06-01"})

        return asyncio.run(go())

    def prompt_text(self) -> str:
        """The user and tool text of the last conversation the Preprocessor was sent."""
        conv = self.graph.preprocessed[-1].conversation
        return "\n".join(t.text() + "".join(getattr(b, "content", "") for b in t.blocks) for t in conv.turns)


@pytest.fixture
def strict(tokenizer) -> App:
    return App(tokenizer, ModelSpec(reasoning_parser=None, tool_call_parser=None))


@pytest.fixture
def lenient(tokenizer) -> App:
    return App(tokenizer, ModelSpec(reasoning_parser=None, tool_call_parser=None, unsupported_media="placeholder"))


MESSAGES = [
    {"role": "user", "content": "look"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                  "content": [{"type": "text", "text": "shot.png"}, a_image()]}]},
]
RESPONSES_INPUT = [
    {"role": "user", "content": "look"},
    {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"role": "user", "content": [{"type": "input_image", "image_url": DATA_URL}]},
]
CHAT_MESSAGES = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                                 {"type": "image_url", "image_url": {"url": DATA_URL}}]},
]


def _anthropic_refusal(r: httpx.Response, path: str) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(f"{path}: ") and "does not read" in body["error"]["message"]


def _openai_refusal(r: httpx.Response, path: str) -> None:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == path
    assert error["message"].startswith(f"{path}: ") and "does not read" in error["message"]


def test_anthropic_messages_and_count_tokens_refuse_in_anthropics_envelope(strict):
    body = {"max_tokens": 64, "messages": MESSAGES}
    _anthropic_refusal(strict.post("/v1/messages", body), "messages.2.content.0.content.1")
    _anthropic_refusal(strict.post("/v1/messages/count_tokens", body), "messages.2.content.0.content.1")
    pdf = {"max_tokens": 64, "messages": [{"role": "user", "content": [a_pdf()]}]}
    _anthropic_refusal(strict.post("/v1/messages", pdf), "messages.0.content.0")
    assert not strict.graph.preprocessed  # refused before anything was rendered


def test_responses_and_chat_refuse_in_openais_envelope(strict):
    _openai_refusal(strict.post("/v1/responses", {"input": RESPONSES_INPUT}), "input[3].content[0]")
    _openai_refusal(strict.post("/v1/chat/completions", {"messages": CHAT_MESSAGES}), "messages[1].content[2]")
    _openai_refusal(strict.post("/tokenize", {"messages": CHAT_MESSAGES}), "messages[1].content[2]")
    pdf = {"type": "input_file", "file_data": f"data:application/pdf;base64,{PDF_B64}"}
    _openai_refusal(strict.post("/v1/responses", {"input": [{"role": "user", "content": [pdf]}]}),
                    "input[0].content[0]")


def test_placeholder_mode_serves_the_turn_and_shows_the_model_the_placeholder(lenient):
    r = lenient.post("/v1/messages", {"max_tokens": 64, "messages": MESSAGES})
    assert r.status_code == 200, r.text
    assert lenient.prompt_text().count(IMAGE_PLACEHOLDER) == 1
    for path, body in (("/v1/responses", {"input": RESPONSES_INPUT}),
                       ("/v1/chat/completions", {"messages": CHAT_MESSAGES})):
        r = lenient.post(path, body)
        assert r.status_code == 200, r.text
        assert lenient.prompt_text().count(IMAGE_PLACEHOLDER) == 1


def test_a_speculative_prefill_carries_the_turns_images():
    """The next turn's prompt starts with this turn's images: its prefill sends them, or vLLM would cache blocks
    no later request of the session matches (it keys the blocks after an image by the image)."""
    from agentserve.ingress.observers.speculative import prefill_request
    from agentserve.protocol import AgentHints

    spec = prefill_request("r", MODEL_ID, [1, 2, 3], 16, AgentHints(), images=(b"png-1", b"png-2"))
    assert spec.engine.images == (b"png-1", b"png-2") and spec.engine.max_tokens == 1
    assert prefill_request("r", MODEL_ID, [1, 2, 3], 16, AgentHints()).engine.images == ()

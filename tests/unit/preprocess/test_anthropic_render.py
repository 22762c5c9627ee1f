"""Anthropic conversations through the real preprocessor (embedded model's template and tokenizer), no Ray."""

from __future__ import annotations

import pytest

from agentserve.apis import anthropic
from agentserve.apis.anthropic import models as anthropic_models
from agentserve.config import ModelSpec
from agentserve.preprocess.preamble import strip_anthropic_preamble
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol.errors import RequestError
from tests.support.keys import signing_key

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))


@pytest.fixture(scope="module")
def pre(model_path):
    return Preprocessor(ModelSpec(), str(model_path), 16)


def conv(body):
    return anthropic.conversation(anthropic.CountTokensRequest.model_validate({"model": "m", **body}), SIGNER, caller="caller")


def test_mid_conversation_system_keeps_earlier_turns_rendered_the_same(pre):
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
               {"role": "user", "content": "and now?"}]
    before = pre.render(conv({"system": "You help.", "messages": history}), add_generation_prompt=False)
    after = pre.render(conv({"system": "You help.", "messages": [
        *history, {"role": "system", "content": "# Environment\nplatform: linux"}]}))
    assert after.text.startswith(before.text)
    assert after.token_ids[: len(before.token_ids)] == before.token_ids
    assert "<|im_start|>system\n# Environment" in after.text[len(before.text):]


def test_is_error_and_block_content_reach_the_prompt(pre):
    text = pre.render(conv({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                      "content": [{"type": "text", "text": "ENOENT: no such file"}]}]},
    ]})).text
    assert "Error: ENOENT: no such file" in text


def test_stripped_billing_header_renders_like_no_header(pre):
    header = "x-anthropic-billing-header: cc_version=2.1.332.abc; cc_entrypoint=cli; cch=1a2b3;"
    with_header, found = strip_anthropic_preamble(conv({"system": [{"type": "text", "text": header},
                                                                   {"type": "text", "text": "You help."}],
                                                        "messages": [{"role": "user", "content": "hi"}]}))
    plain = conv({"system": "You help.", "messages": [{"role": "user", "content": "hi"}]})
    assert found and pre.render(with_header).token_ids == pre.render(plain).token_ids


def test_models_pages():
    spec = ModelSpec(aliases=("a", "b", "c"))
    entries = [(n, spec) for n in spec.names()]
    page = anthropic_models.list_body(entries, limit=2)
    assert [m["id"] for m in page["data"]] == [spec.id, "a"] and page["has_more"]
    rest = anthropic_models.list_body(entries, limit=2, after_id="a")
    assert [m["id"] for m in rest["data"]] == ["b", "c"] and not rest["has_more"]
    before = anthropic_models.list_body(entries, limit=1, before_id="c")
    assert [m["id"] for m in before["data"]] == ["b"] and before["has_more"]
    with pytest.raises(RequestError):
        anthropic_models.list_body(entries, limit=0)

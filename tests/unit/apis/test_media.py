"""Images and documents per the model's declared modalities, in each wire API's decoder (apis/media.py).

A text-only model refuses an image or a PDF anywhere with a 400 naming the block as its API spells the path, or,
configured so, gets a fixed placeholder; a vision model gets ImageBlocks where images may be read. Random placement
(hypothesis) never gives anything but a decoded conversation or that API error.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from agentserve.apis import anthropic, chat_completions, responses
from agentserve.apis.anthropic import errors as anthropic_errors
from agentserve.apis.codex.models import model_info
from agentserve.apis.media import DOCUMENT_PLACEHOLDER, IMAGE_PLACEHOLDER, MediaPolicy
from agentserve.apis.openai_errors import error_body
from agentserve.config import ModelSpec
from agentserve.protocol import ImageBlock, TextBlock, ToolResultBlock
from agentserve.protocol.errors import RequestError
from tests.support.keys import signing_key

TEXT_MODEL = ModelSpec()
TEXT = MediaPolicy.of(TEXT_MODEL)  # the default: refuse
LENIENT = MediaPolicy.of(ModelSpec(unsupported_media="placeholder"))
VISION = MediaPolicy.of(ModelSpec(input_modalities=("text", "image")))

_png = io.BytesIO()
Image.new("RGB", (4, 3), (200, 30, 30)).save(_png, format="PNG")
PNG_B64 = base64.b64encode(_png.getvalue()).decode()
DATA_URL = f"data:image/png;base64,{PNG_B64}"
PDF_B64 = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))
SEALER = responses.Sealer(signing_key("unit"))


def a_image() -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}


def a_pdf() -> dict[str, Any]:
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64}}


def anthropic_decode(messages: list[dict[str, Any]], media: MediaPolicy):
    req = anthropic.MessagesRequest.model_validate({"model": "m", "max_tokens": 64, "messages": messages})
    return anthropic.decode(req, request_id="r", model="m", signer=None, caller="c", media=media)


def responses_decode(items: list[dict[str, Any]], media: MediaPolicy):
    req = responses.ResponsesRequest.model_validate({"model": "m", "input": items})
    return responses.decode(req, request_id="r", model="m", sealer=SEALER, caller="c", media=media)


def chat_decode(messages: list[dict[str, Any]], media: MediaPolicy):
    req = chat_completions.ChatCompletionRequest.model_validate({"model": "m", "messages": messages})
    return chat_completions.decode(req, request_id="r", model="m", media=media)


def refused(call, *args) -> RequestError:
    with pytest.raises(RequestError) as exc:
        call(*args)
    assert exc.value.kind == "invalid_request" and exc.value.status == 400
    return exc.value


# -- the examples a user would try ------------------------------------------------------------------------------

CLAUDE_CODE = [  # a screenshot in the prompt, then one in a Read tool's result (as Claude Code sends them)
    {"role": "user", "content": "What is on my screen?"},
    {"role": "assistant", "content": "Let me look."},
    {"role": "user", "content": [{"type": "text", "text": "this one"}, a_image()]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"p": "a.png"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                  "content": [{"type": "text", "text": "a.png"}, a_image()]}]},
]


def test_anthropic_names_the_image_block_in_a_message_and_in_a_tool_result():
    err = refused(anthropic_decode, CLAUDE_CODE, TEXT)
    assert err.param == "messages.2.content.1" and err.message.startswith("messages.2.content.1: ")
    assert "does not read images" in err.message and TEXT_MODEL.id in err.message
    # in Anthropic's envelope the path leads the message (Anthropic names no param)
    assert anthropic_errors.error_body(err, "req_1") == {
        "type": "error", "error": {"type": "invalid_request_error", "message": err.message}, "request_id": "req_1"}
    without_first = CLAUDE_CODE[:2] + [{"role": "user", "content": "this one"}] + CLAUDE_CODE[3:]
    err = refused(anthropic_decode, without_first, TEXT)
    assert err.param == "messages.4.content.0.content.1"


def test_anthropic_pdf_documents_follow_the_same_policy_and_text_documents_are_text():
    messages = [{"role": "user", "content": [{"type": "text", "text": "summarise"}, a_pdf()]}]
    err = refused(anthropic_decode, messages, TEXT)
    assert err.param == "messages.0.content.1" and "application/pdf" in err.message
    in_result = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [a_pdf()]}]},
    ]
    assert refused(anthropic_decode, in_result, TEXT).param == "messages.2.content.0.content.0"
    assert refused(anthropic_decode, in_result, VISION).param == "messages.2.content.0.content.0"  # no one reads PDFs
    gen = anthropic_decode(messages, LENIENT)
    assert gen.conversation.turns[0].text() == f"summarise\n{DOCUMENT_PLACEHOLDER}"
    text_doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "the text"}}
    assert anthropic_decode([{"role": "user", "content": [text_doc]}], TEXT).conversation.turns[0].text() == "the text"


def test_placeholders_are_the_same_text_every_time():
    first = anthropic_decode(CLAUDE_CODE, LENIENT).conversation
    again = anthropic_decode([dict(m) for m in CLAUDE_CODE], LENIENT).conversation
    assert first == again
    assert first.turns[2].text() == f"this one\n{IMAGE_PLACEHOLDER}"
    assert first.turns[4].blocks == (ToolResultBlock(tool_call_id="toolu_1", content=f"a.png\n{IMAGE_PLACEHOLDER}"),)
    assert not any(isinstance(b, ImageBlock) for t in first.turns for b in t.blocks)


def test_a_vision_model_gets_images_in_place_and_after_the_result_they_came_in():
    conv = anthropic_decode(CLAUDE_CODE, VISION).conversation
    assert conv.turns[2].blocks == (TextBlock(text="this one"), ImageBlock(url=DATA_URL))
    assert conv.turns[4].blocks == (ToolResultBlock(tool_call_id="toolu_1", content="a.png"), ImageBlock(url=DATA_URL))
    remote = [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}]
    err = refused(anthropic_decode, remote, VISION)
    assert err.param == "messages.0.content.0" and "not fetched" in err.message
    # an image whose source holds none (a Files API id inside a tool result): refused by a vision model, a
    # placeholder where placeholders are asked for
    by_id = [CLAUDE_CODE[3], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}]}]
    assert refused(anthropic_decode, by_id, VISION).param == "messages.1.content.0.content.0"
    assert anthropic_decode(by_id, LENIENT).conversation.turns[1].blocks[0].content == IMAGE_PLACEHOLDER


def test_responses_names_input_content_and_tool_output_parts():
    image = {"type": "input_image", "image_url": DATA_URL}
    items = [
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}, image]},
    ]
    err = refused(responses_decode, items, TEXT)
    assert err.param == "input[3].output[1]"
    assert error_body(err)["error"]["param"] == "input[3].output[1]"
    items[3] = {"role": "user", "content": [image, {"type": "input_text", "text": "and this"}]}
    assert refused(responses_decode, items, TEXT).param == "input[3].content[0]"
    pdf = {"type": "input_file", "filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"}
    err = refused(responses_decode, [{"role": "user", "content": [pdf]}], TEXT)
    assert err.param == "input[0].content[0]" and "application/pdf" in err.message
    turns = responses_decode(items, LENIENT).request.conversation.turns
    assert turns[-1].blocks == (TextBlock(text=f"{IMAGE_PLACEHOLDER}and this"),)
    turns = responses_decode(items, VISION).request.conversation.turns
    assert turns[-1].blocks == (ImageBlock(url=DATA_URL), TextBlock(text="and this"))
    system_image = [{"role": "developer", "content": [image]}, {"role": "user", "content": "hi"}]
    assert refused(responses_decode, system_image, VISION).param == "input[0].content[0]"


def test_chat_names_message_content_parts():
    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, image]},
    ]
    err = refused(chat_decode, messages, TEXT)
    assert err.param == "messages[1].content[2]" and error_body(err)["error"]["param"] == "messages[1].content[2]"
    pdf = {"type": "file", "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"}}
    assert refused(chat_decode, [{"role": "user", "content": [pdf]}], TEXT).param == "messages[0].content[0]"
    assert chat_decode(messages, LENIENT).conversation.turns[1].text() == f"ab{IMAGE_PLACEHOLDER}"
    tool = [{"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "shot", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "done"}, image]}]
    assert refused(chat_decode, tool, TEXT).param == "messages[2].content[1]"
    assert chat_decode(tool, VISION).conversation.turns[2].blocks == (
        ToolResultBlock(tool_call_id="c", content="done"), ImageBlock(url=DATA_URL))
    remote = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]
    assert refused(chat_decode, remote, VISION).param == "messages[0].content[0]"


def test_a_session_that_switches_model_is_decoded_under_the_new_models_policy():
    """The Messages session memo reuses a session's decoded turns only under the policy they were decoded under."""
    from agentserve.apis.anthropic.decode import system_turns
    from agentserve.apis.anthropic.session_memo import MessageMemo

    memo = MessageMemo(1 << 20)

    def through(messages: list[dict[str, Any]], media: MediaPolicy):
        validated = memo.validate({"model": "m", "max_tokens": 64, "messages": messages}, ("c", "s1"))
        gen = anthropic.decode(validated.request, request_id="r", model="m", signer=None, caller="c",
                               known=validated.known, media=media)
        memo.remember(("c", "s1"), validated, gen.conversation, system_turns(validated.request), (b"", b""), media)
        return gen.conversation

    history = CLAUDE_CODE[:3]
    assert IMAGE_PLACEHOLDER in through(history, LENIENT).turns[2].text()
    more = [*history, {"role": "assistant", "content": "A terminal."}, {"role": "user", "content": "And now?"}]
    assert refused(through, more, TEXT).param == "messages.2.content.1"  # not the placeholder decoded before
    assert through(more, VISION).turns[2].blocks[-1] == ImageBlock(url=DATA_URL)
    assert IMAGE_PLACEHOLDER in through([*more, {"role": "assistant", "content": "ok"},
                                         {"role": "user", "content": "bye"}], LENIENT).turns[2].text()


def test_the_codex_profile_reports_the_models_modalities():
    assert model_info("m", ModelSpec())["input_modalities"] == ["text"]
    assert model_info("m", ModelSpec(input_modalities=("text", "image")))["input_modalities"] == ["text", "image"]
    with pytest.raises(ValueError, match="no longer its profile's"):
        ModelSpec.model_validate({"profile": {"input_modalities": ["text", "image"]}})
    with pytest.raises(ValueError, match='include "text"'):
        ModelSpec(input_modalities=("image",))
    with pytest.raises(ValueError):
        ModelSpec.model_validate({"unsupported_media": "drop"})


# -- random placement ---------------------------------------------------------------------------------------------

MEDIA_TYPES = {"image", "document", "input_image", "input_file", "image_url", "file"}
POLICIES = st.sampled_from([TEXT, LENIENT, VISION])


def _at(body: Any, path: str) -> Any:
    """The JSON value a path names: `messages.4.content.0` (Anthropic) or `input[3].content[0]` (OpenAI)."""
    for key, index in re.findall(r"([A-Za-z_]+)|(\d+)", path):
        body = body[key] if key else body[int(index)]
    return body


def _check(body: dict[str, Any], decode: Any, media: MediaPolicy, placed: int, readable: int) -> None:
    """Decoded, or refused as invalid_request naming one of the placed blocks; never anything else."""
    try:
        conv = decode(media)
    except RequestError as err:
        assert err.kind == "invalid_request" and err.param is not None, err
        block = _at(body, err.param)
        assert isinstance(block, dict) and block.get("type") in MEDIA_TYPES, (err.param, block)
        return
    images = sum(isinstance(b, ImageBlock) for t in conv.turns for b in t.blocks)
    assert images == (readable if media.images else 0)
    text = "".join(t.text() + "".join(b.content for b in t.blocks if isinstance(b, ToolResultBlock))
                   for t in conv.turns)
    if media is LENIENT:
        assert text.count(IMAGE_PLACEHOLDER) + text.count(DOCUMENT_PLACEHOLDER) == placed


@st.composite
def anthropic_bodies(draw):
    """A Claude Code-shaped history with images and PDFs dropped into user content and tool results."""
    messages: list[dict[str, Any]] = []
    placed = readable = 0
    for i in range(draw(st.integers(1, 4))):
        result = {"type": "tool_result", "tool_use_id": f"t{i - 1}", "content": [{"type": "text", "text": "out"}]}
        content: list[dict[str, Any]] = [result] if i else []
        content.append({"type": "text", "text": f"u{i}"})
        for _ in range(draw(st.integers(0, 3))):
            block = draw(st.sampled_from([a_image(), a_pdf()]))
            target = result["content"] if i and draw(st.booleans()) else content
            target.insert(draw(st.integers(0, len(target))), block)
            placed += 1
            readable += block["type"] == "image"
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read",
                                                           "input": {}}]})
    return messages[:-1], placed, readable


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anthropic_bodies(), POLICIES)
def test_anthropic_random_placement(case, media):
    messages, placed, readable = case
    body = {"messages": messages}
    _check(body, lambda m: anthropic_decode(messages, m).conversation, media, placed, readable)


@st.composite
def responses_bodies(draw):
    image = {"type": "input_image", "image_url": DATA_URL}
    pdf = {"type": "input_file", "file_data": f"data:application/pdf;base64,{PDF_B64}"}
    items: list[dict[str, Any]] = []
    placed = readable = 0
    for i in range(draw(st.integers(1, 4))):
        role = draw(st.sampled_from(["user", "user", "developer"]))
        content: list[dict[str, Any]] = [{"type": "input_text", "text": f"u{i}"}]
        output: list[dict[str, Any]] = [{"type": "input_text", "text": "out"}]
        for _ in range(draw(st.integers(0, 3))):
            part = draw(st.sampled_from([image, pdf]))
            target = output if draw(st.booleans()) else content
            target.insert(draw(st.integers(0, len(target))), dict(part))
            placed += 1
            readable += part["type"] == "input_image" and (target is output or role == "user")
        items.append({"role": role, "content": content})
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": output})
    return items, placed, readable


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses_bodies(), POLICIES)
def test_responses_random_placement(case, media):
    items, placed, readable = case
    _check({"input": items}, lambda m: responses_decode(items, m).request.conversation, media, placed, readable)


@st.composite
def chat_bodies(draw):
    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    pdf = {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF_B64}"}}
    messages: list[dict[str, Any]] = []
    placed = readable = 0
    for i in range(draw(st.integers(1, 4))):
        role = draw(st.sampled_from(["user", "tool", "system", "assistant"]))
        content: list[dict[str, Any]] = [{"type": "text", "text": f"m{i}"}]
        for _ in range(draw(st.integers(0, 3))):
            part = draw(st.sampled_from([image, pdf]))
            content.insert(draw(st.integers(0, len(content))), dict(part))
            placed += 1
            readable += part["type"] == "image_url" and role in ("user", "tool")
        messages.append({"role": role, "content": content, **({"tool_call_id": f"c{i}"} if role == "tool" else {})})
    return messages, placed, readable


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat_bodies(), POLICIES)
def test_chat_random_placement(case, media):
    messages, placed, readable = case
    _check({"messages": messages}, lambda m: chat_decode(messages, m).conversation, media, placed, readable)

"""Images through the Preprocessor: a vision model's image placeholder comes from its template (or its ModelSpec),
its images reach the engine request decoded from their data URLs in prompt order; a text-only model's placeholder
text renders the same prompt every turn, so a session's prompt stays a cached prefix."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from agentserve.apis import anthropic
from agentserve.apis.media import IMAGE_PLACEHOLDER, MediaPolicy
from agentserve.config import ModelSpec
from agentserve.preprocess.images import image_bytes, probe_placeholder
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.preprocess.template_render import BudgetedTemplate
from agentserve.protocol import GenerationRequest
from agentserve.protocol.errors import RequestError

# Qwen2-VL's and Gemma 3's chat templates, the parts that render a user message's content list.
QWEN2_VL = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GEMMA3 = (
    "{{ bos_token }}{%- for message in messages -%}<start_of_turn>{{ message['role'] }}\n"
    "{%- for item in message['content'] -%}{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}<end_of_turn>\n"
    "{%- endfor -%}"
)
AS_TEXT = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"  # a text template: a repr


def _render(source: str):
    template = BudgetedTemplate(source, {"bos_token": "<bos>"})
    return lambda messages: template.render(messages, add_generation_prompt=False)


@pytest.mark.parametrize("source, expected", [
    (QWEN2_VL, "<|vision_start|><|image_pad|><|vision_end|>"),
    (GEMMA3, "<start_of_image>"),
    (AS_TEXT, None),
    ("{{ raise_exception('no lists') }}", None),
])
def test_the_placeholder_is_what_the_template_writes_for_an_image_part(source, expected):
    assert probe_placeholder(_render(source)) == expected


def _png(color: tuple[int, int, int], size: tuple[int, int] = (4, 3)) -> tuple[bytes, dict]:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    data = buf.getvalue()
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(data).decode()}}
    return data, block


def _request(spec: ModelSpec, messages: list[dict]) -> GenerationRequest:
    req = anthropic.MessagesRequest.model_validate({"model": "m", "max_tokens": 16, "messages": messages})
    return anthropic.decode(req, request_id="r", model=spec.id, signer=None, caller="c",
                            media=MediaPolicy.of(spec))


def test_a_vision_model_gets_its_images_in_the_order_of_their_placeholders(model_path):
    # SmolLM2's template has no image slot: the ModelSpec names the placeholder (a real vision template's is probed)
    spec = ModelSpec(replay_family="agentserve_default", input_modalities=("text", "image"),
                     image_placeholder="<image>")
    pre = Preprocessor(spec, str(model_path), 16)
    (red, red_block), (green, green_block), (blue, blue_block) = (
        _png((255, 0, 0)), _png((0, 255, 0)), _png((0, 0, 255), (5, 5)))
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, red_block]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        # an image before a tool result: the result (with its own image) renders first, then the text after it
        {"role": "user", "content": [blue_block, {"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "shot.png"}, green_block]}]},
    ]
    out = pre.preprocess(_request(spec, messages))
    assert out.engine.images == (red, green, blue)
    text = pre.render(_request(spec, messages).conversation).text
    assert text.count("<image>") == 3
    assert text.index("shot.png<image>") < text.rindex("<image>")  # green's placeholder, then blue's
    # a text-only model never gets here with an image (its decoder refused it): nothing is sent to the engine
    assert pre.preprocess(_request(spec, [{"role": "user", "content": "hi"}])).engine.images == ()


def test_a_vision_model_whose_template_has_no_image_slot_is_refused_at_start(model_path):
    with pytest.raises(ValueError, match="image_placeholder"):
        Preprocessor(ModelSpec(input_modalities=("text", "image")), str(model_path), 16)


def test_an_image_that_cannot_be_decoded_is_a_400_not_an_engine_failure():
    assert image_bytes("data:image/png;base64," + base64.b64encode(_png((1, 2, 3))[0]).decode(), 0)
    for url in ("data:image/png;base64,!!!", "data:image/png;base64," + base64.b64encode(b"not an image").decode(),
                "https://example.com/a.png"):
        with pytest.raises(RequestError) as exc:
            image_bytes(url, 1)
        assert exc.value.status == 400 and "image 2" in exc.value.message


def test_placeholder_mode_renders_one_prompt_for_one_conversation_and_the_next_turn_extends_it(model_path):
    spec = ModelSpec(replay_family="agentserve_default", unsupported_media="placeholder")
    pre = Preprocessor(spec, str(model_path), 16)
    _, image = _png((9, 9, 9))
    turn = [{"role": "user", "content": [{"type": "text", "text": "What is on my screen?"}, image]}]
    first = pre.render(_request(spec, turn).conversation)
    again = pre.render(_request(spec, [dict(m) for m in turn]).conversation)
    assert first.text == again.text and list(first.token_ids) == list(again.token_ids)
    assert IMAGE_PLACEHOLDER in first.text and first.images == ()
    later = turn + [{"role": "assistant", "content": "A terminal."},
                    {"role": "user", "content": [{"type": "text", "text": "And now?"}, image]}]
    history = pre.render(_request(spec, turn).conversation, add_generation_prompt=False)
    assert pre.render(_request(spec, later).conversation).text.startswith(history.text)

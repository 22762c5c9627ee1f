"""The thinking switch is found by rendering each template, whatever it is called, and reasoning effort / budgets
reach the engine's thinking budget."""

from __future__ import annotations

import pytest

from agentserve.preprocess.thinking_switch import probe
from agentserve.protocol import Conversation, GenerationRequest, SamplingParams, TextBlock, Turn

CONV = Conversation(turns=(Turn(role="user", blocks=(TextBlock(text="Hi"),)),))


def _req(**kw) -> GenerationRequest:
    return GenerationRequest(request_id="r", model="m", conversation=CONV, **kw)


@pytest.mark.parametrize(
    "template, parser, family, name",
    [
        ("qwen3", "qwen3", None, "enable_thinking"),
        ("glm", "glm45", None, "enable_thinking"),
        ("nemotron", "nemotron3", None, "enable_thinking"),
        ("deepseek_v31", "deepseek_r1", None, "thinking"),
        ("agentserve_default", "qwen3", "agentserve_default", None),  # the embedded template has no switch
    ],
)
def test_switch_found_by_rendering(make_preprocessor, template, parser, family, name):
    pre = make_preprocessor(template, reasoning_parser=parser, family=family)
    assert (pre._switch.name if pre._switch else None) == name


def test_deepseek_v31_thinking_follows_the_client(make_preprocessor):
    pre = make_preprocessor("deepseek_v31", reasoning_parser="deepseek_r1")
    on = pre.preprocess(_req(thinking=True))
    off = pre.preprocess(_req(thinking=False))
    default = pre.preprocess(_req())
    text = lambda p: pre._tok.decode(p.engine.token_ids)  # noqa: E731
    assert text(on).endswith("<think>") and on.engine.reasoning_started
    assert text(off).endswith("</think>") and not off.engine.reasoning_started and off.engine.sampling.thinking_budget == 0
    assert text(default).endswith("<think>")  # thinking stays on where the model has it


def test_a_reversed_switch_is_found_with_its_polarity():
    src = "{{ messages[0]['content'] }}<assistant>{% if disable_thinking %}<think></think>{% endif %}"
    import jinja2

    tpl = jinja2.Environment().from_string(src)
    switch = probe(lambda kw: tpl.render(messages=[{"content": "Hi"}], **kw), {"disable_thinking", "messages"},
                   open_marker="<think>", close_marker="</think>")
    assert switch is not None and switch.kwargs(True) == {"disable_thinking": False}


def test_effort_maps_to_the_model_budget_and_none_turns_thinking_off(make_preprocessor):
    pre = make_preprocessor("qwen3", reasoning_parser="qwen3")
    assert pre.preprocess(_req(reasoning_effort="low")).engine.sampling.thinking_budget == 512
    assert pre.preprocess(_req(reasoning_effort="high")).engine.sampling.thinking_budget == 8192
    assert pre.preprocess(_req(reasoning_effort="max")).engine.sampling.thinking_budget is None  # not in the map
    none = pre.preprocess(_req(reasoning_effort="none"))
    assert none.engine.sampling.thinking_budget == 0 and "<think>\n\n</think>" in pre._tok.decode(none.engine.token_ids)
    # A client's explicit budget (Anthropic budget_tokens) wins over the effort map.
    explicit = pre.preprocess(_req(reasoning_effort="low", sampling=SamplingParams(thinking_budget=2000)))
    assert explicit.engine.sampling.thinking_budget == 2000


def test_models_without_reasoning_get_no_budget(make_preprocessor):
    pre = make_preprocessor("qwen3", reasoning_parser=None)
    assert pre.preprocess(_req(sampling=SamplingParams(thinking_budget=2000))).engine.sampling.thinking_budget is None

"""The budgeted chat-template render: the same text as transformers' `apply_chat_template` for real templates, and
a clean 400 (never a stuck worker) for a template that loops, writes or multiplies past its budget."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.preprocess.template_render import BudgetedTemplate, OutputTooLong, RenderBudget, RenderBudgetExceeded
from agentserve.protocol.errors import RequestError

FAMILY_TEMPLATES = sorted((Path(__file__).parent / "replay" / "templates").glob("*.jinja"))
LOOP = "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}"
SILENT_LOOP = "{% for a in range(100000) %}{% for b in range(100000) %}{% if messages.x %}{% endif %}{% endfor %}{% endfor %}"


def _messages(texts: list[str]) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": "Be brief."}]
    for i, t in enumerate(texts):
        if i % 3 == 1:
            out.append({"role": "assistant", "content": t, "reasoning_content": "thought " + t,
                        "tool_calls": [{"id": f"c{i}", "type": "function",
                                        "function": {"name": "ls", "arguments": '{"path": "' + t[:5] + '"}'}}]})
            out.append({"role": "tool", "tool_call_id": f"c{i}", "content": t})
        else:
            out.append({"role": "user", "content": t})
    return out


TOOLS = [{"type": "function", "function": {"name": "ls", "description": "list <files> & 'dirs'",
                                            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(max_size=60), min_size=1, max_size=6), gen=st.booleans(), with_tools=st.booleans())
def test_renders_what_transformers_renders_for_the_embedded_template(tokenizer, texts, gen, with_tools):
    template = BudgetedTemplate(tokenizer.chat_template, tokenizer.special_tokens_map)
    messages = _messages(texts)
    tools = TOOLS if with_tools else None
    want = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False)
    assert template.render(messages, tools=tools, add_generation_prompt=gen) == want


@pytest.mark.parametrize("path", FAMILY_TEMPLATES, ids=lambda p: p.stem)
def test_renders_what_transformers_renders_for_every_family_template(tokenizer, path):
    from transformers.utils.chat_template_utils import render_jinja_template

    source = path.read_text()
    special = {"bos_token": "<s>", "eos_token": "</s>"}
    template = BudgetedTemplate(source, special)
    texts = ["list the files", "ok", "and now?", "done", "thanks"]
    as_text = _messages(texts)
    as_mapping = _messages(texts)
    for m in as_mapping:
        for call in m.get("tool_calls", ()):
            call["function"]["arguments"] = {"path": "ok"}
    compared = 0
    for messages in (as_text, as_mapping):
        for kwargs in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
            for gen in (True, False):
                try:
                    want = render_jinja_template([messages], tools=TOOLS, chat_template=source,
                                                 add_generation_prompt=gen, **special, **kwargs)[0][0]
                except Exception as exc:  # noqa: BLE001 - the template refuses this shape: so must ours
                    with pytest.raises(type(exc)):
                        template.render(messages, tools=TOOLS, add_generation_prompt=gen, **kwargs)
                    continue
                assert template.render(messages, tools=TOOLS, add_generation_prompt=gen, **kwargs) == want, path.stem
                compared += 1
    assert compared >= 6


def test_a_template_that_writes_forever_stops_at_its_output_cap():
    template = BudgetedTemplate(LOOP, {}, RenderBudget(deadline_s=5.0, max_chars=100_000))
    started = time.monotonic()
    with pytest.raises(OutputTooLong):
        template.render([{"role": "user", "content": "hi"}])
    assert time.monotonic() - started < 2.0


def test_a_template_that_loops_without_writing_stops_at_its_deadline():
    template = BudgetedTemplate(SILENT_LOOP, {}, RenderBudget(deadline_s=0.3))
    started = time.monotonic()
    with pytest.raises(RenderBudgetExceeded) as stopped:
        template.render([{"role": "user", "content": "hi"}])
    assert time.monotonic() - started < 1.0
    assert stopped.value.status == 400 and "0.3 CPU seconds" in stopped.value.message


def test_a_render_kept_waiting_by_a_loaded_machine_is_not_refused():
    """The budget is the render's CPU time: time it spends off the CPU (here a sleep inside the render, as when other
    threads hold the GIL or the cores are busy) does not count, so a legitimate long prompt is not a 400 under load."""
    template = BudgetedTemplate("{{ wait() }}{% for m in messages %}{{ m.content }}{% endfor %}", {},
                                RenderBudget(deadline_s=0.2))
    messages = [{"role": "user", "content": str(i)} for i in range(50)]
    started = time.monotonic()
    assert template.render(messages, wait=lambda: time.sleep(0.5) or "") == "".join(str(i) for i in range(50))
    assert time.monotonic() - started >= 0.5  # the wall clock did pass the deadline


@pytest.mark.parametrize("expr", ["'x' * 10**10", "10**10 * 'x'", "[1] * 10**10"])
def test_one_expression_cannot_build_a_huge_value(expr):
    template = BudgetedTemplate("{{ " + expr + " }}", {}, RenderBudget(max_chars=1_000_000))
    started = time.monotonic()
    with pytest.raises(RenderBudgetExceeded):
        template.render([])
    assert time.monotonic() - started < 0.5


def test_budget_errors_survive_the_ray_hop():
    import pickle

    for err in (RenderBudgetExceeded("too slow"), OutputTooLong(12)):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and isinstance(back, RequestError) and back.status == 400


def test_renders_in_other_threads_keep_their_own_budget():
    """A render on one thread never spends another's budget (the meter is per thread)."""
    import threading

    slow = BudgetedTemplate(SILENT_LOOP, {}, RenderBudget(deadline_s=0.5))
    fast = BudgetedTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", {}, RenderBudget(deadline_s=0.5))
    errors: list[BaseException] = []

    def spin() -> None:
        try:
            slow.render([{"role": "user", "content": "hi"}])
        except RenderBudgetExceeded as exc:
            errors.append(exc)

    t = threading.Thread(target=spin)
    t.start()
    for _ in range(200):
        assert fast.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "ab"
    t.join(5)
    assert len(errors) == 1

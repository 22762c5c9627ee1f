"""Placement of what harnesses send that templates treat differently, decided by probing each family's template
(preprocess/placement.py), checked through the real Preprocessor on Claude Code- and Codex-shaped requests.

- Mid-conversation system messages (Claude Code) and developer items after `instructions` (Codex) never make a
  template raise, always reach the prompt, and never change how earlier turns render in later turns.
- `<system-reminder>` text beside `tool_result` blocks never makes a template drop the current agent loop's
  reasoning.
- A template that still raises is a 400 `invalid_request` carrying the template's own message.

Besides the family test templates, one real template ships in the installed vLLM package (deepseek_vl2): it drops
a system message after the first, or raises "Conversation roles must alternate" when one breaks user/assistant
alternation.
"""

from __future__ import annotations

import copy
from importlib.util import find_spec
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.apis.anthropic.decode import decode as anthropic_decode, sign_thinking
from agentserve.apis.anthropic.schema import MessagesRequest
from agentserve.apis.anthropic.signature import ThinkingSigner
from agentserve.apis.responses.decode import decode as responses_decode
from agentserve.apis.responses.schema import ResponsesRequest
from agentserve.apis.responses.sealing import Sealer
from agentserve.preprocess.placement import Placement, probe_placement
from agentserve.protocol.errors import RequestError
from agentserve.ingress.app import ROUTE_ENVELOPES
from tests.support.keys import signing_key

# vLLM's bundled template, found without importing vllm (that import alone costs every test worker ~10 s of torch)
VL2 = Path(find_spec("vllm").submodule_search_locations[0]) / "transformers_utils" / "chat_templates" / "template_deepseek_vl2.jinja"
SIGNER = ThinkingSigner(signing_key("unit"))
SEALER = Sealer(signing_key("unit"))
CALLER = "caller"

# (test template, reasoning parser, replay family) as the per-family prefix tests use them
FAMILIES = [
    ("qwen3", "qwen3", None),
    ("deepseek_r1", "deepseek_r1", None),
    ("glm", "glm45", None),
    ("kimi", "kimi", None),
    ("minimax", "minimax_append_think", None),
    ("mistral", "mistral", None),
    ("nemotron", "nemotron3", None),
    ("nemotron_v2", "nemotron_deci", None),
    ("gpt_oss", "gpt_oss", None),
    ("gemma4", "gemma4", None),
    ("seed_oss", "seed_oss", None),
    ("agentserve_default", "qwen3", "agentserve_default"),
    ("deepseek_vl2", None, None),
]
MID = "<system-reminder>The user switched to plan mode.</system-reminder>"
REMINDER = "<system-reminder>Todo list is empty.</system-reminder>"
REASONING = "The test imports parse from a.py, so read a.py first."


@pytest.fixture(scope="module")
def preprocessor(base_tokenizer):
    """A real Preprocessor over a template (family test templates, or the one vLLM ships for deepseek_vl2)."""
    from agentserve.config import ModelSpec
    from agentserve.preprocess import preprocessor as pp

    from .conftest import template_source

    made: dict = {}

    def make(template: str, parser: str | None, family: str | None):
        if template in made:
            return made[template]
        tok = copy.deepcopy(base_tokenizer)
        tok.chat_template = VL2.read_text() if template == "deepseek_vl2" else template_source(template)
        real = pp.load_tokenizer
        pp.load_tokenizer = lambda _path: tok
        try:
            made[template] = pp.Preprocessor(
                ModelSpec(reasoning_parser=parser, tool_call_parser="hermes", replay_family=family), "x", block_size=16
            )
        finally:
            pp.load_tokenizer = real
        return made[template]

    return make


def claude_code(messages: list[dict], **extra) -> object:
    body = {"model": "m", "max_tokens": 4096, "system": [{"type": "text", "text": "You are Claude Code."}],
            "messages": sign_thinking(messages, SIGNER, caller=CALLER), **extra}  # fmt: skip
    req = MessagesRequest.model_validate(body)
    return anthropic_decode(req, request_id="r", model="m", signer=SIGNER, caller=CALLER).conversation


def codex(items: list[dict]) -> object:
    req = ResponsesRequest.model_validate({"model": "m", "instructions": "You are Codex.", "input": items})
    return responses_decode(req, request_id="r", model="m", sealer=SEALER, caller=CALLER).request.conversation


def text(pre, conversation, generation: bool = True) -> str:
    return pre.render(conversation, add_generation_prompt=generation).text


@pytest.mark.parametrize("template, parser, family", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_mid_conversation_system_message_keeps_earlier_turns(preprocessor, template, parser, family):
    pre = preprocessor(template, parser, family)
    turn_n = [{"role": "user", "content": "Fix the failing test."}, {"role": "system", "content": [{"type": "text", "text": MID}]}]
    turn_n1 = turn_n + [
        {"role": "assistant", "content": "Looking at it now."},
        {"role": "user", "content": "Also run the linter."},
        {"role": "system", "content": [{"type": "text", "text": "<system-reminder>Second reminder.</system-reminder>"}]},
    ]
    earlier = text(pre, claude_code(turn_n), generation=False)
    later = text(pre, claude_code(turn_n1))  # no exception: the template takes it where placed
    assert MID in earlier and "Second reminder." in later
    # Turn N (and the system message in it) renders the same inside turn N+1: the prefix holds.
    assert later.startswith(earlier), (pre._placement, earlier[-300:], later[: len(earlier) + 100][-400:])


@pytest.mark.parametrize("template, parser, family", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_developer_items_after_instructions_reach_the_prompt(preprocessor, template, parser, family):
    pre = preprocessor(template, parser, family)
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: workspace-write."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
    ]
    rendered = text(pre, codex(items))
    assert "You are Codex." in rendered and "Sandbox: workspace-write." in rendered and "list files" in rendered
    assert rendered.index("Sandbox: workspace-write.") < rendered.index("list files")


def _loop(reminder_turns: int) -> list[dict]:
    """Claude Code's agent loop: thinking + tool_use, then tool_result with a <system-reminder> beside it."""
    messages: list[dict] = [{"role": "user", "content": "Fix the failing test in a.py."}]
    for i in range(reminder_turns):
        messages.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"{REASONING} (step {i})", "signature": ""},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"path": "a.py"}},
        ]})  # fmt: skip
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"def parse(s): ... ({i})"},
            {"type": "text", "text": REMINDER},
        ]})  # fmt: skip
    return messages


READ_TOOL = [{"name": "Read", "description": "Read a file", "input_schema": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]  # fmt: skip


@pytest.mark.parametrize("template, parser, family", [f for f in FAMILIES if f[0] in ("qwen3", "minimax")])
def test_text_beside_tool_results_keeps_the_loops_reasoning(preprocessor, template, parser, family):
    """Templates that keep reasoning only after the last user query: the reminder is not that query."""
    pre = preprocessor(template, parser, family)
    conv = claude_code(_loop(2), tools=READ_TOOL, thinking={"type": "enabled", "budget_tokens": 2048})
    rendered = text(pre, conv)
    assert f"{REASONING} (step 0)" in rendered and f"{REASONING} (step 1)" in rendered
    assert rendered.count("Todo list is empty.") == 2
    # The same turns with the reminder as a user message of its own: the loop's reasoning is gone.
    naive = pre._probe_text(conv, Placement(system_in_place=pre._placement.system_in_place), True)
    assert f"{REASONING} (step 0)" not in naive


def test_probe_falls_back_where_the_template_drops_or_rejects_a_later_system_message(preprocessor):
    pre = preprocessor("deepseek_vl2", None, None)
    assert pre._placement.system_in_place is False
    in_place = Placement(system_in_place=True)
    system = {"role": "system", "content": [{"type": "text", "text": MID}]}
    after_user = claude_code([{"role": "user", "content": "hi"}, system])
    assert MID not in pre._probe_text(after_user, in_place, True)  # in place, this template drops it silently
    after_assistant = claude_code([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
                                   system, {"role": "user", "content": "go on"}])  # fmt: skip
    with pytest.raises(Exception, match="Conversation roles must alternate"):  # in place, it raises
        pre._probe_text(after_assistant, in_place, True)
    assert MID in text(pre, after_user) and MID in text(pre, after_assistant)


def test_tool_results_reach_a_template_without_a_tool_role(preprocessor):
    pre = preprocessor("deepseek_vl2", None, None)
    assert pre._placement.tool_role is False
    conv = claude_code(_loop(2), tools=READ_TOOL)
    with pytest.raises(Exception, match="Conversation roles must alternate"):  # `tool` messages: refused
        pre._probe_text(conv, Placement(system_in_place=False), True)
    rendered = text(pre, conv)  # one user message per tool turn, the reminder in it
    assert "def parse(s): ... (0)" in rendered and "def parse(s): ... (1)" in rendered
    assert rendered.count("Todo list is empty.") == 2


def test_a_template_that_still_raises_is_a_400_with_its_message(preprocessor):
    pre = preprocessor("deepseek_vl2", None, None)
    items = [  # a tool output, then the user's next message: two user turns in a row for this template
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]},
    ]
    with pytest.raises(RequestError) as caught:
        text(pre, codex([{"type": "message", "role": "user", "content": "list files"}, *items]))
    err = caught.value
    assert err.status == 400 and "Conversation roles must alternate" in err.message
    resp = ROUTE_ENVELOPES.response("/v1/messages", err)  # Anthropic's envelope through the Messages API
    assert resp.status_code == 400
    assert b'"type":"invalid_request_error"' in resp.body and b"Conversation roles must alternate" in resp.body
    resp = ROUTE_ENVELOPES.response("/v1/responses", err)  # OpenAI's through the Responses API
    assert resp.status_code == 400 and b"Conversation roles must alternate" in resp.body


def test_probe_is_decided_by_rendering_not_by_the_source():
    """The same template source behaves as its renderer does: a renderer that raises on later system messages and
    drops reasoning before the last user message gets the merged, in-result placement."""

    def render(conv, placement, generation):
        from agentserve.preprocess.render import plan_messages
        from agentserve.preprocess.replay import POLICIES
        from agentserve.preprocess.template_caps import inspect_template

        messages = plan_messages(conv, POLICIES["qwen3"], inspect_template("reasoning_content"), placement).messages
        if any(m["role"] == "system" for m in messages[1:]):
            raise ValueError("System message must be at the beginning.")
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        return "\n".join(
            f"{m['role']}: {m.get('reasoning_content', '') if i > last_user else ''}{m['content']}"
            for i, m in enumerate(messages)
        )

    assert probe_placement(render) == Placement(system_in_place=False, text_with_results=True, tool_role=True)


# Request boundaries in a session: each request ends where the model's next assistant turn begins.
_turn_shapes = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 1)),  # system messages after the user turn / after the assistant
    min_size=1, max_size=4,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=_turn_shapes)
@pytest.mark.parametrize("template, parser, family", [f for f in FAMILIES if f[0] in
                         ("qwen3", "deepseek_r1", "nemotron", "minimax", "deepseek_vl2", "agentserve_default")])  # fmt: skip
def test_no_later_request_rewrites_an_earlier_one(preprocessor, template, parser, family, shape):
    """However system messages fall between user and assistant turns, each request's prompt is a prefix of every
    later one's, and every system message reaches the prompt."""
    pre = preprocessor(template, parser, family)
    messages: list[dict] = []
    for i, (after_user, after_assistant) in enumerate(shape):
        messages.append({"role": "user", "content": f"question {i}"})
        messages += [{"role": "system", "content": [{"type": "text", "text": f"reminder {i}.{j}"}]}
                     for j in range(after_user)]  # fmt: skip
        messages.append({"role": "assistant", "content": f"answer {i}"})
        messages += [{"role": "system", "content": [{"type": "text", "text": f"note {i}.{j}"}]}
                     for j in range(after_assistant)]  # fmt: skip
    messages.append({"role": "user", "content": "last question"})
    whole = text(pre, claude_code(messages))
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            assert whole.startswith(text(pre, claude_code(messages[:k]), generation=False)), (pre._placement, k)
    for m in messages:
        if m["role"] == "system":
            assert m["content"][0]["text"] in whole

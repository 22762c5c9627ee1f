"""Which prompts the Preprocessor replica renders on its event loop: short ones that never wait on the database.
Anything with tool schemas, an image, an earlier assistant turn (kept tokens come from the database) or a long text
goes to a worker thread."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.config import ModelSpec
from agentserve.preprocess.preprocessor import CHEAP_CHARS, Preprocessor
from agentserve.protocol import Conversation, GenerationRequest, TextBlock, ToolCallBlock, ToolSpec, Turn


class DatabaseUntouchable:
    """A kept-turn store whose every read or write fails the test: what an event loop must never wait on."""

    def get_many(self, keys):  # noqa: ANN001
        raise AssertionError("a cheap prompt read kept turns from the database")

    def touch(self, keys):  # noqa: ANN001
        raise AssertionError("a cheap prompt wrote kept turns to the database")


@pytest.fixture(scope="module")
def pre(model_path):
    return Preprocessor(ModelSpec(), str(model_path), 16, kept=DatabaseUntouchable())


def _request(*turns: Turn, tools: tuple[ToolSpec, ...] = ()) -> GenerationRequest:
    return GenerationRequest(request_id="r", model="m", conversation=Conversation(turns=turns, tools=tools))


def _user(text: str) -> Turn:
    return Turn(role="user", blocks=(TextBlock(text=text),))


def test_a_short_question_is_cheap(pre):
    assert pre.cheap(_request(Turn(role="system", blocks=(TextBlock(text="Be brief."),)), _user("hi")))


def test_long_text_tools_and_earlier_assistant_turns_are_not(pre):
    assert not pre.cheap(_request(_user("x" * (CHEAP_CHARS + 1))))
    assert not pre.cheap(_request(_user("hi"), tools=(ToolSpec(name="ls"),)))
    answer = Turn(role="assistant", blocks=(ToolCallBlock(id="c1", name="ls", arguments="{}"),))
    assert not pre.cheap(_request(_user("hi"), answer, _user("and then?")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.sampled_from(["user", "assistant"]), st.text(min_size=1, max_size=900)), min_size=1, max_size=5))
def test_a_cheap_prompt_never_waits_on_the_database(pre, turns):
    request = _request(*(Turn(role=role, blocks=(TextBlock(text=t),)) for role, t in turns), _user("next"))
    texts = [t for _, t in turns]
    if pre.cheap(request):
        assert sum(map(len, texts)) <= CHEAP_CHARS
        pre.preprocess(request)  # DatabaseUntouchable fails it on any kept-turn read or write

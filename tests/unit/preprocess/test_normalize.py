from agentserve.config import ModelSpec
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import Conversation, TextBlock, ToolSpec, Turn

A, B = ToolSpec(name="alpha"), ToolSpec(name="beta")


def _conv(tools):
    return Conversation(turns=(Turn(role="user", blocks=(TextBlock(text="hi"),)),), tools=tuple(tools))


def test_sorting_tools_makes_order_irrelevant_only_when_on(model_path):
    off = Preprocessor(ModelSpec(), str(model_path), 16)
    on = Preprocessor(ModelSpec(), str(model_path), 16, sort_tools=True)
    assert off.render(_conv([A, B])).token_ids != off.render(_conv([B, A])).token_ids
    assert on.render(_conv([A, B])).token_ids == on.render(_conv([B, A])).token_ids
    assert on.render(_conv([A, B])).token_ids == off.render(_conv([A, B])).token_ids

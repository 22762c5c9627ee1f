"""A model whose reasoning and tool-call markers are special tokens, through the real graph with the official SDKs.

The model directory is the embedded one with `<think>`, `</think>`, `<tool_call>` and `</tool_call>` added to its
tokenizer as special tokens, so the scripted engine replays them as special ids (as Hermes-style models sample them).
The parsers must still see them, and no client may see them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import anthropic
import openai
import pytest
from tokenizers import AddedToken

from tests.support.graph import running_graph

pytestmark = pytest.mark.integration

MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
REPLY = (
    "<think>The user wants the weather.</think>Let me check."
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def special_model(model_path: Path, tmp_path_factory) -> Iterator[Path]:
    from transformers import AutoTokenizer

    from agentserve.preprocess import tokenizer as tokenizers

    out = tmp_path_factory.mktemp("special-markers-model")
    for f in model_path.iterdir():
        if f.name == "model.safetensors":
            (out / f.name).symlink_to(f)
        elif f.name not in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(f, out / f.name)
    tok = AutoTokenizer.from_pretrained(str(model_path))
    tok.add_tokens([AddedToken(m, special=True, normalized=False) for m in MARKERS], special_tokens=True)
    tok.save_pretrained(str(out))
    reloaded = AutoTokenizer.from_pretrained(str(out))
    ids = reloaded.encode(REPLY, add_special_tokens=False)
    specials = {i for i, t in reloaded.added_tokens_decoder.items() if t.special}
    assert sum(i in specials for i in ids) == 4  # the engine will replay each marker as one special id
    # What `agentserve prepare-model` does for the embedded model: decide the tokenizer class here, where
    # transformers is loaded already, so the replicas load it without importing torch (~5 s of CPU each).
    tokenizers.remember_tokenizer_class(out)
    yield out
    entry = tokenizers.default_class_cache_dir() / f"{tokenizers._class_key(out)}.json"
    entry.unlink(missing_ok=True)  # the directory is gone after the session: so is its entry


@pytest.fixture(scope="module")
def graph_url(special_model: Path) -> Iterator[str]:
    args = {
        "engine": {"kind": "scripted", "block_size": 16, "rules": [{"match": "", "reply": REPLY}]},
        "model": {"path": str(special_model), "reasoning_parser": "qwen3", "tool_call_parser": "hermes"},
    }
    with running_graph(args, name="special-markers") as url:
        yield url


def no_marker(text: str | None) -> bool:
    return not any(m in (text or "") for m in (*MARKERS, "<|im_end|>", "<|endoftext|>"))


def test_chat_completions_gets_the_call_and_no_marker_text(graph_url):
    oai = openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": WEATHER}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    resp = oai.chat.completions.create(model="smollm2", messages=messages, tools=tools)
    msg = resp.choices[0].message
    assert resp.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert msg.content == "Let me check." and no_marker(msg.content)
    assert msg.model_extra["reasoning_content"] == "The user wants the weather."

    chunks = list(oai.chat.completions.create(model="smollm2", messages=messages, tools=tools, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    args = "".join(
        tc.function.arguments or "" for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])
    )
    assert streamed == "Let me check." and json.loads(args) == {"city": "Paris"}
    assert all(no_marker(json.dumps(c.model_dump())) for c in chunks)


def test_chat_without_tools_drops_the_call_markers(graph_url):
    oai = openai.OpenAI(base_url=f"{graph_url}/v1", api_key="unused", max_retries=0)
    resp = oai.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Weather in Paris?"}])
    content = resp.choices[0].message.content
    assert content.startswith("Let me check.") and '"get_weather"' in content and no_marker(content)


def test_anthropic_messages_gets_thinking_and_tool_use_without_marker_text(graph_url):
    ant = anthropic.Anthropic(base_url=graph_url, api_key="unused", max_retries=0)
    with ant.messages.stream(
        model="smollm2",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}],
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as stream:
        final = stream.get_final_message()
    kinds = [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None) or getattr(b, "input", None))
             for b in final.content]
    assert kinds == [
        ("thinking", "The user wants the weather."),
        ("text", "Let me check."),
        ("tool_use", {"city": "Paris"}),
    ]
    assert final.stop_reason == "tool_use"
    assert no_marker(final.model_dump_json())

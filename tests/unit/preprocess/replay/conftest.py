"""Per-family test templates rendered through the real Preprocessor (its tokenizer swapped for a copy of the
embedded one carrying the family's template and marker tokens)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local checkpoint: never ask the hub

TEMPLATES = Path(__file__).parent / "templates"


def template_source(name: str) -> str:
    if name == "agentserve_default":
        from agentserve.prepare.model import chat_template

        return chat_template()
    return (TEMPLATES / f"{name}.jinja").read_text()


@pytest.fixture(scope="session")
def base_tokenizer():
    from agentserve.prepare.model import prepare_model
    from agentserve.preprocess.tokenizer import load_tokenizer

    return load_tokenizer(str(prepare_model()))


@pytest.fixture(scope="session")
def make_preprocessor(base_tokenizer):
    """make_preprocessor(template, specials, reasoning_parser, family) -> a real Preprocessor over that template."""
    from agentserve.config import ModelSpec
    from agentserve.preprocess import preprocessor as pp

    cache: dict = {}
    tokenizers: dict = {}

    def make(template: str, specials: tuple[str, ...] = (), reasoning_parser: str | None = "qwen3",
             family: str | None = None, tool_call_parser: str | None = "hermes"):
        key = (template, specials, reasoning_parser, family, tool_call_parser)
        if key in cache:
            return cache[key]
        tok = tokenizers.get((template, specials))
        if tok is None:
            tok = tokenizers[(template, specials)] = copy.deepcopy(base_tokenizer)
            tok.chat_template = template_source(template)
            if specials:
                tok.add_special_tokens({"additional_special_tokens": list(specials)})
        spec = ModelSpec(reasoning_parser=reasoning_parser, tool_call_parser=tool_call_parser,
                         replay_family=family)
        real = pp.load_tokenizer
        pp.load_tokenizer = lambda _path: tok  # the Preprocessor loads its tokenizer by path
        try:
            pre = pp.Preprocessor(spec, "unused", block_size=16)
        finally:
            pp.load_tokenizer = real
        cache[key] = pre
        return pre

    return make

from __future__ import annotations

import pytest

from agentserve.engines.scripted import _accepts, _grammar_compiler


@pytest.fixture(scope="module")
def grammar(tokenizer):
    """(structural tag, text) -> whether constrained decoding could produce that text with the embedded tokenizer."""
    compile_tag = _grammar_compiler(tokenizer)

    def accepts(tag: str, text: str) -> bool:
        return _accepts(compile_tag(tag), tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id)

    return accepts

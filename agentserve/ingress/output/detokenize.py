"""Incremental detokenization that keeps the special tokens the parsers need and drops every other one.

Skipping all special tokens (the usual default) hides the markers of formats whose markers are special tokens
(harmony's `<|channel|>`, Mistral's `[TOOL_CALLS]`, Llama 3's `<|python_tag|>`, DeepSeek's and Kimi's tool markers),
so their tool calls would come out as plain text. Keeping all of them would show EOS, padding and the like to the
client. So the tokenizer's special tokens are read once per process, and each parser pair keeps exactly the ones its
formats declare (parsers.parser_markers); the parsers consume them (parsers/special.py removes any they did not).

Ordinary ids go through the tokenizer's own `DecodeStream` with special tokens skipped; a kept id is emitted as its
literal text without entering that stream (a special token decodes on its own), so each id costs O(1).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from tokenizers.decoders import DecodeStream

from agentserve.parsers import parser_markers

__all__ = ["SpecialTokens", "Detokenizer", "special_tokens"]

logger = logging.getLogger(__name__)


class SpecialTokens:
    """A tokenizer's special tokens (id -> text), and per parser pair the ones to keep."""

    def __init__(self, by_id: Mapping[int, str]) -> None:
        self.by_id = dict(by_id)
        self._kept: dict[tuple[str | None, str | None], Mapping[int, str]] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, tokenizer: Any) -> "SpecialTokens":
        """From a transformers tokenizer: every added token marked special (what `skip_special_tokens` skips)."""
        by_id = {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        for i, text in zip(tokenizer.all_special_ids, tokenizer.all_special_tokens):
            by_id.setdefault(i, text)
        return cls(by_id)

    def kept(self, reasoning: str | None, tool_calls: str | None) -> Mapping[int, str]:
        """Special ids whose text is a marker the parser pair consumes (id -> marker text)."""
        key = (reasoning, tool_calls)
        got = self._kept.get(key)
        if got is None:
            markers = parser_markers(reasoning, tool_calls)
            got = {i: t for i, t in self.by_id.items() if t in markers}
            with self._lock:
                if key not in self._kept:
                    logger.info("parsers %s/%s: special tokens kept for them: %s", *key, sorted(got.values()) or "none")
                got = self._kept.setdefault(key, got)
        return got


@lru_cache(maxsize=8)
def special_tokens(tokenizer: Any) -> SpecialTokens:
    """One `SpecialTokens` per tokenizer object per process (the ingress builds it at start-up)."""
    return SpecialTokens.of(tokenizer)


class Detokenizer:
    """Token ids -> text pieces, one id at a time. `step` returns (text, is_marker) or None when nothing is ready."""

    __slots__ = ("_tok", "_stream", "_keep")

    def __init__(self, tokenizer: Any, keep: Mapping[int, str], skip_special_tokens: bool = True) -> None:
        self._tok = tokenizer._tokenizer  # the Rust tokenizer behind a transformers fast tokenizer
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self._keep = keep if skip_special_tokens else {}  # not skipping: every special token is text already

    def step(self, token_id: int) -> tuple[str, bool] | None:
        marker = self._keep.get(token_id)
        if marker is not None:
            return marker, True
        piece = self._stream.step(self._tok, token_id)
        return (piece, False) if piece else None

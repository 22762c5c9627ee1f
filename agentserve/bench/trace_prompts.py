"""Prompt text that reproduces a trace's block reuse as closely as text allows, for a live replay.

A trace carries block hashes, never text. Equal hashes mean an equal prefix, so each distinct block hash gets its
own run of words, the same every time it appears: sessions that shared a system prompt send the same system text,
and a context that starts over after a compaction shares exactly the blocks it shared in the trace. A turn that
extends its previous one is sent as the previous messages, the assistant's reply as the server returned it (so the
server's own output comes back, as a harness sends it) and a user message with the new tokens. Sizes are scaled by
`token_scale` (the small models this machine runs have small windows); a word of the vocabulary below is one token
in the BPE tokenizers we serve (SmolLM2, Llama, Qwen), near enough.
"""

from __future__ import annotations

import os
import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

WORDS = tuple(
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will more can other its who into some "
    "time only new could them these two may first then do any like my now over such our man me even most made "
    "after also did many before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off come since against go "
    "came right used take three states himself few house use during without again place around however home "
    "small found thought went say part once general high upon school every does got united left number course war "
    "until always away something fact though water less public put think almost hand enough far took head yet "
    "government system better set told nothing night end why called didn eyes find going look asked later knew".split()
)


def words(seed: int, n: int) -> str:
    """n words, the same for the same seed."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


@dataclass(frozen=True, slots=True)
class Scale:
    block_size: int  # the trace's tokens per block
    token_scale: float  # live tokens per trace token

    @property
    def block_words(self) -> int:
        return max(1, round(self.block_size * self.token_scale))

    def tokens(self, n: int) -> int:
        return max(1, round(n * self.token_scale))


class BlockText:
    """Block hash -> its words, bounded (least recently used dropped: a dropped block's text comes back the same,
    being seeded by its hash)."""

    def __init__(self, scale: Scale, max_blocks: int = 200_000) -> None:
        self.scale = scale
        self._max = max_blocks
        self._text: OrderedDict[int, str] = OrderedDict()

    def block(self, h: int) -> str:
        text = self._text.get(h)
        if text is None:
            text = self._text[h] = words(h, self.scale.block_words)
            if len(self._text) > self._max:
                self._text.popitem(last=False)
        else:
            self._text.move_to_end(h)
        return text

    def blocks(self, hashes: list[int] | tuple[int, ...]) -> str:
        return " ".join(self.block(h) for h in hashes)


class Conversation:
    """One session's messages as a live replay sends them."""

    def __init__(self, texts: BlockText, shared_blocks: int) -> None:
        self._texts = texts
        self._shared = shared_blocks  # leading blocks of a context's first request sent as the system prompt
        self.system = ""
        self.messages: list[dict[str, Any]] = []

    def start(self, blocks: list[int], prompt_tokens: int, seed: int) -> None:
        """A new context: the shared blocks as the system prompt, the rest and the partial block as the user's."""
        n = min(self._shared, len(blocks))
        bs = self._texts.scale.block_size
        self.system = self._texts.blocks(blocks[:n])
        rest = self._texts.blocks(blocks[n:])
        tail = words(seed, self._texts.scale.tokens(prompt_tokens - len(blocks) * bs)) if prompt_tokens > len(blocks) * bs else ""
        self.messages = [{"role": "user", "content": (rest + " " + tail).strip() or "go"}]

    def extend(self, reply: list[dict[str, Any]], new_tokens: int, seed: int) -> None:
        """The previous reply as returned, then the user's (tool result's) new tokens."""
        self.messages.append({"role": "assistant", "content": reply or [{"type": "text", "text": "ok"}]})
        self.messages.append({"role": "user", "content": words(seed, self._texts.scale.tokens(max(1, new_tokens)))})


def shared_prefix_blocks(first_inputs: list[list[int]]) -> list[int]:
    """For each context's first request, how many leading blocks it shares with any other's: its system prompt."""
    order = sorted(range(len(first_inputs)), key=lambda i: first_inputs[i])
    out = [0] * len(first_inputs)
    for a, b in zip(order, order[1:]):
        n = len(os.path.commonprefix([first_inputs[a], first_inputs[b]]))  # element-wise: lists too
        out[a], out[b] = max(out[a], n), max(out[b], n)
    return out

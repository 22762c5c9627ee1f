"""Digests that name a conversation by its meaning, not its spelling: the keys of kept turns.

An assistant turn's content is what the parsers returned to the client: reasoning text, text and tool calls
(name and arguments) in order. Its canonical form ignores what a client's round trip may change without changing
meaning: whitespace around reasoning and text, JSON spacing and key order in arguments, how blocks were split.
Tool-call ids are not content (the server made them). A conversation's digest chains a header (caller scope,
model, tools, template switches) and every turn's canonical form, so a turn's key names the turn *and* all that
came before it: the same content after a different history is a different kept turn.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Sequence

import orjson

from agentserve.bytes_lru import BytesLRU

from agentserve.protocol import (
    Conversation,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolChangeBlock,
    ToolResultBlock,
    Turn,
)

DIGEST_SIZE = 16


def _h(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=DIGEST_SIZE, person=b"agentserve-turn")
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest()


def canonical_json(value: Any) -> bytes:
    """Compact, keys sorted, UTF-8 (orjson; the standard library's spelling of the same for what orjson refuses,
    integers past 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def canonical_arguments(arguments: str) -> Any:
    """Parsed arguments (key order and spacing gone), or the raw text when it is not JSON."""
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return {"$raw": arguments}


def assistant_content(blocks: Iterable[Any]) -> list[list[Any]]:
    """["r", text] / ["t", text] / ["c", name, arguments] in order; adjacent text of one kind merged, edges stripped."""
    out: list[list[Any]] = []
    for b in blocks:
        if isinstance(b, (ReasoningBlock, TextBlock)):
            kind = "r" if isinstance(b, ReasoningBlock) else "t"
            if out and out[-1][0] == kind:
                out[-1][1] += b.text
            else:
                out.append([kind, b.text])
        elif isinstance(b, ToolCallBlock):
            out.append(["c", b.name, canonical_arguments(b.arguments)])
    for item in out:
        if item[0] in ("r", "t"):
            item[1] = item[1].strip()
    return [item for item in out if item[0] == "c" or item[1]]


def _turn_form(turn: Turn) -> Any:
    if turn.role == "assistant":
        return ["assistant", assistant_content(turn.blocks)]
    blocks: list[Any] = []
    for b in turn.blocks:
        if isinstance(b, TextBlock):
            blocks.append(["t", b.text])
        elif isinstance(b, ToolResultBlock):
            blocks.append(["tr", b.tool_call_id, b.content, b.is_error])
        elif isinstance(b, ImageBlock):
            blocks.append(["i", b.url])
        elif isinstance(b, ToolChangeBlock):
            blocks.append(["tc", [[t.openai_schema(), t.strict] for t in b.added], list(b.removed)])
    return [turn.role, blocks]


def header_digest(
    scope: str, model: str, conversation: Conversation, template_kwargs: dict[str, Any], thinking: bool | None
) -> bytes:
    tools = [t.openai_schema() for t in conversation.tools]
    choice = conversation.tool_choice if isinstance(conversation.tool_choice, str) else conversation.tool_choice.name
    return _h(b"header", scope.encode(), model.encode(), canonical_json(tools), choice.encode(),
              canonical_json(template_kwargs), repr(thinking).encode())


def chain(header: bytes, turns: Sequence[Turn]) -> list[bytes]:
    """The digest after each turn: chain[i] names turns[: i + 1] under `header`."""
    out: list[bytes] = []
    h = header
    for turn in turns:
        h = next_digest(h, turn)
        out.append(h)
    return out


class TurnChains:
    """`chain` for a replica that is sent a session's conversation as new turns after one it holds
    (ingress/sent_conversations.py): the digests of the turns it already hashed for the earlier request are taken
    from it instead of hashed again. Looked up by the identity of a trailing turn, and used only where the turns up
    to it are the remembered ones: a tuple comparison that costs next to nothing when they are the same objects (a
    delta applied) and compares content otherwise (equal turns have equal digests either way)."""

    LOOKBACK = 16  # how many trailing turns may be new since the chain remembered

    def __init__(self, max_bytes: int) -> None:
        self._memo: BytesLRU[tuple[int, bytes], tuple[tuple[Turn, ...], list[bytes]]] = BytesLRU(max_bytes)

    def chain(self, header: bytes, turns: Sequence[Turn]) -> list[bytes]:
        turns = tuple(turns)
        digests: list[bytes] | None = None
        for i in range(len(turns) - 1, max(-1, len(turns) - 1 - self.LOOKBACK), -1):
            hit = self._memo.get((id(turns[i]), header))
            if hit is not None and len(hit[0]) == i + 1 and hit[0] == turns[: i + 1]:
                digests = hit[1] + chain(hit[1][-1], turns[i + 1 :])
                break
        if digests is None:
            digests = chain(header, turns)
        if turns:
            self._memo.put((id(turns[-1]), header), (turns, digests), 64 * len(digests) + 256)
        return digests


def next_digest(prefix: bytes, turn: Turn) -> bytes:
    return _h(b"turn", prefix, canonical_json(_turn_form(turn)))


def kept_key(digest: bytes) -> str:
    """The database key of the assistant turn that `digest` ends with."""
    return digest.hex()


def key_after(prefix: str, turn: Turn) -> str:
    """The key of `turn` generated after the conversation whose digest is `prefix` (PromptReport.replay_prefix)."""
    return kept_key(next_digest(bytes.fromhex(prefix), turn))

"""Where the model's own reasoning was generated, so that its proof (a thinking signature, an `encrypted_content`
blob) holds there and nowhere else.

Both are issued for an Origin and verify only for the same one:
- the caller: its identity (`caller_scope()` in ingress/middleware/auth.py, the key digest every other per-caller
  state is scoped by; without configured keys, the digest of the key it presents). Another caller's proof does
  not verify, so reasoning cannot be carried from one tenant's session into another's.
- the position: a digest of the conversation before the assistant turn the reasoning belongs to. A proof moved into
  another conversation, or elsewhere in this one, does not verify.

The position covers only what harnesses resend unchanged. Claude Code and Codex resend the whole history exactly,
except:
- system turns: Claude Code's system prompt names the model and Codex's instructions come from the model's profile,
  so they change when the user switches models mid-session. Not covered.
- tool results' content: harnesses clear old ones in place to save context (Claude Code's microcompaction,
  OpenClaw's context pruning). Only that a result was there is covered.
- earlier reasoning and every id: reasoning may come back redacted or dropped, ids are labels. Not covered.
So the position is the user turns' text and images, the model's earlier text and tool calls (name and arguments,
as turn_digest reads them), and the place of each tool result, up to the last turn that is not the assistant's
(an assistant turn continued over two messages keeps one position).

The model is deliberately not part of the origin: harnesses switch models mid-session (Claude Code's side requests
to a small model, `/model`; Codex's model picker) and send the earlier model's reasoning along, which is the same
conversation's reasoning. docs/OPERATIONS.md (threat model) says what this leaves open.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

from agentserve.preprocess.turn_digest import DIGEST_SIZE, assistant_content, canonical_json
from agentserve.protocol import ImageBlock, ReasoningBlock, TextBlock, ToolResultBlock, Turn


@dataclass(frozen=True, slots=True)
class Origin:
    caller: str
    position: bytes  # DIGEST_SIZE bytes

    def associated_data(self) -> bytes:
        """What a proof is bound to, unambiguously framed (the caller's length first)."""
        caller = self.caller.encode()
        return len(caller).to_bytes(4, "little") + caller + self.position


def _step(prefix: bytes, form: Any) -> bytes:
    h = hashlib.blake2b(digest_size=DIGEST_SIZE, person=b"agentserve-pos")
    h.update(prefix)
    h.update(canonical_json(form))
    return h.digest()


def _form(turn: Turn) -> Any:
    if turn.role == "assistant":
        return ["assistant", assistant_content(b for b in turn.blocks if not isinstance(b, ReasoningBlock))]
    blocks: list[Any] = []
    for b in turn.blocks:
        if isinstance(b, TextBlock):
            blocks.append(["t", b.text])
        elif isinstance(b, ImageBlock):
            blocks.append(["i", b.url])
        elif isinstance(b, ToolResultBlock):
            blocks.append(["tr"])
    return [turn.role, blocks]


_START = bytes(DIGEST_SIZE)


class Origins:
    """The origin of reasoning after each prefix of one caller's conversation as it is built: `after(turns)` for a
    list that only grows, each turn hashed once (a long history's decode stays linear)."""

    def __init__(self, caller: str) -> None:
        self._caller = caller
        self._seen = 0
        self._chain = _START  # every non-system turn so far
        self._position = _START  # the chain up to the last non-system turn that is not the assistant's

    def after(self, turns: Sequence[Turn]) -> Origin:
        for turn in turns[self._seen :]:
            if turn.role == "system":
                continue
            self._chain = _step(self._chain, _form(turn))
            if turn.role != "assistant":
                self._position = self._chain
        self._seen = len(turns)
        return Origin(self._caller, self._position)

    def state(self) -> tuple[bytes, bytes]:
        """Where the walk stands (for `resume` over a conversation that repeats the turns walked)."""
        return self._chain, self._position

    def resume(self, state: tuple[bytes, bytes], seen: int) -> None:
        """Continue from `state` as if the first `seen` turns of the list `after` is given had been walked."""
        self._chain, self._position = state
        self._seen = seen


def origin_after(caller: str, turns: Sequence[Turn]) -> Origin:
    """Where the assistant turn generated after `turns` stands: what the server issues its reasoning's proofs for."""
    return Origins(caller).after(turns)

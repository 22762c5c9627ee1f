"""What this Ingress replica last sent the Preprocessor per session, so a session's next request crosses as its
new turns only.

An agent session's request N+1 repeats request N's whole conversation and adds a turn or two; at 300 turns that
is ~600 KB pickled, sent and validated again on every turn. Here each request's conversation is remembered per
(caller, model, session) under a fresh id the Preprocessor replica keeps it under too (`KeepAs`); when the next
request's conversation starts with it (same turns, same tools), only the turns after it cross
(`ConversationDelta`). A Preprocessor replica that does not hold the base (another replica, a restart, its own memo
evicted it) answers None and the conversation is sent whole: the fallback costs one more call, never a wrong prompt,
since the delta is applied to exactly the conversation it was made against (its id is random and per caller).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from agentserve.bytes_lru import BytesLRU
from agentserve.protocol import Conversation, ConversationDelta, KeepAs
from agentserve.protocol.conversation import approx_nbytes


@dataclass(frozen=True, slots=True)
class Shipment:
    """How one request's conversation crosses: `delta` against the last one sent (None: whole), kept as `keep`."""

    delta: ConversationDelta | None
    keep: KeepAs


@dataclass(frozen=True, slots=True)
class _Sent:
    conversation: Conversation
    keep: KeepAs


class SentConversations:
    def __init__(self, max_bytes: int) -> None:
        self._sent: BytesLRU[tuple[str, str, str], _Sent] = BytesLRU(max_bytes)

    def ship(self, scope: str, model: str, session: str, conversation: Conversation) -> Shipment | None:
        """The shipment of `conversation` (None: no session to key it by, or no memo: send it whole, keep nothing)."""
        if not session or self._sent.max_bytes <= 0:
            return None
        key = (scope, model, session)
        last = self._sent.get(key)
        delta = _delta(last, conversation) if last is not None else None
        if delta is not None and last is not None:
            nbytes = last.keep.nbytes + approx_nbytes(delta.turns)
        else:
            nbytes = approx_nbytes(conversation.turns)
        keep = KeepAs(id=secrets.token_hex(16), nbytes=nbytes)
        self._sent.put(key, _Sent(conversation, keep), nbytes)
        return Shipment(delta, keep)


def _delta(last: _Sent, conversation: Conversation) -> ConversationDelta | None:
    before = last.conversation
    n = len(before.turns)
    if (
        n > len(conversation.turns)
        or conversation.tools != before.tools
        or conversation.tool_choice != before.tool_choice
        or conversation.parallel_tool_calls != before.parallel_tool_calls
        or conversation.turns[:n] != before.turns  # a tuple compare: identical turns are not even looked into
    ):
        return None
    return ConversationDelta(base=last.keep.id, base_turns=n, turns=conversation.turns[n:])

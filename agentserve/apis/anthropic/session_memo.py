"""A session's last Messages request, decoded, so that its next request decodes only the messages it added.

A harness resends the whole history every turn: at 300 turns a Claude Code body is ~650 KB, and validating its
messages and building their turns (every thinking signature verified again) cost ~10 ms a turn in the Ingress. Per
(caller, session) this keeps the previous request's messages as parsed JSON, as validated, and as the turns they
became with the origin walk after them. A request whose messages start with exactly those (one C-level comparison
of the parsed JSON) validates and decodes only the rest; the repeated messages are the same dicts, verified for the
same caller at the same places, so what they decode to is what they decoded to. Anything else is decoded whole.
The body limits are still checked on the whole body, before any of this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentserve.apis.anthropic.decode import KnownMessages
from agentserve.apis.anthropic.schema import MessageParam, MessagesRequest
from agentserve.apis.media import TEXT_ONLY, MediaPolicy
from agentserve.bytes_lru import BytesLRU
from agentserve.protocol import Conversation
from agentserve.protocol.conversation import approx_nbytes


@dataclass(frozen=True, slots=True)
class _Previous:
    raw: list[Any]  # the messages as parsed (compared, never mutated)
    params: list[MessageParam]
    known: KnownMessages
    nbytes: int  # what this holds, about


@dataclass(frozen=True, slots=True)
class Validated:
    request: MessagesRequest
    known: KnownMessages | None  # its leading messages as the session's previous request decoded them
    raw: list[Any]  # its messages as parsed
    known_nbytes: int = 0


class MessageMemo:
    def __init__(self, max_bytes: int) -> None:
        self._previous: BytesLRU[tuple[str, str], _Previous] = BytesLRU(max_bytes)

    def validate(self, data: Any, key: tuple[str, str] | None) -> Validated:
        """`data` validated as a MessagesRequest, its messages after the session's previous request's only."""
        messages = data.get("messages") if isinstance(data, dict) else None
        last = self._previous.get(key) if key is not None and isinstance(messages, list) else None
        if last is not None and len(messages) > len(last.raw) and messages[: len(last.raw)] == last.raw:  # type: ignore[arg-type]
            try:
                rest = MessagesRequest.model_validate({**data, "messages": messages[len(last.raw) :]})  # type: ignore[index]
            except ValidationError:
                MessagesRequest.model_validate(data)  # the error as the whole body has it (its message indexes)
                raise
            whole = rest.model_copy(update={"messages": [*last.params, *rest.messages]})
            return Validated(whole, last.known, messages, last.nbytes)  # type: ignore[arg-type]
        return Validated(MessagesRequest.model_validate(data), None, messages if isinstance(messages, list) else [])

    def remember(
        self, key: tuple[str, str] | None, validated: Validated, conversation: Conversation, lead: int,
        origins: tuple[bytes, bytes], media: MediaPolicy = TEXT_ONLY,
    ) -> None:
        """Keep the decoded request for the session's next one: `conversation` as decoded (before any stripping),
        `lead` the turns of its `system` field, `origins` the origin walk after all of it, `media` the policy its
        images and documents were decoded under (the next request's model may have another)."""
        if key is None:
            return
        turns = conversation.turns[lead:]
        reused = validated.known if validated.known is not None and validated.known.media == media else None
        new = turns[len(reused.turns):] if reused is not None else turns
        # the JSON, the validated messages and the turns hold the same strings about three times over
        nbytes = (validated.known_nbytes if reused is not None else 0) + 3 * approx_nbytes(new)
        known = KnownMessages(len(validated.raw), turns, origins, media)
        self._previous.put(key, _Previous(validated.raw, list(validated.request.messages), known, nbytes), nbytes)

"""encrypted_content for reasoning items: the exact reasoning text, sealed so the client can carry it.

Codex runs with `store: false` and resends the whole history each turn. To replay the model's own
reasoning token-for-token (and so keep the prefix cache warm) the server hands the text to the client
sealed (apis/sealed_box.py: AES-256-GCM under a key derived from `ServeArgs.secret_key`, which every replica
shares) and restores it when the item comes back; a tampered, truncated or foreign blob fails authentication
and is rejected. A blob opens only for the caller it was sealed for and at the place in the conversation where
the model generated it (apis/origin.py, authenticated as the cipher's associated data): replayed by another
caller or moved elsewhere it fails authentication like a tampered one. It is not bound to the model, since
harnesses switch models mid-session. Blobs sealed under a previous key (`previous`, for rotation) still open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import orjson

from agentserve.apis.origin import Origin
from agentserve.apis.sealed_box import SealedBox, SealError

__all__ = ["SealError", "SealedReasoning", "Sealer"]

_VERSION = b"\x02"  # 1 was bound to nothing but the key (it opened anywhere): unknown format now
_AAD = b"agentserve/responses/reasoning/v2"


@dataclass(frozen=True, slots=True)
class SealedReasoning:
    text: str
    model: str  # the canonical model id that produced it
    response_id: str
    output_index: int  # the item's position in that response's output


class Sealer:
    def __init__(self, secret_key: str | None, previous: Sequence[str] = ()) -> None:
        self._box = SealedBox(secret_key, previous, info=b"agentserve encrypted_content", version=_VERSION)
        self.key_id = self._box.key_id

    def seal(self, item: SealedReasoning, origin: Origin) -> str:
        payload = orjson.dumps({"t": item.text, "m": item.model, "r": item.response_id, "i": item.output_index})
        return self._box.seal(payload, _AAD + origin.associated_data())

    def open(self, blob: str, origin: Origin) -> SealedReasoning:
        plain = self._box.open(blob, _AAD + origin.associated_data())
        try:
            payload = orjson.loads(plain)
            return SealedReasoning(
                text=payload["t"], model=payload["m"], response_id=payload["r"], output_index=payload["i"]
            )
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise SealError("bad payload") from exc

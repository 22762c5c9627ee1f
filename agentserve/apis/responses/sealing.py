"""encrypted_content for reasoning items: the exact reasoning text, sealed so the client can carry it.

Codex runs with `store: false` and resends the whole history each turn. To replay the model's own
reasoning token-for-token (and so keep the prefix cache warm) the server hands the text to the client
sealed with AES-256-GCM and restores it when the item comes back. The key is derived from
`ServeArgs.secret_key`, which every replica shares, so any replica can open any blob; a tampered,
truncated or foreign blob fails authentication and is rejected. A blob opens only for the caller it was sealed
for and at the place in the conversation where the model generated it (apis/origin.py, authenticated as the
cipher's associated data): replayed by another caller or moved elsewhere it fails authentication like a
tampered one. It is not bound to the model, since harnesses switch models mid-session. Blobs sealed under a
previous key (`previous`, for rotation) still open; new ones are always sealed with the current key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from typing import Sequence

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from agentserve.apis.origin import Origin

_VERSION = b"\x02"  # 1 was bound to nothing but the key (it opened anywhere): unknown format now
_AAD = b"agentserve/responses/reasoning/v2"


class SealError(ValueError):
    """The blob is not one this deployment sealed for this origin (tampered, truncated, other key, format, caller or
    place in the conversation)."""


@dataclass(frozen=True, slots=True)
class SealedReasoning:
    text: str
    model: str  # the canonical model id that produced it
    response_id: str
    output_index: int  # the item's position in that response's output


def _derive(secret: bytes) -> bytes:
    return HKDF(algorithm=SHA256(), length=32, salt=None, info=b"agentserve encrypted_content").derive(secret)


class Sealer:
    def __init__(self, secret_key: str | None, previous: Sequence[str] = ()) -> None:
        # No key configured (unit use outside build_app): a random one, valid for this process only.
        secret = secret_key.encode() if secret_key else os.urandom(32)
        key = _derive(secret)
        self._aead = AESGCM(key)
        self._openers = (self._aead, *(AESGCM(_derive(k.encode())) for k in previous if k and k != secret_key))
        self.key_id = hashlib.sha256(key).hexdigest()[:8]

    def seal(self, item: SealedReasoning, origin: Origin) -> str:
        payload = orjson.dumps(
            {"t": item.text, "m": item.model, "r": item.response_id, "i": item.output_index}
        )
        nonce = os.urandom(12)
        blob = _VERSION + nonce + self._aead.encrypt(nonce, payload, _AAD + origin.associated_data())
        return base64.urlsafe_b64encode(blob).decode().rstrip("=")

    def open(self, blob: str, origin: Origin) -> SealedReasoning:
        try:
            raw = base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4))
        except (binascii.Error, ValueError) as exc:
            raise SealError("not base64url") from exc
        if len(raw) < 1 + 12 + 16 or raw[:1] != _VERSION:
            raise SealError("unknown format")
        aad = _AAD + origin.associated_data()
        for aead in self._openers:  # the current key first, then previous ones (rotation)
            try:
                plain = aead.decrypt(raw[1:13], raw[13:], aad)
                break
            except InvalidTag:
                continue
        else:
            raise SealError("authentication failed")
        try:
            payload = orjson.loads(plain)
            return SealedReasoning(
                text=payload["t"], model=payload["m"], response_id=payload["r"], output_index=payload["i"]
            )
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise SealError("bad payload") from exc

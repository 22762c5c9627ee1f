"""AES-256-GCM boxes keyed from `ServeArgs.secret_key`: what lets a client carry the model's own reasoning text
that it must not read or change (a Responses `encrypted_content`, an Anthropic thinking signature with the text
omitted) and the server restore it exactly.

Each use derives its own key from the shared secret (HKDF, its own `info`) and binds each box to what the caller
passes as associated data (the reasoning's origin, apis/origin.py), so a box opens only for the same use, caller
and place. Boxes sealed under a previous key (rotation) still open; new ones always use the current key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from typing import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_NONCE = 12
_TAG = 16


class SealError(ValueError):
    """The blob is not one this deployment sealed for this use and associated data (tampered, truncated, other key,
    format, caller or place in the conversation)."""


def _derive(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=SHA256(), length=32, salt=None, info=info).derive(secret)


class SealedBox:
    """`seal(payload, aad)` -> base64url text; `open(text, aad)` -> payload, or SealError."""

    def __init__(self, secret_key: str | None, previous: Sequence[str] = (), *, info: bytes, version: bytes) -> None:
        # No key configured (unit use outside build_app): a random one, valid for this process only.
        secret = secret_key.encode() if secret_key else os.urandom(32)
        key = _derive(secret, info)
        self._aead = AESGCM(key)
        self._openers = (self._aead, *(AESGCM(_derive(k.encode(), info)) for k in previous if k and k != secret_key))
        self._version = version
        self.key_id = hashlib.sha256(key).hexdigest()[:8]

    def seal(self, payload: bytes, aad: bytes) -> str:
        nonce = os.urandom(_NONCE)
        blob = self._version + nonce + self._aead.encrypt(nonce, payload, aad)
        return base64.urlsafe_b64encode(blob).decode().rstrip("=")

    def open(self, text: str, aad: bytes) -> bytes:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError) as exc:
            raise SealError("not base64url") from exc
        v = len(self._version)
        if len(raw) < v + _NONCE + _TAG or raw[:v] != self._version:
            raise SealError("unknown format")
        for aead in self._openers:  # the current key first, then previous ones (rotation)
            try:
                return aead.decrypt(raw[v : v + _NONCE], raw[v + _NONCE :], aad)
            except InvalidTag:
                continue
        raise SealError("authentication failed")

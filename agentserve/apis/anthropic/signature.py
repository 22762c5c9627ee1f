"""Thinking-block signatures: an HMAC the server issues over the thinking text and verifies on replay.

Clients must send thinking back unmodified; a valid signature proves they did, so the replayed reasoning can be
rendered as the model's own. The key is ServeArgs.secret_key, shared by every ingress replica (a signature issued
by one replica verifies on another); agentserve/state/secrets.py keeps it across redeploys. Previous keys verify
but never sign, so a key can be rotated without breaking live sessions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Sequence

_PREFIX = "as1."  # versioned, so the scheme can change without misreading old signatures


class ThinkingSigner:
    def __init__(self, secret_key: str, previous: Sequence[str] = ()) -> None:
        if not secret_key:
            raise ValueError("a secret key is required to sign thinking blocks")
        self._key = secret_key.encode()
        self._previous = tuple(k.encode() for k in previous if k and k != secret_key)

    @staticmethod
    def _mac(key: bytes, thinking: str) -> str:
        mac = hmac.new(key, b"thinking\x00" + thinking.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return _PREFIX + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def sign(self, thinking: str) -> str:
        return self._mac(self._key, thinking)

    def verify(self, thinking: str, signature: str) -> bool:
        return any(hmac.compare_digest(self._mac(k, thinking), signature) for k in (self._key, *self._previous))

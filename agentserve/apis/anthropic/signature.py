"""Thinking-block signatures: an HMAC the server issues over the thinking text and where it was generated, verified
on replay.

Clients must send thinking back unmodified; a valid signature proves they did, so the replayed reasoning can be
rendered as the model's own. It proves it only for the caller it was issued to and at the place in the
conversation where the model thought it (apis/origin.py): replayed by another caller, or moved into another
conversation or turn, it is invalid. It is not bound to the model, since harnesses switch models mid-session. The
key is ServeArgs.secret_key, shared by every ingress replica (a signature issued by one replica verifies on
another); agentserve/state/secrets.py keeps it across redeploys. Previous keys verify but never sign, so a key can
be rotated without breaking live sessions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Sequence

from agentserve.apis.origin import Origin

# Versioned, so the scheme can change without misreading old signatures. as1 covered the text alone (it verified
# anywhere); as1 signatures are invalid now.
_PREFIX = "as2."


class ThinkingSigner:
    def __init__(self, secret_key: str, previous: Sequence[str] = ()) -> None:
        if not secret_key:
            raise ValueError("a secret key is required to sign thinking blocks")
        self._key = secret_key.encode()
        self._previous = tuple(k.encode() for k in previous if k and k != secret_key)

    @staticmethod
    def _mac(key: bytes, thinking: str, origin: Origin) -> str:
        message = b"thinking\x00" + origin.associated_data() + thinking.encode("utf-8", "surrogatepass")
        mac = hmac.new(key, message, hashlib.sha256)
        return _PREFIX + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def sign(self, thinking: str, origin: Origin) -> str:
        return self._mac(self._key, thinking, origin)

    def verify(self, thinking: str, signature: str, origin: Origin) -> bool:
        return any(hmac.compare_digest(self._mac(k, thinking, origin), signature) for k in (self._key, *self._previous))

"""Thinking-block signatures: an HMAC the server issues over the thinking text and verifies on replay.

Clients must send thinking back unmodified; a valid signature proves they did, so the replayed reasoning can be
rendered as the model's own. The key is ServeArgs.secret_key, shared by every ingress replica (a signature issued
by one replica verifies on another). Set it in the serve config to keep signatures valid across redeploys.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

_PREFIX = "as1."  # versioned, so the scheme can change without misreading old signatures


class ThinkingSigner:
    def __init__(self, secret_key: str) -> None:
        if not secret_key:
            raise ValueError("a secret key is required to sign thinking blocks")
        self._key = secret_key.encode()

    def sign(self, thinking: str) -> str:
        mac = hmac.new(self._key, b"thinking\x00" + thinking.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return _PREFIX + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def verify(self, thinking: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(thinking), signature)

"""Thinking-block signatures: proof, issued by the server, that a replayed thinking block is the model's own
reasoning from where it was generated.

Clients must send thinking back unmodified; a valid signature proves they did, so the replayed reasoning can be
rendered as the model's own. It proves it only for the caller it was issued to and at the place in the
conversation where the model thought it (apis/origin.py): replayed by another caller, or moved into another
conversation or turn, it is invalid. It is not bound to the model, since harnesses switch models mid-session. The
key is ServeArgs.secret_key, shared by every ingress replica (a signature issued by one replica verifies on
another); agentserve/state/secrets.py keeps it across redeploys. Previous keys verify but never sign, so a key can
be rotated without breaking live sessions.

Two forms:
- `as2.`: an HMAC over the text the client received (`thinking.display` "summarized", the default).
- `as2s.`: the text itself, sealed (apis/sealed_box.py), for `display: "omitted"`: the client receives the block
  with empty `thinking` and sends it back so; the signature alone restores the exact reasoning, so the next turn
  renders what the model generated and its prompt keeps the cached prefix. Stateless, like Anthropic's own
  signatures, which also carry the omitted reasoning.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Sequence

from agentserve.apis.origin import Origin
from agentserve.apis.sealed_box import SealedBox, SealError

# Versioned, so the scheme can change without misreading old signatures. as1 covered the text alone (it verified
# anywhere); as1 signatures are invalid now.
_PREFIX = "as2."
_SEALED = "as2s."
_AAD = b"agentserve/anthropic/thinking/v1"


class ThinkingSigner:
    def __init__(self, secret_key: str, previous: Sequence[str] = ()) -> None:
        if not secret_key:
            raise ValueError("a secret key is required to sign thinking blocks")
        self._key = secret_key.encode()
        self._previous = tuple(k.encode() for k in previous if k and k != secret_key)
        self._box = SealedBox(secret_key, previous, info=b"agentserve thinking signature", version=b"\x01")

    @staticmethod
    def _mac(key: bytes, thinking: str, origin: Origin) -> str:
        message = b"thinking\x00" + origin.associated_data() + thinking.encode("utf-8", "surrogatepass")
        mac = hmac.new(key, message, hashlib.sha256)
        return _PREFIX + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def sign(self, thinking: str, origin: Origin) -> str:
        """The signature of a block whose text the client receives."""
        return self._mac(self._key, thinking, origin)

    def seal(self, thinking: str, origin: Origin) -> str:
        """The signature of a block sent with its text omitted: it carries the text."""
        return _SEALED + self._box.seal(thinking.encode("utf-8", "surrogatepass"), _AAD + origin.associated_data())

    def verify(self, thinking: str, signature: str, origin: Origin) -> bool:
        return self.reasoning(thinking, signature, origin) is not None

    def reasoning(self, thinking: str, signature: str, origin: Origin) -> str | None:
        """The model's reasoning a replayed block stands for (`thinking` as sent, or the text its sealed signature
        carries when the block came with the text omitted), or None when the signature is not valid for it here."""
        if signature.startswith(_SEALED):
            try:
                text = self._box.open(signature[len(_SEALED):], _AAD + origin.associated_data())
            except SealError:
                return None
            sealed = text.decode("utf-8", "surrogatepass")
            return sealed if thinking in ("", sealed) else None
        ok = any(hmac.compare_digest(self._mac(k, thinking, origin), signature) for k in (self._key, *self._previous))
        return thinking if ok else None

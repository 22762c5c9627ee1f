"""The key that signs thinking blocks and seals `encrypted_content`, resolved so it outlives a deployment.

Order: ServeArgs.secret_key, else env AGENTSERVE_SECRET_KEY (a Kubernetes Secret), else a key generated once
and kept in the data directory (mode 0600), so restarting `make serve` keeps every live session's signatures
valid. A generated key is per node: a Kubernetes or multi-node deployment refuses it unless explicitly
allowed, because replicas on another node (or the next cluster of a RayService upgrade) would not share it.
Previous keys (config, and env AGENTSERVE_PREVIOUS_SECRET_KEYS, comma separated) verify but never sign.

A weak key is refused at start (WeakSecretKey), current or previous alike: whoever guesses it can sign thinking
and seal reasoning that every replica renders as the model's own. Weak is short (under MIN_KEY_CHARS), few
distinct characters repeated (under MIN_KEY_BITS by its own character frequencies: a repeated character, a short
pattern), or a placeholder (a word like "changeme" or "secret" in it). The check is a floor, not a proof: a key
from GENERATE_HINT passes it by a wide margin.
"""

from __future__ import annotations

import math
import os
import re
import secrets as _random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

SECRET_KEY_ENV = "AGENTSERVE_SECRET_KEY"
PREVIOUS_KEYS_ENV = "AGENTSERVE_PREVIOUS_SECRET_KEYS"
KUBERNETES_ENV = "KUBERNETES_SERVICE_HOST"
KEY_FILE = "secret_key"
MIN_KEY_CHARS = 32
MIN_KEY_BITS = 80  # length x the Shannon entropy of its characters: 32 random hex characters give 90-125
GENERATE_HINT = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
_PLACEHOLDERS = ("changeme", "replace", "placeholder", "example", "secret", "password", "insecure", "default")


class GeneratedKeyRefused(RuntimeError):
    """A clustered deployment would run with a key only one node has."""


class WeakSecretKey(ValueError):
    """A configured key someone could guess (see the module docstring); the message names the setting."""


def key_weakness(key: str) -> str | None:
    """Why `key` is too weak to sign with, or None. Never quotes the key (the message goes to logs)."""
    if len(key) < MIN_KEY_CHARS:
        return f"it is {len(key)} characters long, under {MIN_KEY_CHARS}"
    letters = re.sub(r"[^a-z0-9]", "", key.lower())
    word = next((w for w in _PLACEHOLDERS if w in letters), None)
    if word:
        return f"it reads as a placeholder (it contains {word!r})"
    bits = len(key) * sum(-n / len(key) * math.log2(n / len(key)) for n in Counter(key).values())
    if bits < MIN_KEY_BITS:
        return f"it repeats a few characters (about {bits:.0f} bits by their frequencies, under {MIN_KEY_BITS})"
    return None


def _check_strength(key: str, setting: str) -> None:
    why = key_weakness(key)
    if why is not None:
        raise WeakSecretKey(
            f"{setting} is too weak to sign thinking and seal reasoning: {why}. Whoever guesses it can forge what "
            f"the model is shown as its own. Generate one with: {GENERATE_HINT}"
        )


@dataclass(frozen=True, slots=True)
class SecretKeys:
    current: str  # signs and seals
    previous: tuple[str, ...]  # still verify and open (rotation)
    source: Literal["config", "env", "file"]


def _split(raw: str | None) -> tuple[str, ...]:
    return tuple(k.strip() for k in (raw or "").split(",") if k.strip())


def resolve_secret_keys(
    configured: str | None,
    previous: Sequence[str],
    *,
    data_dir: Path,
    multi_node: bool,
    allow_generated: bool,
    env: Mapping[str, str] = os.environ,
) -> SecretKeys:
    """The current key and the previous ones; raises GeneratedKeyRefused or WeakSecretKey (see the module
    docstring)."""
    if configured:
        current, source = configured, "config"
    elif env.get(SECRET_KEY_ENV, "").strip():
        current, source = env[SECRET_KEY_ENV].strip(), "env"
    else:
        where = "Kubernetes" if env.get(KUBERNETES_ENV) else "a multi-node Ray cluster" if multi_node else None
        if where and not allow_generated:
            raise GeneratedKeyRefused(
                f"running on {where} without a secret key: replicas elsewhere would not share a generated one, and "
                f"every upgrade would invalidate live sessions. Set {SECRET_KEY_ENV} (from a Kubernetes Secret, see "
                "docs/OPERATIONS.md) or ServeArgs.secret_key, or set allow_generated_secret_key: true to accept that."
            )
        current, source = load_or_create_key(data_dir / KEY_FILE), "file"
    setting = {
        "config": "ServeArgs.secret_key",
        "env": SECRET_KEY_ENV,
        "file": f"the key file {data_dir / KEY_FILE} (delete it to have one generated)",
    }
    _check_strength(current, setting[source])
    old = tuple(k for k in dict.fromkeys((*previous, *_split(env.get(PREVIOUS_KEYS_ENV)))) if k and k != current)
    for i, key in enumerate(old):
        _check_strength(key, f"previous key {i + 1} of previous_secret_keys / {PREVIOUS_KEYS_ENV}")
    return SecretKeys(current=current, previous=old, source=source)


def load_or_create_key(path: Path) -> str:
    """The key in `path`, created (0600, atomically: concurrent starters all end up with the first one) if absent."""
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{_random.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_random.token_hex(32) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if another process got there first: then its key wins
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
    return _read(path)


def _read(path: Path) -> str:
    key = path.read_text().strip()
    if not key:
        raise ValueError(f"{path} is empty: delete it to generate a new key (live sessions will need to restart)")
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)  # a copied file may have lost its mode; the key must stay private
    return key

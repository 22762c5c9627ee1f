"""Signing keys for tests: strong enough for the start-up check (agentserve/state/secrets.py refuses weak ones), and
the same for the same label, so a test can redeploy with one key or rotate from one to another."""

from __future__ import annotations

import hashlib


def signing_key(label: str) -> str:
    return hashlib.sha256(f"agentserve test signing key: {label}".encode()).hexdigest()

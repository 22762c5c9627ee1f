"""Who gets `x-agentserve-prefix`: the attacker who shares an identity (no keys, or one key) must not read it."""

from __future__ import annotations

import asyncio
import hashlib

from agentserve.config import ServeArgs
from agentserve.doctor import PrefixDoctor
from agentserve.doctor.decode import releasing_decode
from agentserve.doctor.sessions import SessionMemory

KEY = hashlib.sha256(b"sk-tenant").hexdigest()


def _oracle(args: ServeArgs, tokenizer) -> tuple[str | None, str | None]:
    """A victim's turn, then an attacker's probe in the same session (same identity, guessed first message): the
    header the attacker would get for a wrong guess of the victim's reply and for a right one."""
    doctor = PrefixDoctor.from_args(args, tokenizer)
    session = "anon/model/h:first-message"
    prompt = tokenizer.encode("user: deploy the payroll service", add_special_tokens=False)
    secret = tokenizer.encode("the database password is hunter2", add_special_tokens=False)
    doctor.record(session, prompt, secret)

    async def probe(guess: str) -> str | None:
        ids = prompt + tokenizer.encode(guess, add_special_tokens=False)
        return doctor.header(await doctor.check(session, ids))

    try:
        return asyncio.run(probe("the database password is letmein")), asyncio.run(probe("the database password is hunter2"))
    finally:
        doctor.close()


def test_without_keys_the_header_is_off_so_the_reuse_oracle_says_nothing(tokenizer):
    """Without keys every caller is one identity: reused=N would tell the attacker how much of its guess is right."""
    assert _oracle(ServeArgs(), tokenizer) == (None, None)


def test_with_keys_a_caller_gets_reports_on_its_own_key(tokenizer):
    wrong, right = _oracle(ServeArgs(api_keys=(KEY,)), tokenizer)
    assert wrong is not None and right is not None and "reuse=1.0000" in right and "reuse=1.0000" not in wrong


def test_the_header_can_be_asked_for_or_refused_explicitly(tokenizer):
    assert None not in _oracle(ServeArgs(doctor={"header": "always"}), tokenizer)
    assert _oracle(ServeArgs(api_keys=(KEY,), doctor={"header": "never"}), tokenizer) == (None, None)


def test_session_memory_holds_no_guessable_key():
    """The memory is keyed by a secret digest of the session key: the key itself (made of guessable parts) is not
    in it, and two processes (two secrets) key the same session differently."""
    a, b = SessionMemory(10**6), SessionMemory(10**6)
    a.put("anon/model/h:first", [1, 2], [3])
    b.put("anon/model/h:first", [1, 2], [3])
    assert a.get("anon/model/h:first") is not None and a.get("anon/model/h:other") is None
    assert "anon/model/h:first" not in a._turns and set(a._turns) != set(b._turns)

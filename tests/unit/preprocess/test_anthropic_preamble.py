"""Billing-header stripping: its own block, a first line, elsewhere; nothing else changes."""

from __future__ import annotations

from agentserve.apis import anthropic
from agentserve.preprocess.preamble import strip_anthropic_preamble
from tests.support.keys import signing_key

SIGNER = anthropic.ThinkingSigner(signing_key("unit"))
HEADER = "x-anthropic-billing-header: cc_version=2.1.200.abc; cc_entrypoint=cli; cch=1a2b3;"


def conv(system, messages=None):
    req = anthropic.CountTokensRequest.model_validate(
        {"model": "m", "system": system, "messages": messages or [{"role": "user", "content": "hi"}]})
    return anthropic.conversation(req, SIGNER, caller="caller")


def test_own_block_first_line_and_mid_conversation_are_stripped():
    expected = conv([{"type": "text", "text": "identity"}, {"type": "text", "text": "rules"}])
    for system in (
        [{"type": "text", "text": HEADER}, {"type": "text", "text": "identity"}, {"type": "text", "text": "rules"}],
        [{"type": "text", "text": HEADER + "\nidentity"}, {"type": "text", "text": "rules"}],
        [{"type": "text", "text": "identity\n" + HEADER}, {"type": "text", "text": "rules"}],
        "  " + HEADER + "\nidentity\nrules",
    ):
        stripped, found = strip_anthropic_preamble(conv(system))
        assert found and stripped == expected, system
    header_only, found = strip_anthropic_preamble(conv(HEADER))
    assert found and [t.role for t in header_only.turns] == ["user"]
    mid = conv("s", [{"role": "user", "content": "hi"}, {"role": "system", "content": HEADER + "\nenv"}])
    stripped, found = strip_anthropic_preamble(mid)
    assert found and stripped.turns[-1].text() == "env"


def test_untouched_without_header_and_user_text_is_never_stripped():
    c = conv("identity", [{"role": "user", "content": HEADER}])
    stripped, found = strip_anthropic_preamble(c)
    assert not found and stripped is c

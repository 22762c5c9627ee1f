"""The Responses WebSocket's read-ahead (ingress/handlers/responses_socket.py): bounded in frames and bytes, with
room for what Codex sends (a small acknowledgement and its next full-size request at once)."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.config import LimitsSpec
from agentserve.ingress.handlers.responses_socket import INBOX, Inbox, Overrun, TooLarge

MIB = 1024 * 1024


def _inbox() -> Inbox:
    spec = LimitsSpec()
    return Inbox(min(spec.max_ws_frame_bytes, spec.max_body_bytes), spec.max_ws_queued_bytes)


def test_an_acknowledgement_and_a_full_size_request_fit_ahead():
    box = _inbox()
    box.put('{"type":"response.processed"}')
    box.put("x" * (16 * MIB))
    assert asyncio.run(box.get()).startswith('{"type"') and len(asyncio.run(box.get())) == 16 * MIB


def test_a_second_full_frame_ahead_overruns():
    box = _inbox()
    box.put("x" * (16 * MIB))
    with pytest.raises(Overrun):
        box.put("x" * (2 * MIB))


def test_more_frames_than_the_inbox_holds_overrun_whatever_their_size():
    box = _inbox()
    for _ in range(INBOX):
        box.put("{}")
    with pytest.raises(Overrun):
        box.put("{}")


def test_an_oversized_frame_is_kept_only_as_its_size():
    box = Inbox(frame_cap=1024, max_bytes=4096)
    box.put("x" * 5000)
    item = asyncio.run(box.get())
    assert isinstance(item, TooLarge) and (item.size, item.cap) == (5000, 1024)
    box.put("y" * 1000)  # the budget was not charged for it
    box.put("y" * 1000)

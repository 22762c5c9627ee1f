"""Serve's client-controlled request headers as the Ingress replica reads them (serve/client_headers.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentserve.serve import client_headers
from agentserve.serve.client_headers import DISCONNECT_HEADER, TIMEOUT_HEADER, bounded_timeout


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (None, 600.0), (b"86400", 86400.0), (b"90000", 86400.0), (b"30", 30.0), (b"0", 600.0), (b"-5", 600.0),
        (b"inf", 600.0), (b"nan", 600.0), (b"1e999", 600.0), (b"soon", 600.0), (b"\xff", 600.0),
    ],
)  # fmt: skip
def test_a_client_timeout_is_honoured_up_to_the_maximum_and_never_turns_the_timeout_off(raw, want):
    assert bounded_timeout(raw, 600.0, 86400.0) == want


@given(st.binary(max_size=24))
def test_any_header_value_gives_a_finite_bounded_timeout(raw):
    got = bounded_timeout(raw, 600.0, 3600.0)
    assert got is not None and 0 < got <= 3600.0


def test_install_replaces_the_parsers_serve_reads_in_the_replica(monkeypatch):
    from ray.serve._private import replica

    for name in client_headers.PATCHED:  # an upgraded Ray that moved them fails here, not silently
        assert callable(getattr(replica, name))
        monkeypatch.setattr(replica, name, getattr(replica, name))  # restored after the test
    assert replica.parse_disconnect_disabled_header({DISCONNECT_HEADER: b"?1"}) is True  # Serve's own
    assert replica.parse_request_timeout_header({TIMEOUT_HEADER: b"0"}, 600.0) is None  # Serve's own: no timeout
    client_headers.install(86400.0)
    assert replica.parse_disconnect_disabled_header({DISCONNECT_HEADER: b"?1"}) is False
    assert replica.parse_request_timeout_header({TIMEOUT_HEADER: b"0"}, 600.0) == 600.0
    assert replica.parse_request_timeout_header({TIMEOUT_HEADER: b"86400"}, 600.0) == 86400.0

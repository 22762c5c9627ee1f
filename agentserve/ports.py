"""Free TCP ports that stay free until their server binds them.

A port picked with bind(("", 0)) comes from the kernel's ephemeral range, the range every other socket on the machine
draws from (Ray's workers and their gRPC channels, outgoing connections): between picking it and the server binding it
seconds later, another process can take it (seen here: vLLM's KV-event publisher and HAProxy's stats listener failing
with "Address already in use"). Ports below that range are only ever taken by an explicit bind. Ray keeps 10002-19999
for its workers and 30000-31000 / 40000-41000 for direct ingress, so picks come from 20000-29999.
"""

from __future__ import annotations

import random
import socket

_RANGE = range(20000, 30000)


def free_port(host: str = "") -> int:
    """A port nothing is bound to now, outside the ephemeral range (one from it if all tried are taken)."""
    for port in random.sample(_RANGE, 64):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]

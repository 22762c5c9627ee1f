import socket

from agentserve.ports import free_port


def _ephemeral() -> range:
    lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    return range(lo, hi + 1)


def test_a_free_port_is_bindable_and_outside_the_ephemeral_range():
    for _ in range(20):
        port = free_port("127.0.0.1")
        assert port not in _ephemeral()
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))

"""`agentserve-haproxy` in front of a server forwards every client's close, including closes that arrive before
the response starts (admission, prefill): the reason it exists (agentserve/serve/haproxy_front.py). Serve's own
HAProxy options, a plain ASGI server that records whether it saw each client leave."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentserve.ports import free_port
from agentserve.serve.ray_env import haproxy_wrapper_path

pytestmark = pytest.mark.integration

SERVER = '''
import asyncio, sys
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def hold(request):
    await request.body()
    tag = request.query_params["n"]
    for _ in range(100):  # 5 s
        if await request.is_disconnected():
            print(f"left {tag}", flush=True)
            return JSONResponse({})
        await asyncio.sleep(0.05)
    print(f"held {tag}", flush=True)
    return JSONResponse({})

app = Starlette(routes=[Route("/hold", hold, methods=["POST"])])
'''

# The options of Serve's generated config (ray/serve/_private/haproxy_templates.py) that bear on forwarding.
CONFIG = """
global
    maxconn 100
    nbthread 4
defaults
    mode http
    timeout connect 5s
    timeout client 3600s
    timeout http-keep-alive 90s
    option abortonclose
    option splice-request
    option splice-response
    option redispatch 1
    retry-on conn-failure
    option http-no-delay
    option idle-close-on-response
    balance leastconn
frontend f
    bind 127.0.0.1:{front}
    default_backend b
backend b
    http-reuse always
    server s1 127.0.0.1:{back}
"""


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listening on {port}")


def test_every_client_close_reaches_the_server(tmp_path: Path) -> None:
    front, back = free_port(), free_port()
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "haproxy.cfg").write_text(CONFIG.format(front=front, back=back))
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "server:app", "--port", str(back), "--log-level",
                               "warning"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    proxy = subprocess.Popen([haproxy_wrapper_path(), "-db", "-f", str(tmp_path / "haproxy.cfg")])
    try:
        _wait_listening(back)
        _wait_listening(front)

        async def leave_early() -> None:
            for n, after_s in enumerate([0.02, 0.1, 0.3, 0.6] * 4):
                async with httpx.AsyncClient(timeout=10) as client:
                    task = asyncio.create_task(client.post(f"http://127.0.0.1:{front}/hold?n={n}",
                                                           json={"prompt": "x" * 5000}))
                    await asyncio.sleep(after_s)
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)

        asyncio.run(leave_early())
        time.sleep(5.5)  # every request the server got has now ended, seen leaving or held to its end
    finally:
        proxy.terminate()
        server.terminate()
        proxy.wait(10)
        out, _ = server.communicate(timeout=10)
    held = [line for line in out.splitlines() if line.startswith("held")]
    left = [line for line in out.splitlines() if line.startswith("left")]
    assert left, out
    assert not held, f"the server never saw these clients leave: {held}"


def _wait_accepting(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing accepting on {port}")


PARENT = """
import subprocess, sys, time
proxy = subprocess.Popen([sys.argv[1], "-db", "-f", sys.argv[2]])
print(proxy.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] not in ("Z", "X")  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_haproxy_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    """Serve's HAProxyManager killed outright (`ray stop --force`, the OOM killer) must not leave HAProxy holding
    the HTTP port for the next `make serve`."""
    front = free_port()
    (tmp_path / "haproxy.cfg").write_text(CONFIG.format(front=front, back=free_port()))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, haproxy_wrapper_path(), str(tmp_path / "haproxy.cfg")],
                              stdout=subprocess.PIPE, text=True)
    proxy = int(parent.stdout.readline())
    try:
        _wait_accepting(front)  # its backend is down: HAProxy accepts, but answers only after its retries
        assert _alive(proxy)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(proxy) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(proxy), "HAProxy outlived the process that started it"
    finally:
        parent.kill()
        if _alive(proxy):
            subprocess.run(["kill", "-9", str(proxy)], check=False)

"""The toxiproxy server that scripts/setup.sh builds runs and cuts links.

This is the foundation of the fault-injection suite: if the server does not
build or start, the chaos tests cannot mean anything, so this fails loudly.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from toxiproxy.api import APIConsumer
from toxiproxy.server import Toxiproxy

from tests.raft_support import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / ".tools" / "bin" / "toxiproxy-server"


@pytest.fixture
def toxiproxy():
    assert SERVER.exists(), "scripts/setup.sh builds the toxiproxy server into .tools/bin"
    port = free_port()
    proc = subprocess.Popen(
        [str(SERVER), "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        APIConsumer.host, APIConsumer.port = "127.0.0.1", port
        client = Toxiproxy()
        deadline = time.monotonic() + 10
        while not client.running():
            assert proc.poll() is None, "toxiproxy server exited"
            assert time.monotonic() < deadline, "toxiproxy server did not start"
            time.sleep(0.02)  # polling the server's port with a deadline
        yield client
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                data = conn.recv(1024)
                conn.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


def _roundtrip(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
        c.sendall(b"ping")
        return c.recv(1024)


def test_a_proxy_carries_traffic_and_disabling_it_cuts_the_link(toxiproxy, echo_server):
    listen = free_port()
    proxy = toxiproxy.create(
        upstream=f"127.0.0.1:{echo_server}", name="echo", listen=f"127.0.0.1:{listen}"
    )
    assert _roundtrip(listen) == b"ping"
    proxy.disable()
    with pytest.raises(OSError):
        _roundtrip(listen)
    proxy.enable()
    assert _roundtrip(listen) == b"ping"
    proxy.add_toxic(type="latency", attributes={"latency": 300})
    started = time.monotonic()
    assert _roundtrip(listen) == b"ping"
    assert time.monotonic() - started >= 0.3

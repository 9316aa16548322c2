"""The HTTP listener with `[tls]`: https served, connections counted from the
accept (handshake included), a stalled or failed handshake closed within
`tls_handshake_timeout_ms`, plain HTTP refused at once, client certificates
checked, and the node-to-node client (PeerClient) verifying the peer and
presenting its own certificate; on uvloop too (`event_loop = "uvloop"`)."""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import uvloop
from aiohttp import web

from lograft import typed
from lograft.api.app import create_app
from lograft.api.http_config import HttpConfig
from lograft.api.http_server import HttpServer
from lograft.errors import InvalidConfigError, PeerUnreachableError
from lograft.node.peer_client import PeerClient
from lograft.security.local_ca import make_local_certificates
from lograft.security.tls import TlsSettings, client_context, server_context
from tests.raft_support import free_port

HANDSHAKE_TIMEOUT_MS = 400


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    make_local_certificates(directory, nodes=["node-1", "node-2"], clients=["alice"])
    return directory


def settings(certs: Path, node: str = "node-1", **changes: str) -> TlsSettings:
    raw = {
        "certificate_file": str(certs / f"{node}.pem"),
        "key_file": str(certs / f"{node}-key.pem"),
        "ca_file": str(certs / "ca.pem"),
        **changes,
    }
    return typed.build(raw, TlsSettings, error=InvalidConfigError)


async def whoami(request: web.Request) -> web.Response:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    peer = ssl_object.getpeercert() if ssl_object is not None else None
    subject = dict(pair[0] for pair in peer["subject"]) if peer else {}
    return web.json_response({"tls": ssl_object is not None, "cn": subject.get("commonName")})


async def serve(certs: Path, **tls: str) -> HttpServer:
    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    app.router.add_get("/internal/v1/whoami", whoami)
    srv = HttpServer(
        app,
        HttpConfig(
            port=free_port(),
            connections_max=4,
            connections_per_ip_max=4,
            tls_handshake_timeout_ms=HANDSHAKE_TIMEOUT_MS,
        ),
        server_context(settings(certs, **tls)),
    )
    await srv.start()
    return srv


@pytest.fixture
async def server(certs: Path) -> AsyncIterator[HttpServer]:
    srv = await serve(certs)
    try:
        yield srv
    finally:
        await srv.stop()


def url(srv: HttpServer, scheme: str = "https") -> str:
    return f"{scheme}://127.0.0.1:{srv.config.port}"


async def test_https_is_served_and_peers_present_their_certificate(certs: Path) -> None:
    server = await serve(certs, client_certificate="optional")
    calls = PeerClient(cluster_secret="s", tls=client_context(settings(certs, "node-2")))
    try:
        body = await calls.call(url(server), "GET", "/internal/v1/whoami")
        assert body == b'{"tls": true, "cn": "node-2"}'
        # Keep-alive over TLS: the second call reuses the connection.
        assert await calls.call(url(server), "GET", "/healthz")
        assert server.guard.open_connections == 1
    finally:
        await calls.close()
        await server.stop()


async def test_a_peer_without_the_ca_refuses_the_node(server: HttpServer) -> None:
    calls = PeerClient(cluster_secret="s")  # the system's trust store: no local CA
    try:
        with pytest.raises(PeerUnreachableError, match="certificate verify failed"):
            await calls.call(url(server), "GET", "/healthz")
    finally:
        await calls.close()


async def test_plain_http_to_the_tls_port_is_closed_at_once(server: HttpServer) -> None:
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            await session.get(url(server, "http") + "/healthz", timeout=aiohttp.ClientTimeout(5))
    assert time.monotonic() - started < HANDSHAKE_TIMEOUT_MS / 1000
    await wait_for(lambda: server.guard.open_connections == 0)
    # (aiohttp retries a GET once on a connection closed before an answer.)
    assert set(server.faults.counts) == {"tls-handshake"}


async def test_a_stalled_handshake_counts_and_is_closed(server: HttpServer) -> None:
    guard = server.guard
    held = [await asyncio.open_connection("127.0.0.1", server.config.port) for _ in range(4)]
    # Counted before any byte: the fifth is refused without a handshake.
    await wait_for(lambda: guard.open_connections == 4)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.config.port)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert guard.refused_total == 1
    writer.close()
    # The four never start a handshake: closed at tls_handshake_timeout_ms.
    for reader, writer in held:
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    assert guard.open_connections == 0
    assert guard.tls_handshake_failures_total == 4


async def test_a_required_client_certificate(certs: Path) -> None:
    srv = await serve(certs, client_certificate="required")
    try:
        anonymous = client_context(settings(certs), present_certificate=False)
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.get(url(srv) + "/healthz", ssl=anonymous) as resp:
                    await resp.read()
            with_cert = ssl.create_default_context(cafile=certs / "ca.pem")
            with_cert.load_cert_chain(certs / "alice.pem", certs / "alice-key.pem")
            async with session.get(
                url(srv) + "/internal/v1/whoami",
                ssl=with_cert,
                headers={"X-Lograft-Cluster-Secret": "s"},
            ) as resp:
                assert await resp.json() == {"tls": True, "cn": "alice"}
    finally:
        await srv.stop()


async def test_stop_ends_handshakes_under_way(certs: Path) -> None:
    srv = await serve(certs)
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.config.port)
    await wait_for(lambda: srv.guard.open_connections == 1)
    await srv.stop()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert srv.guard.open_connections == 0
    writer.close()


async def wait_for(condition: object, timeout_s: float = 5.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_on_uvloop_a_handshake_read_before_start_tls_completes(certs: Path) -> None:
    """uvloop reads an accepted connection right after connection_made, paused
    or not: a ClientHello sent at once (by another thread or process) reaches
    the guard before start_tls takes the transport, and must still complete
    the handshake (it hung until tls_handshake_timeout_ms before)."""
    context = ssl.create_default_context(cafile=certs / "ca.pem")

    async def main() -> list[int]:
        server = await serve(certs)
        try:

            def get() -> int:
                with urllib.request.urlopen(
                    f"{url(server)}/healthz", timeout=5, context=context
                ) as r:
                    return int(r.status)

            return [await asyncio.to_thread(get) for _ in range(5)]
        finally:
            await server.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(main()) == [200] * 5


async def test_a_call_and_its_answer_each_cross_tls_in_one_write(
    certs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node-to-node call (a forwarded produce, a replica fetch) and its
    answer each leave in one write to the TLS transport: one `SSL_write`, one
    pass of asyncio's TLS layer and one send, not one for the headers and one
    for the body (aiohttp coalesces them from 3.12; pyproject.toml requires
    it). Over TLS every write costs its own records, Python work and syscall."""
    payload = b"b" * (64 * 1024)

    async def answer(request: web.Request) -> web.Response:
        assert await request.read() == payload
        return web.Response(body=payload, content_type="application/octet-stream")

    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    app.router.add_post("/internal/v1/answer", answer)
    srv = HttpServer(app, HttpConfig(port=free_port()), server_context(settings(certs)))
    await srv.start()
    calls = PeerClient(cluster_secret="s", tls=client_context(settings(certs, "node-2")))
    writes: dict[bool, int] = {True: 0, False: 0}  # by server_side
    transport_write = asyncio.sslproto._SSLProtocolTransport.write

    def counted(self: asyncio.sslproto._SSLProtocolTransport, data: bytes) -> None:
        writes[self.get_extra_info("ssl_object").server_side] += 1
        transport_write(self, data)

    try:
        # The connection (and its handshake) first; then count one call.
        await calls.call(url(srv), "POST", "/internal/v1/answer", body=payload)
        monkeypatch.setattr(asyncio.sslproto._SSLProtocolTransport, "write", counted)
        assert await calls.call(url(srv), "POST", "/internal/v1/answer", body=payload) == payload
        assert writes == {False: 1, True: 1}
    finally:
        await calls.close()
        await srv.stop()

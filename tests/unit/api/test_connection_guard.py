"""The connection guard in-process: what the header deadline must not cut, the
caps' accounting, and the error middleware's client faults.

The flood and slowloris themselves run against a real node in
tests/integration/test_http_connections.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from lograft.api.app import create_app
from lograft.api.http_config import HttpConfig
from lograft.api.http_server import HttpServer
from tests.raft_support import free_port

DEADLINE_S = 0.3
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def slow(_request: web.Request) -> web.Response:
    await asyncio.sleep(DEADLINE_S * 2)  # the handler's time, not the client's
    return web.json_response({"ok": True})


async def echo(request: web.Request) -> web.Response:
    return web.json_response({"bytes": len(await request.read())})


async def peer_reset(_request: web.Request) -> web.Response:
    raise ConnectionResetError("a call to another node failed")


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    app.router.add_get("/slow", slow)
    app.router.add_post("/echo", echo)
    app.router.add_get("/peer-reset", peer_reset)
    srv = HttpServer(
        app,
        HttpConfig(
            port=free_port(),
            connections_max=5,
            connections_per_ip_max=3,
            header_read_timeout_ms=int(DEADLINE_S * 1000),
            keepalive_timeout_ms=10_000,
        ),
    )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def connect(srv: HttpServer, source_ip: str = "127.0.0.1") -> Conn:
    return await asyncio.open_connection("127.0.0.1", srv.config.port, local_addr=(source_ip, 0))


async def response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split(b" ", 2)[1])
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return status, await reader.readexactly(length)


async def test_the_deadline_ends_with_the_headers(server: HttpServer) -> None:
    reader, writer = await connect(server)
    # A handler slower than the deadline, twice on one connection.
    for _ in range(2):
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await response(reader))[0] == 200
    # A body trickled in after complete headers, for longer than the deadline.
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
    for byte in b"abcdef":
        await asyncio.sleep(DEADLINE_S / 3)
        writer.write(bytes([byte]))
    assert await response(reader) == (200, b'{"bytes": 6}')
    # Pipelined: the second request waits behind a slow first one.
    writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await response(reader))[0] == 200
    assert (await response(reader))[0] == 200
    writer.close()
    assert server.guard.header_timeouts_total == 0


async def test_a_body_left_unread_is_no_new_request(server: HttpServer) -> None:
    reader, writer = await connect(server)
    # No such route: answered without reading the body (a route's body is
    # read whole before its handler runs, request_bodies.py).
    writer.write(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\nab")
    assert (await response(reader))[0] == 404
    # The rest of that body, slowly: aiohttp reads it away; no deadline runs.
    for byte in b"cdefgh":
        await asyncio.sleep(DEADLINE_S / 3)
        writer.write(bytes([byte]))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await response(reader))[0] == 200
    writer.close()
    assert server.guard.header_timeouts_total == 0


async def test_headers_late_close_the_connection(server: HttpServer) -> None:
    reader, writer = await connect(server)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never ends
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert server.guard.header_timeouts_total == 1
    assert server.faults.counts == {"header-timeout": 1}
    writer.close()


async def test_caps_count_connections_in_and_out(server: HttpServer) -> None:
    guard = server.guard
    held = [await connect(server) for _ in range(3)]
    reader, writer = await connect(server)  # a 4th from 127.0.0.1
    status, body = await response(reader)
    error = orjson.loads(body)["error"]
    assert (status, error["code"]) == (503, "CONNECTIONS_LIMIT_REACHED")
    assert error["details"] == {"connections_per_ip_max": 3} and error["retriable"]
    writer.close()
    others = [await connect(server, "127.0.0.2") for _ in range(2)]
    reader, writer = await connect(server, "127.0.0.3")  # a 6th in all
    status, body = await response(reader)
    assert orjson.loads(body)["error"]["details"] == {"connections_max": 5}
    writer.close()
    assert (guard.open_connections, guard.refused_total) == (5, 2)
    for _, w in held + others:
        w.close()
    async with asyncio.timeout(5):
        while guard.open_connections or guard.connections_from("127.0.0.1"):
            await asyncio.sleep(0.01)
    reader, writer = await connect(server)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await response(reader))[0] == 200
    writer.close()


async def test_client_gone_mid_body_is_a_fault_not_an_error(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _, writer = await connect(server)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
    await writer.drain()
    writer.close()
    async with asyncio.timeout(5):
        while "client-disconnected" not in server.faults.counts:
            await asyncio.sleep(0.01)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_connection_error_inside_a_handler_stays_an_error(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The client is still there: a ConnectionError is the node's own trouble.
    reader, writer = await connect(server)
    writer.write(b"GET /peer-reset HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await response(reader))[0] == 500
    writer.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info
    assert not server.faults.counts


async def test_a_coded_body_is_refused_before_it_is_read(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Bodies are taken as they are (request_bodies.py): a Content-Encoding is
    # a 415 before reading, a plain client error, neither logged nor a 500.
    reader, writer = await connect(server)
    writer.write(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: 10\r\n\r\n0123456789"
    )
    status, body = await response(reader)
    writer.close()
    assert (status, orjson.loads(body)["error"]["code"]) == (415, "UNSUPPORTED_CONTENT_ENCODING")
    assert not server.faults.counts
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

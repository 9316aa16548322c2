"""What aiohttp answers itself (requests that do not parse, an unknown Expect)
is lograft's JSON error body, never plain text."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import orjson
import pytest

from lograft.api.app import create_app
from lograft.api.http_config import HttpConfig
from lograft.api.http_server import HEADER_FIELD_BYTES_MAX, HttpServer
from lograft.api.protocol_errors import MESSAGE_CHARS_MAX, protocol_error
from tests.raft_support import free_port

MALFORMED = {
    "garbage": b"GARBAGE\r\n\r\n",
    "header without a colon": b"GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
    "TLS on the plain port": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    "header too long": b"GET / HTTP/1.1\r\nX-Long: "
    + b"a" * (HEADER_FIELD_BYTES_MAX + 10)
    + b"\r\n\r\n",
    "bad chunk size": b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "unknown Expect": b"GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: tea\r\n\r\n",
    "bad version": b"GET / HTTP/9\r\nHost: x\r\n\r\n",
}


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    srv = HttpServer(app, HttpConfig(port=free_port()))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def exchange(srv: HttpServer, raw: bytes) -> bytes:
    """Everything the node answers to `raw`, up to the end of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.config.port)
    writer.write(raw)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = await reader.readexactly(length)
    writer.close()
    return head + body


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_request_that_does_not_parse_gets_a_json_400(
    server: HttpServer, raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    answer = await exchange(server, raw)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.split(b" ", 2)[1] == b"400", answer[:200]
    assert b"content-type: application/json" in head.lower()
    error = orjson.loads(body)["error"]
    assert (error["code"], error["retriable"]) == ("INVALID_REQUEST", False)
    assert len(error["message"]) < MESSAGE_CHARS_MAX + 100
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_expect_100_continue_still_continues(server: HttpServer) -> None:
    raw = b"POST /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", server.config.port)
    writer.write(raw)
    assert (
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    )
    writer.write(b"{}")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 405 ")  # /healthz is GET only; it got that far
    writer.close()


def test_every_status_aiohttp_answers_has_a_code() -> None:
    assert protocol_error(400, None, "Bad status line").code == "INVALID_REQUEST"
    assert protocol_error(504, None, None).code == "REQUEST_TIMED_OUT"
    assert protocol_error(500, RuntimeError("x"), None).code == "UNKNOWN_SERVER_ERROR"
    long = protocol_error(400, None, "x" * 10_000)
    assert len(long.message) < MESSAGE_CHARS_MAX + 100

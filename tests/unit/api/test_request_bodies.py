"""Request bodies in-process: the budget, its two pools, the deadline, coded bodies.

The same against a real node process: tests/integration/test_http_bodies.py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import orjson
import pytest
from aiohttp import web

from lograft.api import request_bodies
from lograft.api.app import SECRET_HEADER, create_app
from lograft.api.http_config import HttpConfig
from lograft.api.http_server import UNREAD_BODY_DRAIN_MS, HttpServer
from lograft.api.request_bodies import UNCOUNTED_BODY_BYTES_MAX
from lograft.errors import InvalidRequestError
from tests.raft_support import free_port

BODY_MAX = 256 * 1024
INFLIGHT_MAX = 2 * BODY_MAX  # two of the largest bodies
WAIT_S = 0.2
BODY_TIMEOUT_S = 0.5
SECRET = "s"
# Slack for timers on a loaded machine, s.
SLACK_S = 1.5
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def echo(request: web.Request) -> web.Response:
    return web.json_response({"bytes": len(await request.read())})


async def refuse(request: web.Request) -> web.Response:
    await request.read()
    raise InvalidRequestError("no")


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    app = create_app(cluster_secret=SECRET, request_bytes_max=BODY_MAX, ready=lambda: (True, {}))
    app.router.add_post("/echo", echo)
    app.router.add_post("/refuse", refuse)
    app.router.add_post("/internal/v1/echo", echo)
    srv = HttpServer(
        app,
        HttpConfig(
            port=free_port(),
            request_bytes_max=BODY_MAX,
            request_bytes_inflight_max=INFLIGHT_MAX,
            request_bytes_inflight_wait_ms=int(WAIT_S * 1000),
            body_read_timeout_ms=int(BODY_TIMEOUT_S * 1000),
        ),
    )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()
    # Whatever the test did, every body's bytes came back.
    assert srv.bodies.clients.used == srv.bodies.peers.used == 0


async def connect(srv: HttpServer) -> Conn:
    return await asyncio.open_connection("127.0.0.1", srv.config.port)


def head(path: str, length: int | None, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", *extra]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(path: str, *extra: str) -> bytes:
    return head(path, None, "Transfer-Encoding: chunked", *extra)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status_line, *lines = raw.decode().split("\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines if line)}
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split(" ")[1]), headers, body


def code(body: bytes) -> str:
    return str(orjson.loads(body)["error"]["code"])


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def hold_large_body(srv: HttpServer, path: str = "/echo", *extra: str) -> Conn:
    """A connection whose largest body has begun and stalls, holding the budget."""
    reader, writer = await connect(srv)
    writer.write(head(path, BODY_MAX, *extra) + b"x")
    await writer.drain()
    return reader, writer


async def fill_client_budget(srv: HttpServer) -> list[Conn]:
    held = [await hold_large_body(srv) for _ in range(INFLIGHT_MAX // BODY_MAX)]
    await until(lambda: srv.bodies.clients.used == INFLIGHT_MAX)
    return held


def close(conns: list[Conn]) -> None:
    for _, writer in conns:
        writer.close()


# -- what the handler sees ---------------------------------------------------------------


async def test_a_body_is_read_whole_before_the_handler(server: HttpServer) -> None:
    reader, writer = await connect(server)
    for raw, length in [
        (head("/echo", BODY_MAX) + b"x" * BODY_MAX, BODY_MAX),  # counted in the budget
        (head("/echo", 10) + b"0123456789", 10),  # too small to count
        (chunked("/echo") + chunk(b"abc") + chunk(b"x" * 70_000) + b"0\r\n\r\n", 70_003),
        (head("/echo", 0), 0),
    ]:
        writer.write(raw)
        status, _, body = await response(reader)
        assert (status, orjson.loads(body)) == (200, {"bytes": length})
    writer.close()


async def test_a_body_over_request_bytes_max_is_413_before_it_is_read(
    server: HttpServer,
) -> None:
    reader, writer = await connect(server)
    writer.write(head("/echo", BODY_MAX + 1))  # and not one byte of it
    status, headers, body = await response(reader)
    assert (status, code(body)) == (413, "MESSAGE_TOO_LARGE")
    assert orjson.loads(body)["error"]["details"] == {"request_bytes_max": BODY_MAX}
    assert headers["connection"] == "close"
    writer.close()
    # A chunked one is cut when it grows past the limit.
    reader, writer = await connect(server)
    writer.write(chunked("/echo") + chunk(b"x" * BODY_MAX) + chunk(b"x"))
    status, headers, body = await response(reader)
    assert (status, code(body), headers["connection"]) == (413, "MESSAGE_TOO_LARGE", "close")
    writer.close()


@pytest.mark.parametrize(
    "coding",
    [
        "Content-Encoding: gzip",
        "Content-Encoding: br",
        "Content-Encoding: deflate, gzip",
        "Transfer-Encoding: gzip, chunked",
    ],
)
async def test_a_coded_body_is_415_before_it_is_read(server: HttpServer, coding: str) -> None:
    reader, writer = await connect(server)
    if coding.startswith("Transfer"):
        writer.write(head("/echo", None, coding) + chunk(b"\x1f\x8b") + b"0\r\n\r\n")
    else:
        writer.write(head("/echo", 2, coding) + b"\x1f\x8b")
    status, headers, body = await response(reader)
    assert (status, code(body)) == (415, "UNSUPPORTED_CONTENT_ENCODING")
    assert headers["accept-encoding"] == "identity"
    assert headers["connection"] == "close"
    writer.close()


async def test_content_encoding_identity_is_a_body_as_it_is(server: HttpServer) -> None:
    reader, writer = await connect(server)
    writer.write(head("/echo", 3, "Content-Encoding: identity") + b"abc")
    status, _, body = await response(reader)
    assert (status, body) == (200, b'{"bytes": 3}')
    writer.close()


# -- the budget ---------------------------------------------------------------------------


async def test_large_bodies_over_the_budget_wait_then_503_while_small_ones_answer(
    server: HttpServer,
) -> None:
    held = await fill_client_budget(server)
    try:
        reader, writer = await connect(server)
        started = time.monotonic()
        writer.write(head("/echo", BODY_MAX) + b"x" * BODY_MAX)
        status, headers, body = await response(reader)
        waited = time.monotonic() - started
        error = orjson.loads(body)["error"]
        assert (status, error["code"], error["retriable"]) == (
            503,
            "REQUEST_BYTES_INFLIGHT_LIMIT_REACHED",
            True,
        )
        assert error["details"] == {"request_bytes_inflight_max": INFLIGHT_MAX}
        assert headers["connection"] == "close"
        assert WAIT_S * 0.9 <= waited < WAIT_S + SLACK_S
        writer.close()
        # A small body takes nothing from the budget: it answers at once.
        reader, writer = await connect(server)
        writer.write(head("/echo", UNCOUNTED_BODY_BYTES_MAX) + b"x" * UNCOUNTED_BODY_BYTES_MAX)
        assert (await response(reader))[0] == 200
        writer.close()
        # The holders are cut at their deadline, giving their bytes back.
        for reader, _ in held:
            status, _, body = await response(reader)
            assert (status, code(body)) == (408, "REQUEST_BODY_TIMEOUT")
    finally:
        close(held)
    assert server.bodies.clients.used == 0
    assert (server.bodies.refused_total, server.bodies.timeouts_total) == (1, 2)
    assert server.faults.counts == {"request-bytes-limit": 1, "body-timeout": 2}


async def test_a_waiting_body_goes_in_when_room_comes_free(server: HttpServer) -> None:
    (first, second) = await fill_client_budget(server)
    try:
        reader, writer = await connect(server)
        writer.write(head("/echo", BODY_MAX) + b"y" * BODY_MAX)
        await until(lambda: server.bodies.clients.waiting == 1)
        first[1].write(b"x" * (BODY_MAX - 1))  # the rest of the first body
        assert (await response(first[0]))[0] == 200
        status, _, body = await response(reader)
        assert (status, orjson.loads(body)) == (200, {"bytes": BODY_MAX})
        writer.close()
    finally:
        close([first, second])


async def test_a_chunked_body_that_does_not_fit_is_refused_at_once(server: HttpServer) -> None:
    # It would hold part of the budget while waiting for more: it never waits.
    held = await fill_client_budget(server)
    try:
        reader, writer = await connect(server)
        started = time.monotonic()
        writer.write(chunked("/echo") + chunk(b"x" * (UNCOUNTED_BODY_BYTES_MAX + 1)))
        status, _, body = await response(reader)
        assert (status, code(body)) == (503, "REQUEST_BYTES_INFLIGHT_LIMIT_REACHED")
        assert time.monotonic() - started < WAIT_S
        writer.close()
    finally:
        close(held)


async def test_node_to_node_bodies_have_a_budget_of_their_own(server: HttpServer) -> None:
    held = await fill_client_budget(server)
    try:
        # A peer's forwarded body is not held up by clients' bodies.
        reader, writer = await connect(server)
        writer.write(head("/internal/v1/echo", BODY_MAX, f"{SECRET_HEADER}: {SECRET}"))
        writer.write(b"x" * BODY_MAX)
        status, _, body = await response(reader)
        assert (status, orjson.loads(body)) == (200, {"bytes": BODY_MAX})
        writer.close()
        # Without the secret nothing is read or taken: the caller is refused first.
        internal = await hold_large_body(server, "/internal/v1/echo")
        status, _, body = await response(internal[0])
        assert (status, code(body)) == (401, "SASL_AUTHENTICATION_FAILED")
        internal[1].close()
        # And a peer's stalled body holds the peers' budget, not the clients'.
        internal = await hold_large_body(server, "/internal/v1/echo", f"{SECRET_HEADER}: {SECRET}")
        await until(lambda: server.bodies.peers.used == BODY_MAX)
        assert server.bodies.clients.used == INFLIGHT_MAX
        internal[1].close()
    finally:
        close(held)


# -- every exit path gives the bytes back --------------------------------------------------


async def test_bytes_come_back_when_the_client_goes_mid_body(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    _, writer = await hold_large_body(server)
    await until(lambda: server.bodies.clients.used == BODY_MAX)
    writer.close()
    await until(lambda: server.bodies.clients.used == 0)
    await until(lambda: "client-disconnected" in server.faults.counts)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_bytes_come_back_when_the_handler_fails(server: HttpServer) -> None:
    reader, writer = await connect(server)
    writer.write(head("/refuse", BODY_MAX) + b"x" * BODY_MAX)
    status, _, body = await response(reader)
    assert (status, code(body)) == (400, "INVALID_REQUEST")
    assert server.bodies.clients.used == 0
    writer.close()


# -- the body deadline ---------------------------------------------------------------------


async def test_a_slow_body_is_cut_at_its_deadline_and_the_connection_closed(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    reader, writer = await connect(server)
    writer.write(head("/echo", 1000))
    started = time.monotonic()
    answer = asyncio.ensure_future(response(reader))
    while not answer.done():  # a byte every 50 ms: it never stops, it is only slow
        writer.write(b"x")
        await asyncio.wait([answer], timeout=0.05)
    status, headers, body = answer.result()
    cut_at = time.monotonic() - started
    error = orjson.loads(body)["error"]
    assert (status, error["code"], error["retriable"]) == (408, "REQUEST_BODY_TIMEOUT", True)
    assert error["details"] == {"body_read_timeout_ms": int(BODY_TIMEOUT_S * 1000)}
    assert headers["connection"] == "close"
    assert BODY_TIMEOUT_S * 0.9 <= cut_at < BODY_TIMEOUT_S + SLACK_S
    # Then closed: what is left of the body is drained for a short while at most.
    async with asyncio.timeout(UNREAD_BODY_DRAIN_MS / 1000 + SLACK_S):
        assert await reader.read() == b""
    writer.close()
    assert server.faults.counts == {"body-timeout": 1}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_body_whole_on_arrival_arms_no_deadline_timer(
    server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counts the body deadlines armed (asyncio's own module is patched: only
    # the delay tells them from other timeouts); a body still arriving arms one.
    armed: list[float] = []
    real_timeout = asyncio.timeout

    def counting_timeout(delay: float | None) -> asyncio.Timeout:
        if delay == BODY_TIMEOUT_S:
            armed.append(delay)
        return real_timeout(delay)

    monkeypatch.setattr(request_bodies.asyncio, "timeout", counting_timeout)
    reader, writer = await connect(server)
    writer.write(head("/echo", 10) + b"0123456789")  # one write: whole when read
    assert (await response(reader))[0] == 200
    assert armed == []
    writer.write(head("/echo", 10) + b"01234")
    await writer.drain()
    await until(lambda: bool(armed))  # the rest is not there yet: the deadline is armed
    writer.write(b"56789")
    status, _, body = await response(reader)
    assert (status, orjson.loads(body)) == (200, {"bytes": 10})
    assert armed == [BODY_TIMEOUT_S]
    writer.close()


async def test_a_chunked_body_whose_framing_breaks_ends_at_the_deadline(
    server: HttpServer,
) -> None:
    # aiohttp's parser answers what follows a broken chunk with a 400 but does
    # not tell the body being read: without a deadline it would wait forever.
    reader, writer = await connect(server)
    writer.write(chunked("/echo") + chunk(b"x" * (UNCOUNTED_BODY_BYTES_MAX + 1)))
    await until(lambda: server.bodies.clients.used > 0)  # being read
    writer.write(b"zz\r\n")
    status, _, body = await response(reader)
    assert (status, code(body)) == (408, "REQUEST_BODY_TIMEOUT")
    writer.close()


ADMIN_MAX = 16 * 1024


@pytest.fixture
async def small_admin() -> AsyncIterator[HttpServer]:
    """Produce routes take BODY_MAX, every other public route ADMIN_MAX."""
    app = create_app(cluster_secret=SECRET, request_bytes_max=BODY_MAX, ready=lambda: (True, {}))
    app.router.add_post("/v1/topics/{topic}/records", echo)
    app.router.add_post("/v1/topics/{topic}/partitions/{partition}/batches", echo)
    app.router.add_post("/v1/groups/{group:[^/]+}/members", echo)
    app.router.add_patch("/v1/topics/{topic}/configs", echo)
    app.router.add_post("/internal/v1/echo", echo)
    srv = HttpServer(
        app,
        HttpConfig(
            port=free_port(),
            request_bytes_max=BODY_MAX,
            admin_request_bytes_max=ADMIN_MAX,
            request_bytes_inflight_max=INFLIGHT_MAX,
        ),
    )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.mark.parametrize("chunked_body", [False, True])
async def test_only_produce_and_internal_bodies_may_be_request_bytes_max(
    small_admin: HttpServer, chunked_body: bool
) -> None:
    import aiohttp

    body = b"x" * (ADMIN_MAX + 1)

    async def send(method: str, path: str) -> tuple[int, dict]:
        data: object = body
        if chunked_body:

            async def gen() -> AsyncIterator[bytes]:
                yield body

            data = gen()
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method,
                f"http://127.0.0.1:{small_admin.config.port}{path}",
                data=data,
                headers={SECRET_HEADER: SECRET},
            ) as resp,
        ):
            return resp.status, orjson.loads(await resp.read())

    assert await send("POST", "/v1/topics/t/records") == (200, {"bytes": len(body)})
    assert await send("POST", "/v1/topics/t/partitions/0/batches") == (200, {"bytes": len(body)})
    assert await send("POST", "/internal/v1/echo") == (200, {"bytes": len(body)})
    for method, path in (("POST", "/v1/groups/g/members"), ("PATCH", "/v1/topics/t/configs")):
        status, doc = await send(method, path)
        assert status == 413, doc
        assert doc["error"]["code"] == "MESSAGE_TOO_LARGE"
        assert doc["error"]["details"] == {"admin_request_bytes_max": ADMIN_MAX}

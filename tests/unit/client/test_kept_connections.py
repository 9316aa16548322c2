"""Raw-batch exchanges over kept connections (kept_connections.py, through
HttpTransport): reuse, headers, typed failures with the `sent` flag, the
connection bound, and a stale kept connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from lograft.client.credentials import Credentials
from lograft.client.errors import NetworkError
from lograft.client.transport import BATCH_CONTENT_TYPE, CLIENT_ID_HEADER, HttpTransport
from tests.raft_support import free_port

FETCH = {"Accept": BATCH_CONTENT_TYPE}
PRODUCE = {"Content-Type": BATCH_CONTENT_TYPE}
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A raw HTTP server on 127.0.0.1 whose answers the test scripts."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.port = free_port()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.requests.append((head[0], headers, body))
        return head[0], headers, body

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def answer(status: int, body: bytes, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n"
        f"x-lograft-next-offset: 7\r\n{extra}\r\n"
    ).encode() + body


async def keep_answering(server: Server, reader, writer) -> None:
    while True:
        await server.read_request(reader)
        writer.write(answer(200, b"batch"))


@pytest.fixture
async def served() -> AsyncIterator[Callable[[Handler], Awaitable[tuple[Server, str]]]]:
    servers: list[Server] = []

    async def start(handler: Handler) -> tuple[Server, str]:
        server = Server(handler)
        servers.append(server)
        return server, await server.start()

    yield start
    for server in servers:
        await server.stop()


async def test_exchanges_reuse_one_connection_and_carry_the_client_headers(served):
    server: Server

    async def handler(reader, writer):
        await keep_answering(server, reader, writer)

    server, base = await served(handler)
    t = HttpTransport(client_id="me", credentials=Credentials(bearer_token="tok"))
    try:
        for offset in (0, 5):
            resp = await t.request(
                "GET",
                f"{base}/v1/topics/t/partitions/0/records",
                params={"offset": str(offset), "max_wait_ms": "0"},
                headers=FETCH,
                timeout_ms=5_000,
            )
            assert (resp.status, resp.body) == (200, b"batch")
            assert resp.headers["X-Lograft-Next-Offset"] == "7"  # any case
        resp = await t.request(
            "POST",
            f"{base}/v1/topics/t/partitions/0/batches",
            params={"acks": "all"},
            data=b"\x00" * 10,
            headers=PRODUCE,
            timeout_ms=5_000,
        )
        assert resp.status == 200
    finally:
        await t.close()
    assert server.connections == 1
    lines = [r[0] for r in server.requests]
    assert lines == [
        "GET /v1/topics/t/partitions/0/records?offset=0&max_wait_ms=0 HTTP/1.1",
        "GET /v1/topics/t/partitions/0/records?offset=5&max_wait_ms=0 HTTP/1.1",
        "POST /v1/topics/t/partitions/0/batches?acks=all HTTP/1.1",
    ]
    _, headers, body = server.requests[2]
    assert headers[CLIENT_ID_HEADER.lower()] == "me"
    assert headers["authorization"] == "Bearer tok"
    assert headers["content-type"] == BATCH_CONTENT_TYPE
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert body == b"\x00" * 10


async def test_an_error_answer_is_returned_with_its_status():
    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(answer(404, b'{"error": {"code": "UNKNOWN_TOPIC_OR_PARTITION"}}'))

    server = Server(handler)
    base = await server.start()
    t = HttpTransport()
    try:
        resp = await t.request("GET", f"{base}/r", headers=FETCH, timeout_ms=5_000)
        assert resp.status == 404 and not resp.ok
        assert resp.error().code == "UNKNOWN_TOPIC_OR_PARTITION"
    finally:
        await t.close()
        await server.stop()


async def test_a_refused_connection_was_not_sent():
    t = HttpTransport()
    try:
        with pytest.raises(NetworkError) as caught:
            await t.request(
                "POST",
                f"http://127.0.0.1:{free_port()}/b",
                data=b"x",
                headers=PRODUCE,
                timeout_ms=5_000,
            )
    finally:
        await t.close()
    assert caught.value.details["sent"] is False


async def test_a_silent_node_times_out_sent_and_its_connection_is_dropped(served):
    async def handler(reader, writer):
        await server.read_request(reader)
        await asyncio.sleep(30)  # never answers

    server, base = await served(handler)
    t = HttpTransport()
    try:
        with pytest.raises(NetworkError, match="timed out") as caught:
            await t.request("POST", f"{base}/b", data=b"x", headers=PRODUCE, timeout_ms=200)
        assert caught.value.details["sent"] is True
        with pytest.raises(NetworkError):
            await t.request("POST", f"{base}/b", data=b"x", headers=PRODUCE, timeout_ms=200)
    finally:
        await t.close()
    assert server.connections == 2  # the timed-out connection was not reused


async def test_an_answer_that_is_not_http_fails_sent(served):
    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")

    server, base = await served(handler)
    t = HttpTransport()
    try:
        with pytest.raises(NetworkError, match="not HTTP") as caught:
            await t.request("GET", f"{base}/r", headers=FETCH, timeout_ms=5_000)
    finally:
        await t.close()
    assert caught.value.details["sent"] is True


@pytest.mark.parametrize(("method", "resent"), [("GET", True), ("POST", False)])
async def test_a_kept_connection_closed_unanswered_resends_a_get_but_not_a_post(
    served, method, resent
):
    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(answer(200, b"ok"))
        if server.connections == 1:
            # The first connection takes one more request and closes
            # without a byte of answer (a node closing a kept connection).
            await server.read_request(reader)
            return
        while True:
            await server.read_request(reader)
            writer.write(answer(200, b"ok"))

    server, base = await served(handler)
    t = HttpTransport()
    headers, data = (FETCH, None) if method == "GET" else (PRODUCE, b"x")
    try:
        assert (
            await t.request(method, f"{base}/r", data=data, headers=headers, timeout_ms=5_000)
        ).ok
        if resent:
            resp = await t.request(
                method, f"{base}/r", data=data, headers=headers, timeout_ms=5_000
            )
            assert resp.ok and server.connections == 2 and len(server.requests) == 3
        else:
            with pytest.raises(NetworkError, match="closed before an answer") as caught:
                await t.request(method, f"{base}/r", data=data, headers=headers, timeout_ms=5_000)
            assert caught.value.details["sent"] is True
            assert server.connections == 1 and len(server.requests) == 2
    finally:
        await t.close()


async def test_open_connections_stay_within_connections_max(served):
    open_now = 0
    most = 0

    async def handler(reader, writer):
        nonlocal open_now, most
        open_now += 1
        most = max(most, open_now)
        try:
            while True:
                await server.read_request(reader)
                await asyncio.sleep(0.02)
                writer.write(answer(200, b"b"))
        finally:
            open_now -= 1

    server, base = await served(handler)
    t = HttpTransport(connections_max=2)
    try:
        results = await asyncio.gather(
            *(t.request("GET", f"{base}/r", headers=FETCH, timeout_ms=5_000) for _ in range(8))
        )
    finally:
        await t.close()
    assert all(r.ok for r in results)
    assert most <= 2


async def test_a_line_break_in_a_header_is_refused_before_sending():
    t = HttpTransport(credentials=Credentials(bearer_token="tok"))
    try:
        with pytest.raises(ValueError, match="line break"):
            await t.request(
                "GET",
                "http://127.0.0.1:1/r",
                headers={**FETCH, "X-A": "1\r\nX-B: 2"},
                timeout_ms=1_000,
            )
    finally:
        await t.close()

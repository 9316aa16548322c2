"""The HTTP transport bounds what a node can make the client buffer: an
answer's body is read as it arrives and refused past the caller's bound
(a declared Content-Length over it before anything is read)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from lograft.client.errors import UnexpectedResponseError
from lograft.client.transport import BATCH_CONTENT_TYPE, HttpTransport
from tests.raft_support import free_port

PIECE = b"x" * 65536
LIMIT = 1 << 20


async def endless(request: web.Request) -> web.StreamResponse:
    # Chunked, no length declared: only the client can stop it.
    resp = web.StreamResponse()
    await resp.prepare(request)
    try:
        while True:
            await resp.write(PIECE)
    except (ConnectionError, asyncio.CancelledError):
        pass
    return resp


async def declared(request: web.Request) -> web.Response:
    return web.Response(body=b"y" * (LIMIT + 1))


async def exact(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    for _ in range(LIMIT // len(PIECE)):
        await resp.write(PIECE)
    await resp.write_eof()
    return resp


@pytest.fixture(params=["aiohttp", "kept"])
def via(request: pytest.FixtureRequest) -> dict[str, str] | None:
    """Headers that pick the transport's path: aiohttp's client, or (a raw
    batch asked for) its kept connections (kept_connections.py)."""
    return {"Accept": BATCH_CONTENT_TYPE} if request.param == "kept" else None


@pytest.fixture
async def base() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/endless", endless)
    app.router.add_get("/declared", declared)
    app.router.add_get("/exact", exact)
    server = TestServer(app, host="127.0.0.1", port=free_port())
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


async def test_an_endless_body_is_refused_past_the_bound_in_bounded_memory(base, via):
    transport = HttpTransport(response_max_bytes=LIMIT)
    tracemalloc.start()
    try:
        with pytest.raises(UnexpectedResponseError) as info:
            await transport.request("GET", f"{base}/endless", headers=via, timeout_ms=20_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await transport.close()
    assert info.value.details["limit"] == LIMIT
    assert "response_max_bytes" in info.value.message
    assert peak < 4 * LIMIT


async def test_a_caller_bound_wins_and_a_declared_length_is_refused_unread(base, via):
    transport = HttpTransport()  # default 16 MiB: the caller's bound is what counts
    try:
        with pytest.raises(UnexpectedResponseError, match="declares"):
            await transport.request(
                "GET", f"{base}/declared", headers=via, timeout_ms=20_000, body_max_bytes=LIMIT
            )
        with pytest.raises(UnexpectedResponseError, match="goes on"):
            await transport.request(
                "GET", f"{base}/exact", headers=via, timeout_ms=20_000, body_max_bytes=LIMIT - 1
            )
        # A body of exactly the bound is accepted, whole.
        resp = await transport.request(
            "GET", f"{base}/exact", headers=via, timeout_ms=20_000, body_max_bytes=LIMIT
        )
        assert resp.status == 200 and len(resp.body) == LIMIT
    finally:
        await transport.close()

"""The kept connection replica fetches go over (`PeerClient.exchange`,
node/peer_channel.py): one connection reused, the same answers and errors as
the pool's calls, bounded answers, and a stale or broken connection replaced."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from lograft.api.app import SECRET_HEADER
from lograft.errors import NotLeaderOrFollowerError, PeerAnswerUnreadableError, PeerUnreachableError
from lograft.node.peer_channel import ChannelError, PeerChannel
from lograft.node.peer_client import PeerClient


class Brokers:
    def __init__(self, urls: dict[int, str]) -> None:
        self.urls = urls

    def broker_url(self, broker_id: int) -> str | None:
        return self.urls.get(broker_id)


class Peer:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.stall = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{what}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        what = request.match_info["what"]
        body = await request.read()
        if what == "echo":
            return web.Response(body=body)
        if what == "big":
            return web.Response(body=b"x" * 5000)
        if what == "chunked":
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(3):
                await resp.write(b"%d" % i * 100)
            await resp.write_eof()
            return resp
        if what == "refused":
            error = NotLeaderOrFollowerError("not here", leader_id=3)
            return web.json_response({"error": error.to_dict()}, status=400)
        if what == "stall":
            await self.stall.wait()
            return web.Response(body=b"late")
        if what == "close":
            return web.Response(body=b"bye", headers={"Connection": "close"})
        return web.Response(status=502, text="<html>bad gateway</html>")


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, PeerClient, TestServer]]:
    fake = Peer()
    async with TestServer(fake.app(), host="127.0.0.1") as server:
        url = str(server.make_url("")).rstrip("/")
        client = PeerClient(
            cluster_secret="sesame", metadata=Brokers({2: url}), answer_bytes_max=4096
        )
        try:
            yield fake, client, server
        finally:
            fake.stall.set()
            await client.close()


async def test_calls_share_one_connection_and_send_the_secret(peer) -> None:
    fake, client, _server = peer
    for i in range(5):
        assert await client.exchange(2, "/echo", b'{"n": %d}' % i) == b'{"n": %d}' % i
    assert client._channels[2].connections_opened == 1
    assert all(h[SECRET_HEADER] == "sesame" for h in fake.headers)
    assert fake.headers[-1]["Content-Type"] == "application/json"


async def test_errors_are_those_of_the_pool(peer) -> None:
    _fake, client, _server = peer
    with pytest.raises(NotLeaderOrFollowerError) as info:
        await client.exchange(2, "/refused", b"{}")
    assert info.value.details == {"leader_id": 3}
    with pytest.raises(PeerAnswerUnreadableError) as unreadable:
        await client.exchange(2, "/proxy", b"{}")
    assert unreadable.value.details["status"] == 502
    # An error answer leaves the connection usable.
    assert await client.exchange(2, "/echo", b"ok") == b"ok"
    assert client._channels[2].connections_opened == 1


async def test_a_chunked_answer_is_read_whole(peer) -> None:
    _fake, client, _server = peer
    assert await client.exchange(2, "/chunked", b"") == b"0" * 100 + b"1" * 100 + b"2" * 100


async def test_an_answer_past_the_bound_is_unreachable_and_the_connection_replaced(peer) -> None:
    _fake, client, _server = peer
    with pytest.raises(PeerUnreachableError) as info:
        await client.exchange(2, "/big", b"")
    assert "4096" in info.value.message and info.value.details == {"leader_id": 2}
    assert not client._channels[2].connected
    assert await client.exchange(2, "/echo", b"again") == b"again"
    assert client._channels[2].connections_opened == 2


async def test_a_timeout_closes_the_connection(peer) -> None:
    fake, client, _server = peer
    with pytest.raises(PeerUnreachableError):
        await client.exchange(2, "/stall", b"", timeout_ms=200)
    assert not client._channels[2].connected
    fake.stall.set()
    assert await client.exchange(2, "/echo", b"x") == b"x"


async def test_a_connection_the_peer_closed_is_replaced(peer) -> None:
    _fake, client, server = peer
    assert await client.exchange(2, "/close", b"") == b"bye"
    assert not client._channels[2].connected  # Connection: close honoured
    assert await client.exchange(2, "/echo", b"1") == b"1"
    # The peer drops every kept connection (as its keep-alive timeout does):
    # the next call goes out once more on a new connection, not failed.
    for proto in list(server.runner.server.connections):  # type: ignore[union-attr]
        proto.force_close()
        if proto.transport is not None:
            proto.transport.close()
    await asyncio.sleep(0.05)  # let the close reach the client's socket
    assert await client.exchange(2, "/echo", b"2") == b"2"
    assert client._channels[2].connections_opened == 3


async def test_a_cancelled_call_leaves_no_half_read_connection(peer) -> None:
    fake, client, _server = peer
    call = asyncio.create_task(client.exchange(2, "/stall", b""))
    while not fake.headers:
        await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not client._channels[2].connected
    fake.stall.set()
    assert await client.exchange(2, "/echo", b"y") == b"y"


async def test_a_peer_not_listening_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    client = PeerClient(cluster_secret="s", metadata=Brokers({2: f"http://127.0.0.1:{closed}"}))
    try:
        with pytest.raises(PeerUnreachableError) as info:
            await client.exchange(2, "/echo", b"{}", timeout_ms=2_000)
        assert info.value.details == {"leader_id": 2}
    finally:
        await client.close()


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n",
    ],
)
async def test_an_answer_that_is_not_http_is_a_channel_error(answer: bytes) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    channel = PeerChannel(
        f"http://127.0.0.1:{port}", cluster_secret="s", answer_bytes_max=1 << 20, tls=None
    )
    try:
        with pytest.raises(ChannelError):
            await channel.post("/x", b"", content_type="application/json", timeout_s=5)
        assert not channel.connected
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


async def test_a_kept_connection_closed_unanswered_is_resent_once_on_a_new_one() -> None:
    conns = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        mine = conns
        served = 0
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(n)
            if (mine == 1 and served == 1) or mine == 3:
                break  # a kept connection closed as the call went out; then a bad peer
            served += 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    channel = PeerChannel(
        f"http://127.0.0.1:{port}", cluster_secret="s", answer_bytes_max=1 << 20, tls=None
    )
    post = channel.post
    try:
        assert await post("/x", b"a", content_type="application/json", timeout_s=5) == (200, b"ok")
        assert await post("/x", b"b", content_type="application/json", timeout_s=5) == (200, b"ok")
        assert channel.connections_opened == 2
        # A new connection closed unanswered is not sent again.
        channel.close()
        with pytest.raises(ChannelError):
            await post("/x", b"c", content_type="application/json", timeout_s=5)
        assert channel.connections_opened == 3
    finally:
        channel.close()
        server.close()
        await server.wait_closed()

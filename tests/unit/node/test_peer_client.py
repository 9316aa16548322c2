"""The one client for node-to-node calls: what it sends, how it reads answers
(bounded), and the errors it raises for each way a call can fail."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from lograft.api.app import SECRET_HEADER
from lograft.errors import (
    BrokerNotAvailableError,
    LograftError,
    NotLeaderOrFollowerError,
    PeerAddressUnknownError,
    PeerAnswerUnreadableError,
    PeerUnreachableError,
)
from lograft.node.config import parse_config
from lograft.node.controller_client import ControllerClient
from lograft.node.peer_client import PeerClient


class Brokers:
    """A MetadataView with only the addresses a PeerClient needs."""

    def __init__(self, urls: dict[int, str]) -> None:
        self.urls = urls

    def broker_url(self, broker_id: int) -> str | None:
        return self.urls.get(broker_id)


class Peer:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{what}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        what = request.match_info["what"]
        if what == "echo":
            return web.Response(body=await request.read())
        if what == "big":
            return web.Response(body=b"x" * 5000)
        if what == "big-chunked":
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for _ in range(5):
                await resp.write(b"x" * 1000)
            await resp.write_eof()
            return resp
        if what == "refused":
            error = NotLeaderOrFollowerError("not here", leader_id=3)
            return web.json_response({"error": error.to_dict()}, status=400)
        return web.Response(status=502, text="<html>bad gateway</html>")


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, PeerClient]]:
    fake = Peer()
    async with TestServer(fake.app(), host="127.0.0.1") as server:
        url = str(server.make_url("")).rstrip("/")
        client = PeerClient(
            cluster_secret="sesame", metadata=Brokers({2: url}), answer_bytes_max=4096
        )
        try:
            yield fake, client
        finally:
            await client.close()


async def test_a_call_sends_the_cluster_secret_and_returns_the_body(peer) -> None:
    fake, client = peer
    assert await client.post(2, "/echo", b'{"a": 1}') == b'{"a": 1}'
    assert fake.headers[-1][SECRET_HEADER] == "sesame"
    assert fake.headers[-1]["Content-Type"] == "application/json"


async def test_an_error_answer_is_raised_as_the_peer_raised_it(peer) -> None:
    _fake, client = peer
    with pytest.raises(NotLeaderOrFollowerError) as info:
        await client.get(2, "/refused")
    assert info.value.details == {"leader_id": 3}


async def test_an_answer_that_is_no_lograft_error_names_its_status(peer) -> None:
    _fake, client = peer
    with pytest.raises(PeerAnswerUnreadableError) as info:
        await client.get(2, "/proxy")
    assert info.value.code == "BROKER_NOT_AVAILABLE" and info.value.retriable
    assert info.value.details["status"] == 502
    assert "bad gateway" in info.value.message


@pytest.mark.parametrize("path", ["/big", "/big-chunked"])
async def test_an_answer_past_the_bound_is_not_read(peer, path: str) -> None:
    _fake, client = peer
    with pytest.raises(PeerUnreachableError) as info:
        await client.get(2, path)
    assert info.value.code == "BROKER_NOT_AVAILABLE"
    assert "4096" in info.value.message


async def test_a_peer_without_an_address_or_not_listening_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    client = PeerClient(cluster_secret="s", metadata=Brokers({2: f"http://127.0.0.1:{closed}"}))
    try:
        with pytest.raises(PeerAddressUnknownError):
            await client.post(3, "/echo", b"{}")
        with pytest.raises(PeerUnreachableError) as info:
            await client.post(2, "/echo", b"{}", timeout_ms=2_000)
        assert isinstance(info.value, BrokerNotAvailableError)
        assert info.value.details == {"leader_id": 2}
    finally:
        await client.close()


class ActiveRuntime:
    """A LocalController stand-in: records calls, answers in process."""

    def __init__(self) -> None:
        self.active = True
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, body))
        return {"done": name}


async def test_a_controller_call_on_the_active_controller_stays_in_process() -> None:
    config = parse_config(
        {
            "node_id": 1,
            "roles": ["broker"],
            "data_dir": "d",
            "voters": [{"id": 2, "raft": "127.0.0.1:1", "http": "127.0.0.1:1"}],
        }
    )
    local = ActiveRuntime()
    # No HTTP: the only voter's address is dead, and the client never opens a pool.
    calls = PeerClient(cluster_secret="s")
    client = ControllerClient(config, calls, local, lambda: 1)  # type: ignore[arg-type]
    assert await client.call("create-topic", {"name": "t"}) == {"done": "create-topic"}
    assert local.calls == [("create-topic", {"name": "t"})]
    assert calls.closed
    # Not active (another node leads): over HTTP, to the voters, which are unreachable.
    local.active = False
    with pytest.raises(LograftError):
        await client.call("create-topic", {"name": "t"}, timeout_ms=2_000)
    await calls.close()

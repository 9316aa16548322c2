"""Every way a stream ends gives back what it took: its slot, its reads, the
tasks and requests it started (issue 9, part 3).

Broker 1 serves the streams as a node does (`web.AppRunner`, whose handlers
aiohttp does not cancel when their client leaves; `TestServer` would, and
would hide what these tests look for). A second app plays the leader of
partitions led elsewhere.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from msgspec.structs import replace

from lograft.api.app import create_app
from lograft.api.partition_offsets import PATH as PARTITION_OFFSETS_PATH
from lograft.api.partition_offsets import add_partition_offsets_route
from lograft.api.routes_data import DataRoutes
from lograft.api.stream.limits import StreamLimits
from lograft.api.stream.routes import StreamRoutes
from lograft.api.stream.session import memory_bound_bytes
from lograft.brokers.replica_manager import ReplicaManager
from lograft.node.peer_client import PeerClient
from tests.raft_support import free_port
from tests.unit.api.test_routes_stream import (
    LIMITS,
    READER_RCVBUF_BYTES,
    RECORD_BYTES,
    FakeMetadata,
    Stream,
    eventually,
    kernel_send_buffer_max,
    produce,
    start_replicas,
)

# Long enough that a start still running when the test looks was not ended by it.
SLOW_START = replace(LIMITS, start_retry_timeout_ms=60_000)


@dataclass
class Served:
    host: str
    port: int
    http: aiohttp.ClientSession  # the test's client
    routes: StreamRoutes
    runner: web.AppRunner
    rm: ReplicaManager

    async def open_stream(self, query: str) -> Stream:
        resp = await self.http.get(
            f"http://{self.host}:{self.port}/v1/topics/orders/stream?{query}"
        )
        assert resp.status == 200, await resp.text()
        return Stream(resp)


@pytest.fixture
async def serve(tmp_path) -> AsyncIterator[Callable[..., Any]]:
    """`await serve(limits=..., leader=..., urls=...)`: broker 1's streaming app."""
    opened: list[Callable[[], Any]] = []

    async def make(
        limits: StreamLimits = LIMITS, leader: int = 1, urls: dict[int, str] | None = None
    ) -> Served:
        rm = await start_replicas(1, tmp_path / f"b1-{len(opened)}")
        app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
        md = FakeMetadata(leader, urls)
        calls = PeerClient(cluster_secret="s", metadata=md)
        routes = StreamRoutes(rm, md, limits, calls=calls, poll_calls=calls)
        routes.add_to(app)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        http = aiohttp.ClientSession()

        async def close() -> None:
            await http.close()
            await runner.cleanup()
            await calls.close()
            await rm.stop()

        opened.append(close)
        return Served("127.0.0.1", port, http, routes, runner, rm)

    yield make
    for close in reversed(opened):
        await close()


async def send_request_and_hang_up(host: str, port: int, path: str, ready: asyncio.Event) -> None:
    """A client that sends its request and leaves before any answer."""
    _reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    await ready.wait()
    sock = writer.get_extra_info("socket")
    # Linger 0: the close is a reset, as when a client process dies.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


async def test_a_client_gone_before_the_headers_frees_its_slot_and_its_start(serve):
    # No leader: the start retries for start_retry_timeout_ms (60 s) unless the
    # client's leaving ends it.
    env = await serve(limits=SLOW_START, leader=-1)
    ready = asyncio.Event()
    client = asyncio.create_task(
        send_request_and_hang_up(env.host, env.port, "/v1/topics/orders/stream", ready)
    )
    await eventually(lambda: env.routes.sessions, "the stream to be starting")
    ready.set()
    await client
    # liveness_check_ms is 50 ms: well within the wait, far from the 60 s start.
    await eventually(lambda: not env.routes.sessions, "the slot to be free")
    starts = [t for t in asyncio.all_tasks() if "StreamRoutes._start" in repr(t.get_coro())]
    assert not starts, "the start was cancelled and awaited"


async def test_a_failed_start_stops_the_start_of_the_other_partitions(serve):
    """Partition 1's start fails at once; partition 0's, waiting on its leader,
    is cancelled with it instead of reading on for a stream that will not run."""
    hanging: list[web.Request] = []
    release = asyncio.Event()

    async def offsets(request: web.Request) -> web.Response:
        (asked,) = (await request.json())["partitions"]
        if asked["partition"] == 1:
            return web.json_response(
                {"error": {"code": "INVALID_REQUEST", "message": "no", "retriable": False}},
                status=400,
            )
        hanging.append(request)
        await release.wait()
        bounds = {"log_start_offset": 0, "high_watermark": 0, "log_end_offset": 0}
        return web.json_response({"partitions": [bounds]})

    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    app.router.add_post(PARTITION_OFFSETS_PATH, offsets)
    remote = TestServer(app)
    await remote.start_server()
    try:
        env = await serve(
            limits=SLOW_START, leader=2, urls={2: str(remote.make_url("")).rstrip("/")}
        )
        resp = await env.http.get(
            f"http://{env.host}:{env.port}/v1/topics/orders/stream?partitions=0,1"
        )
        assert resp.status == 400, await resp.text()
        assert hanging, "partition 0 asked its leader"

        def closed() -> bool:
            transport = hanging[0].transport
            return transport is None or transport.is_closing()

        await eventually(closed, "partition 0's request to be given up")
        assert not env.routes.sessions
    finally:
        release.set()
        await remote.close()


@asynccontextmanager
async def remote_leader(path: Path) -> AsyncIterator[str]:
    """Broker 2 leading every partition of `orders`; yields its URL."""
    rm2 = await start_replicas(2, path)
    app2 = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    DataRoutes(rm2, FakeMetadata(2)).add_to(app2)
    add_partition_offsets_route(app2, rm2, FakeMetadata(2))  # a stream's start offsets
    StreamRoutes(rm2, FakeMetadata(2), LIMITS).add_to(app2)  # reads
    remote = TestServer(app2)
    await remote.start_server()
    try:
        yield str(remote.make_url("")).rstrip("/")
    finally:
        await remote.close()
        await rm2.stop()


async def test_streams_of_remote_partitions_give_their_reads_back_when_clients_go(serve, tmp_path):
    async with remote_leader(tmp_path / "b2") as url:
        env = await serve(leader=2, urls={2: url})
        streams = [await env.open_stream("") for _ in range(5)]
        for s in streams:
            await s.next()
        # 5 streams x 3 partitions, all at offset 0: one shared read per partition.
        await eventually(lambda: env.routes.remote.reads_waiting() == 3, "the shared reads")
        assert env.routes.remote.polls_in_flight() <= LIMITS.remote_polls_per_leader_max
        for s in streams:
            s.resp.close()
        await eventually(lambda: not env.routes.sessions, "every stream to end")
        await eventually(
            lambda: (
                env.routes.remote.reads_waiting() == 0 and env.routes.remote.polls_in_flight() == 0
            ),
            "no read and no poll left",
        )


async def test_shutdown_ends_every_stream_and_poll(serve, tmp_path):
    async with remote_leader(tmp_path / "b2") as url:
        env = await serve(leader=2, urls={2: url})
        stream = await env.open_stream("")
        await stream.next()
        await eventually(lambda: env.routes.remote.polls_in_flight(), "a poll")
        async with asyncio.timeout(10):
            await env.runner.cleanup()  # what a node's shutdown does
        assert not env.routes.sessions
        assert env.routes.remote.polls_in_flight() == 0
        assert env.routes.remote.reads_waiting() == 0


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="a Linux socket option")
async def test_a_client_that_takes_nothing_for_client_stalled_timeout_ms_loses_its_stream(serve):
    """A client that vanished without closing looks, to the server, like one that
    takes nothing: both lose the stream, and its slot, after the timeout."""
    env = await serve(limits=replace(LIMITS, client_stalled_timeout_ms=500))
    # More than the stream, the kernel's buffers and the reader's can hold.
    fill = memory_bound_bytes(LIMITS.chunk_bytes_default, LIMITS.write_block_bytes)
    fill += kernel_send_buffer_max() + 2 * READER_RCVBUF_BYTES
    value = "x" * RECORD_BYTES
    for _ in range(2 * fill // (100 * RECORD_BYTES) + 1):
        await produce(env.rm, 0, [value] * 100)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, READER_RCVBUF_BYTES)
        sock.setblocking(False)
        await loop.sock_connect(sock, (env.host, env.port))
        await loop.sock_sendall(
            sock, b"GET /v1/topics/orders/stream?partitions=0&offset=earliest HTTP/1.0\r\n\r\n"
        )
        await eventually(
            lambda: any(s is not None for s in env.routes.sessions.values()), "the stream to run"
        )
        # Never read: the kernel closes the connection 0.5 s after the window shut.
        await eventually(lambda: not env.routes.sessions, "the stalled stream to be closed")
    finally:
        sock.close()

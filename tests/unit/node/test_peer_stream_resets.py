"""A replica stream whose follower stops reading (api/replica_stream.py): the
leader drops the connection, with the bytes it could not send, when the
stream ends (an answer not taken in time, the idle timeout, shutdown), instead
of closing it gracefully, which keeps both until the peer reads.

The follower here is a raw socket with a small receive buffer that reads
nothing after the upgrade: aiohttp's own client keeps reading into memory
whether or not its program calls receive(). Each test runs on asyncio's loop
and on uvloop's (the node's default)."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from lograft.api.app import SECRET_HEADER
from lograft.api.internal_paths import REPLICA_STREAM_PATH
from lograft.api.replica_stream import REQUEST_HEAD
from tests.unit.node.test_peer_stream import SECRET, Leader, request, start_leader, until

# The follower's receive buffer, bytes (the kernel doubles it).
RCVBUF = 4096
# The answer the follower leaves unread, bytes: far past every buffer.
ANSWER_BYTES = 32 * 1024 * 1024


LOOPS = pytest.mark.parametrize("loop", ["asyncio", "uvloop"])


def run_on(loop: str, test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """`test()` on a new event loop of that kind (each test owns its loop)."""
    if loop == "uvloop":
        import uvloop

        uvloop.run(test())
    else:
        asyncio.run(test())


def frame(payload: bytes, opcode: int) -> bytes:
    """A masked client frame (RFC 6455 5.2) of at most 65,535 bytes."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    if len(payload) < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | len(payload))
    else:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, len(payload))
    return head + mask + masked


async def open_stream(lead: Leader) -> socket.socket:
    """A follower's stream that will read nothing after the upgrade's answer."""
    loop = asyncio.get_running_loop()
    url = lead.server.make_url(REPLICA_STREAM_PATH)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.setblocking(False)
    await loop.sock_connect(sock, (url.host, url.port))
    upgrade = (
        f"GET {REPLICA_STREAM_PATH} HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
        f"{SECRET_HEADER}: {SECRET}\r\n\r\n"
    )
    await loop.sock_sendall(sock, upgrade.encode())
    head = b""
    async with asyncio.timeout(5):
        while b"\r\n\r\n" not in head:
            head += await loop.sock_recv(sock, 1)  # not a byte past the answer's head
    assert head.startswith(b"HTTP/1.1 101"), head
    await until(lambda: len(lead.streams.open) == 1)
    return sock


async def bytes_until_the_end(sock: socket.socket) -> tuple[int, str]:
    """Read the follower's socket to its end: (bytes read, how it ended)."""
    loop = asyncio.get_running_loop()
    total = 0
    async with asyncio.timeout(20):
        while True:
            try:
                got = await loop.sock_recv(sock, 1 << 20)
            except ConnectionResetError:
                return total, "reset"
            if not got:
                return total, "eof"
            total += len(got)


async def ask_and_leave_unread(lead: Leader, sock: socket.socket) -> None:
    """The follower sends one fetch, whose answer it will not read, and the
    leader takes it."""
    await asyncio.get_running_loop().sock_sendall(
        sock, frame(REQUEST_HEAD.pack(1) + request(7), 0x2)
    )
    await until(lambda: lead.replicas.fetched == [7])


async def leader_with_large_answers(**kwargs: Any) -> Leader:
    lead = await start_leader(**kwargs)
    lead.replicas.data_bytes = ANSWER_BYTES
    return lead


@LOOPS
def test_an_answer_not_taken_in_time_is_dropped_with_its_connection(loop: str) -> None:
    run_on(loop, _an_answer_not_taken_in_time_is_dropped_with_its_connection)


async def _an_answer_not_taken_in_time_is_dropped_with_its_connection() -> None:
    lead = await leader_with_large_answers(idle_timeout_s=0.3)
    sock = await open_stream(lead)
    try:
        (transport,) = lead.streams.open.values()
        await ask_and_leave_unread(lead, sock)
        await until(lambda: not lead.streams.open)  # the leader gave up on it
        assert transport is not None
        await until(transport.is_closing)
        # A graceful close would deliver the whole answer, then the close frame.
        read, how = await bytes_until_the_end(sock)
        assert how == "reset", (read, how)
        assert read < ANSWER_BYTES
    finally:
        sock.close()
        await lead.client.close()
        await lead.server.close()


@LOOPS
def test_pongs_a_follower_does_not_read_do_not_keep_its_connection(loop: str) -> None:
    run_on(loop, _pongs_a_follower_does_not_read_do_not_keep_its_connection)


async def _pongs_a_follower_does_not_read_do_not_keep_its_connection() -> None:
    lead = await start_leader(idle_timeout_s=0.3)
    sock = await open_stream(lead)
    try:
        (transport,) = lead.streams.open.values()
        assert transport is not None
        loop = asyncio.get_running_loop()
        pings = frame(b"p" * 125, 0x9) * 512
        async with asyncio.timeout(10):
            # Until the leader holds pongs it cannot send (or has ended it).
            while transport.get_write_buffer_size() < 256 * 1024 and lead.streams.open:
                try:
                    await loop.sock_sendall(sock, pings)
                except (ConnectionResetError, BrokenPipeError):
                    break
        await until(lambda: not lead.streams.open)  # the idle timeout: pings do not count
        read, how = await bytes_until_the_end(sock)
        assert how == "reset", (read, how)
    finally:
        sock.close()
        await lead.client.close()
        await lead.server.close()


@LOOPS
def test_shutdown_drops_a_stream_whose_follower_reads_nothing(loop: str) -> None:
    run_on(loop, _shutdown_drops_a_stream_whose_follower_reads_nothing)


async def _shutdown_drops_a_stream_whose_follower_reads_nothing() -> None:
    lead = await leader_with_large_answers()  # idle timeout 30 s
    sock = await open_stream(lead)
    try:
        loop = asyncio.get_running_loop()
        await ask_and_leave_unread(lead, sock)
        started = loop.time()
        async with asyncio.timeout(10):
            await lead.server.close()
        assert loop.time() - started < 5
        assert not lead.streams.open
        read, how = await bytes_until_the_end(sock)
        assert how == "reset", (read, how)
    finally:
        sock.close()
        await lead.client.close()

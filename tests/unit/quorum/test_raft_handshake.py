"""Strangers on the Raft port cannot hold connections or memory (raft_handshake).

A connection whose peer has not proven the password is dropped when it stays
silent, when it buffers more than `max_handshake_bytes`, and, the oldest
first, when more than `max_handshake_connections` of them are open; peers
that know the password still get in.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lograft.quorum.raft.adapter import RaftAdapter, RaftConfig
from lograft.quorum.raft.handshake import HandshakeLimits, guard_accepted
from tests.raft_support import (
    FAST_TIMINGS,
    RAFT_TEST_PASSWORD,
    ListStateMachine,
    eventually_async,
    free_port,
)
from tests.unit.quorum.raft_inproc import InProcessCluster

pytestmark = pytest.mark.timeout(60)

# Far longer than any test here waits for a hang-up, so only the bound under
# test can be what closed a connection.
LONG_MS = 60_000
HANG_UP_WAIT_S = 15.0


@contextlib.asynccontextmanager
async def leader(tmp_path: Path, **limits: Any) -> AsyncIterator[tuple[RaftAdapter, int]]:
    port = free_port()
    config = RaftConfig(
        node_id="solo",
        data_dir=tmp_path / "solo",
        peers={},
        listen_address=f"127.0.0.1:{port}",
        **{**FAST_TIMINGS, "password": RAFT_TEST_PASSWORD, **limits},
    )
    adapter = RaftAdapter(config, ListStateMachine())
    await adapter.start()
    try:
        await eventually_async(lambda: adapter.is_leader, 10, "the node to elect itself")
        yield adapter, port
    finally:
        await adapter.stop()


@contextlib.contextmanager
def stranger(port: int) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_UP_WAIT_S) as sock:
        yield sock


def hung_up(sock: socket.socket, timeout_s: float = HANG_UP_WAIT_S) -> bool:
    """Block until the node closes `sock` (True), or `timeout_s` passes (False)."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


async def test_a_silent_stranger_is_dropped_after_the_handshake_timeout(tmp_path: Path) -> None:
    async with leader(tmp_path, handshake_timeout_ms=300) as (adapter, port):
        with stranger(port) as silent, stranger(port) as partial:
            partial.sendall(struct.pack("i", 1000) + b"x" * 10)  # a frame never finished
            started = time.monotonic()
            assert await asyncio.to_thread(hung_up, silent)
            assert await asyncio.to_thread(hung_up, partial)
            assert time.monotonic() - started < HANG_UP_WAIT_S
        assert adapter.is_leader


async def test_a_stranger_announcing_a_huge_frame_is_dropped_at_the_byte_bound(
    tmp_path: Path,
) -> None:
    limit = 4096
    async with leader(tmp_path, handshake_timeout_ms=LONG_MS, max_handshake_bytes=limit) as (
        adapter,
        port,
    ):
        with stranger(port) as sock:
            # Announces 2 GiB, sends a little more than the bound; stock
            # pysyncobj would buffer until the 2 GiB had arrived.
            with contextlib.suppress(OSError):
                sock.sendall(struct.pack("i", 2**31 - 1) + b"x" * (limit + 70_000))
            assert await asyncio.to_thread(hung_up, sock)
        offset = await adapter.append(b"still committing")
        assert adapter.last_applied >= offset


async def test_the_oldest_stranger_makes_room_and_peers_still_get_in(tmp_path: Path) -> None:
    cap = 3
    async with InProcessCluster(
        tmp_path, ["a"], handshake_timeout_ms=LONG_MS, max_handshake_connections=cap
    ) as cluster:
        await cluster.start()
        member = await cluster.leader()
        port = cluster.ports["a"]
        with contextlib.ExitStack() as stack:
            # The node accepts in connection order (the kernel's accept queue),
            # so strangers[0] is the oldest once `newest` arrives.
            strangers = [stack.enter_context(stranger(port)) for _ in range(cap)]
            newest = stack.enter_context(stranger(port))
            assert await asyncio.to_thread(hung_up, strangers[0])
            assert not await asyncio.to_thread(hung_up, newest, 0.3)
            # An observer that knows the password still connects and catches up.
            offset = await member.adapter.append(b"for the observer")
            observer = await cluster.start_observer("watcher")
            await observer.adapter.wait_for_offset(offset, 10_000)
            assert observer.sm.batches == [b"for the observer"]


def test_only_a_connection_pysyncobj_accepted_is_re_classed() -> None:
    limits = HandshakeLimits(timeout_s=1.0, max_bytes=1, max_connections=1)
    with pytest.raises(TypeError):
        guard_accepted(object(), limits)  # type: ignore[arg-type]

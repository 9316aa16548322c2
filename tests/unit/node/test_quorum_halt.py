"""A node stops, with its own exit status, when its metadata quorum halts.

`until_stopped` (node/server.py) is what `run_node` waits on: a stop signal or
the Raft adapter's halt (a journal write failed on a full disk, say), whichever
comes first. The adapter's side is tested in tests/unit/quorum/test_raft_adapter.py
(`wait_halted` after a state machine failure)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from lograft.node.server import until_stopped


class FakeRaft:
    def __init__(self) -> None:
        self.halted = asyncio.Event()
        self.error = OSError(28, "No space left on device")

    async def wait_halted(self) -> BaseException:
        await self.halted.wait()
        return self.error


async def test_a_stop_signal_ends_the_wait_without_a_failure() -> None:
    stop, raft = asyncio.Event(), FakeRaft()
    waiting = asyncio.create_task(until_stopped(stop, cast(Any, raft)))
    stop.set()
    assert await asyncio.wait_for(waiting, 5) is None


async def test_a_halted_quorum_ends_the_wait_with_its_failure() -> None:
    stop, raft = asyncio.Event(), FakeRaft()
    waiting = asyncio.create_task(until_stopped(stop, cast(Any, raft)))
    raft.halted.set()
    assert await asyncio.wait_for(waiting, 5) is raft.error
    assert not stop.is_set()

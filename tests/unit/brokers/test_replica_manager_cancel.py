"""A produce or fetch of the replica manager cancelled while it waits ends
cancelled, even when the cancel lands in the step its wait ends (Python 3.11's
asyncio.wait_for returned the inner result then and dropped the cancel), and
leaves no waiter behind."""

from __future__ import annotations

import asyncio

import pytest

from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.protocol.produce_wire import Acks
from tests.raft_support import eventually_async
from tests.unit.brokers.test_replica_manager import TP, Cluster, _batch

WAIT_S = 10.0
# Followers that never fetch and are never dropped from the ISR within a test:
# an acks=all produce waits until the test ends its wait.
STUCK = BrokerSettings(
    replica_fetch_wait_max_ms=50,
    replica_fetch_backoff_ms=10,
    isr_check_interval_ms=20,
    replica_lag_time_max_ms=600_000,
    produce_timeout_ms=60_000,
)

pytestmark = pytest.mark.timeout(60)


async def started(tmp_path) -> Cluster:
    c = Cluster(tmp_path, STUCK)
    c.cut.update((2, 3))
    await c.start()
    return c


async def waiting_produce(leader: ReplicaManager) -> asyncio.Task[object]:
    task = asyncio.create_task(leader.produce(TP, _batch("a"), Acks.ALL))
    part = leader.partitions[TP]
    await eventually_async(lambda: part._waiters, WAIT_S, "the produce to wait for the HW")
    return task


@pytest.mark.parametrize("as_the_hw_arrives", [False, True])
async def test_a_cancelled_acks_all_produce_ends_cancelled(tmp_path, as_the_hw_arrives) -> None:
    c = await started(tmp_path)
    try:
        leader = c.brokers[1]
        task = await waiting_produce(leader)
        waiter = leader.partitions[TP]._waiters[0].future
        if as_the_hw_arrives:
            waiter.set_result(None)  # as _release_waiters does
        task.cancel()
        await asyncio.wait({task}, timeout=WAIT_S)
        assert task.cancelled(), "the produce went on after it was cancelled"
        assert waiter.done()  # dropped from the heap at the next compaction
    finally:
        await c.stop()


@pytest.mark.parametrize("as_it_changes", [False, True])
async def test_a_cancelled_long_poll_fetch_ends_cancelled(tmp_path, as_it_changes) -> None:
    c = await started(tmp_path)
    try:
        leader = c.brokers[1]
        changes = leader._changes
        task = asyncio.create_task(leader.fetch(TP, 0, max_bytes=1 << 20, max_wait_ms=60_000))
        # A consumer fetch long-polls as a reader (woken by HW moves).
        await eventually_async(lambda: changes._readers, WAIT_S, "the fetch to long-poll")
        if as_it_changes:
            changes.notify(TP)
        task.cancel()
        await asyncio.wait({task}, timeout=WAIT_S)
        assert task.cancelled(), "the fetch went on after it was cancelled"
        assert not changes._readers
    finally:
        await c.stop()

"""A stopping broker closes its logs concurrently, and closes every one of them.

Closing a written log costs several fsyncs; one log after another, a broker
with 2,000 written logs outlasted the grace a supervisor gives after SIGTERM.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import (
    LOG_CLOSE_THREADS,
    BrokerSettings,
    PartitionMeta,
    ReplicaManager,
)
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import Log

# Fewer than LOG_CLOSE_THREADS: every close must be under way at once (a
# stop closing one log after another never gets past the first, which
# breaks the barrier after its timeout).
PARTITIONS = 6
BARRIER_TIMEOUT_S = 10.0


async def _written_broker(tmp_path: Path) -> tuple[ReplicaManager, list[Log]]:
    rm = ReplicaManager(1, tmp_path / "broker-1", BrokerSettings())
    wanted = {
        TopicPartition("t", p): PartitionMeta("topic-id", Assignment((1,), (1,), 1, 1, 0))
        for p in range(PARTITIONS)
    }
    rm.apply_metadata(wanted)
    batch = build_batch([RecordInput(b"v")], timestamp_ms=1)
    for tp in wanted:
        await rm.produce(tp, batch, Acks.LEADER)
    return rm, [rm.partitions[tp].log for tp in wanted]


async def test_stop_closes_logs_concurrently(tmp_path, monkeypatch):
    rm, logs = await _written_broker(tmp_path)
    assert PARTITIONS <= LOG_CLOSE_THREADS
    barrier = threading.Barrier(PARTITIONS, timeout=BARRIER_TIMEOUT_S)
    real_close = Log.close

    def close_together(self: Log) -> None:
        barrier.wait()
        real_close(self)

    monkeypatch.setattr(Log, "close", close_together)
    await rm.stop()
    assert all(target.closed for target in logs)
    assert not barrier.broken


async def test_one_failed_close_still_closes_the_others(tmp_path, monkeypatch):
    rm, logs = await _written_broker(tmp_path)
    bad = logs[2]
    real_close = Log.close

    def close_or_fail(self: Log) -> None:
        if self is bad:
            raise OSError("disk gone")
        real_close(self)

    monkeypatch.setattr(Log, "close", close_or_fail)
    with pytest.raises(OSError, match="disk gone"):
        await rm.stop()
    assert [target.closed for target in logs] == [target is not bad for target in logs]

"""The leader refuses, before writing anything, client batches no producer may send.

Regression (issue 9, part 1): the leader accepted a raw batch with producer
id -5; followers appended it and then failed to record producer state for it
and every later batch of the fetch, and after a restart a node holding that
log failed every metadata apply. The leader also took control and
transactional batches from clients. Rules and reasons: lograft/storage/produce_rules.py.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lograft.brokers.partition import Assignment, Partition, PartitionSettings
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    LograftError,
    ProducerIdNotAllocatedError,
    UnsupportedCompressionError,
)
from lograft.protocol.batch import iter_records
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.config import LogConfig
from lograft.storage.log import Log
from tests.batch_forge import forge, records_batch

TP = TopicPartition("t", 0)
HOUR_MS = 3_600_000
INT64_MIN = -(1 << 63)
INT32_MIN = -(1 << 31)


def leader_of(tmp_path: Path, **config: object) -> Partition:
    log = Log(tmp_path / "t-0", LogConfig().with_overrides(dict(config)))
    part = Partition(TP, log, 1, PartitionSettings(min_insync_replicas=1))
    part.become_leader(Assignment((1,), (1,), 1, 0, 0), now_ms=0)
    return part


def now_ms() -> int:
    return time.time_ns() // 1_000_000


GOOD = records_batch()
IDEMPOTENT = records_batch(producer=(5, 0, 0))

# (batch, error class, details.reason)
REFUSED: dict[str, tuple[bytes, type[LograftError], str]] = {
    "producer-id--5": (
        forge(GOOD, producer_id=-5, producer_epoch=0, base_sequence=0),
        InvalidRecordError,
        "producer_id",
    ),
    "producer-id--2": (forge(GOOD, producer_id=-2), InvalidRecordError, "producer_id"),
    "producer-id-int64-min": (
        forge(GOOD, producer_id=INT64_MIN),
        InvalidRecordError,
        "producer_id",
    ),
    "control": (forge(GOOD, attributes=0x20), InvalidRecordError, "control_batch"),
    "control-idempotent": (forge(IDEMPOTENT, attributes=0x20), InvalidRecordError, "control_batch"),
    "transactional": (
        forge(IDEMPOTENT, attributes=0x10),
        InvalidRecordError,
        "transactional_batch",
    ),
    "delete-horizon": (forge(GOOD, attributes=0x40), InvalidRecordError, "delete_horizon"),
    "log-append-time": (forge(GOOD, attributes=0x08), InvalidTimestampError, "log_append_time"),
    "attribute-bit-7": (forge(GOOD, attributes=0x80), InvalidRecordError, "unknown_attributes"),
    "attribute-bit-15": (forge(GOOD, attributes=-0x8000), InvalidRecordError, "unknown_attributes"),
    "no-producer-but-epoch": (forge(GOOD, producer_epoch=0), InvalidRecordError, "producer_fields"),
    "no-producer-but-sequence": (
        forge(GOOD, base_sequence=7),
        InvalidRecordError,
        "producer_fields",
    ),
    "epoch--1": (forge(IDEMPOTENT, producer_epoch=-1), InvalidRecordError, "producer_epoch"),
    "epoch-int16-min": (
        forge(IDEMPOTENT, producer_epoch=-0x8000),
        InvalidRecordError,
        "producer_epoch",
    ),
    "sequence--1": (forge(IDEMPOTENT, base_sequence=-1), InvalidRecordError, "base_sequence"),
    "sequence-int32-min": (
        forge(IDEMPOTENT, base_sequence=INT32_MIN),
        InvalidRecordError,
        "base_sequence",
    ),
    "negative-timestamp": (
        records_batch(timestamps=[5, -3]),
        InvalidTimestampError,
        "timestamp_out_of_range",
    ),
    "no-timestamp": (
        records_batch(timestamps=[-1, -1]),
        InvalidTimestampError,
        "timestamp_out_of_range",
    ),
    "far-future": (
        records_batch(timestamp_ms=now_ms() + 2 * HOUR_MS),
        InvalidTimestampError,
        "timestamp_out_of_range",
    ),
    "max-timestamp-lies-high": (
        forge(GOOD, max_timestamp=1 << 62),
        InvalidTimestampError,
        "max_timestamp",
    ),
    "max-timestamp-lies-low": (
        forge(records_batch(timestamps=[1, 9]), max_timestamp=1),
        InvalidTimestampError,
        "max_timestamp",
    ),
    "base-timestamp-overflows": (
        forge(records_batch(timestamps=[0, 10]), base_timestamp=(1 << 63) - 5, max_timestamp=5),
        InvalidTimestampError,
        "timestamp_out_of_range",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_leader_refuses_and_writes_nothing(tmp_path: Path, name: str) -> None:
    bad, error, reason = REFUSED[name]
    leader = leader_of(tmp_path)
    leader.append_records(GOOD, Acks.LEADER)
    for request in (bad, GOOD + bad, bad + GOOD):
        with pytest.raises(error) as info:
            leader.append_records(request, Acks.LEADER)
        assert info.value.details["reason"] == reason
        assert info.value.details["batch_index"] == (1 if request.startswith(GOOD + bad) else 0)
        assert leader.log.log_end_offset == 2
    assert [r.value for r in iter_records(leader.log.read(0, 1 << 20))] == [b"v0", b"v1"]


def test_an_unknown_codec_is_refused(tmp_path: Path) -> None:
    leader = leader_of(tmp_path)
    with pytest.raises(UnsupportedCompressionError):
        leader.append_records(forge(GOOD, attributes=0x07), Acks.LEADER)
    assert leader.log.log_end_offset == 0


def test_what_a_producer_may_send_is_accepted(tmp_path: Path) -> None:
    leader = leader_of(tmp_path)
    now = now_ms()
    for ok in (
        GOOD,
        IDEMPOTENT,
        records_batch(producer=(7, 0x7FFF, 0x7FFFFFFF)),  # the last sequence wraps to 0
        records_batch(producer=(0, 0, 0)),
        records_batch(timestamps=[0, 0]),
        records_batch(timestamps=[now + HOUR_MS - 60_000, now]),
    ):
        leader.append_records(ok, Acks.LEADER)
    assert leader.log.log_end_offset == 12


def test_an_id_the_cluster_has_not_allocated_is_refused_retriably(tmp_path: Path) -> None:
    leader = leader_of(tmp_path)
    leader.append_records(records_batch(producer=(99, 0, 0)), Acks.LEADER, producer_id_end=100)
    with pytest.raises(ProducerIdNotAllocatedError) as info:
        leader.append_records(records_batch(producer=(100, 0, 0)), Acks.LEADER, producer_id_end=100)
    assert info.value.retriable
    assert info.value.details["producer_id_end"] == 100
    assert leader.log.log_end_offset == 2


def test_timestamp_bounds_follow_the_topic(tmp_path: Path) -> None:
    old = records_batch(timestamp_ms=now_ms() - 10 * HOUR_MS)
    future = records_batch(timestamp_ms=now_ms() + 10 * HOUR_MS)
    # The defaults: any time in the past, at most an hour ahead.
    leader = leader_of(tmp_path / "a")
    leader.append_records(old, Acks.LEADER)
    with pytest.raises(InvalidTimestampError):
        leader.append_records(future, Acks.LEADER)
    # Tighter and looser bounds.
    leader = leader_of(
        tmp_path / "b",
        message_timestamp_before_max_ms=HOUR_MS,
        message_timestamp_after_max_ms=20 * HOUR_MS,
    )
    leader.append_records(future, Acks.LEADER)
    with pytest.raises(InvalidTimestampError) as info:
        leader.append_records(old, Acks.LEADER)
    assert info.value.details["reason"] == "timestamp_out_of_range"
    # LogAppendTime: the producer's times are replaced, so not judged.
    leader = leader_of(tmp_path / "c", message_timestamp_type="LogAppendTime")
    leader.append_records(future, Acks.LEADER)
    leader.append_records(forge(GOOD, max_timestamp=-7), Acks.LEADER)
    assert leader.log.log_end_offset == 4


def test_a_compacted_topic_refuses_records_without_a_key(tmp_path: Path) -> None:
    leader = leader_of(tmp_path, cleanup_policy="compact")
    leader.append_records(records_batch(), Acks.LEADER)
    with pytest.raises(InvalidRecordError) as info:
        leader.append_records(records_batch(keys=False), Acks.LEADER)
    assert info.value.details["reason"] == "null_key_compacted"
    assert leader.log.log_end_offset == 2


class Metadata:
    """A producer-id end that moves, and the 'metadata changed' signal."""

    def __init__(self, end: int) -> None:
        self.end = end
        self.changed = asyncio.Event()

    def advance(self, end: int) -> None:
        self.end = end
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait(self) -> None:
        await self.changed.wait()


async def test_the_leader_waits_for_metadata_that_allocates_the_id(tmp_path: Path) -> None:
    md = Metadata(end=100)
    rm = ReplicaManager(
        1,
        tmp_path,
        BrokerSettings(min_insync_replicas=1, producer_id_wait_max_ms=200),
        producer_id_end=lambda: md.end,
        metadata_changed=md.wait,
    )
    await rm.start()
    try:
        rm.apply_metadata({TP: PartitionMeta("id", Assignment((1,), (1,), 1, 1, 0))})
        # Handed out by another broker a moment ago: this one's metadata catches up.
        produce = asyncio.create_task(rm.produce(TP, records_batch(producer=(150, 0, 0)), Acks.ALL))
        await asyncio.sleep(0)
        md.advance(120)  # a change that does not allocate it: still waiting
        await asyncio.sleep(0)
        assert not produce.done()
        md.advance(1100)
        assert (await produce).first_offset == 0
        # Never allocated: refused (retriably) once the wait is over.
        with pytest.raises(ProducerIdNotAllocatedError):
            await rm.produce(TP, records_batch(producer=(5000, 0, 0)), Acks.ALL)
        assert rm.partitions[TP].log.log_end_offset == 2
    finally:
        await rm.stop()

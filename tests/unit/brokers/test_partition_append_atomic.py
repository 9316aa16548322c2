"""A produce request of several batches is appended all or nothing.

Regression: `Partition.append_records` used to validate and append batch by
batch, so a request whose second batch was corrupt (bad CRC, too large, bad
records) or out of sequence was refused AFTER its first batch had been
written. Found by tests/integration/test_http_api_cluster.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.brokers import partition as partition_module
from lograft.brokers.partition import Assignment, Partition, PartitionSettings
from lograft.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LograftError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from lograft.protocol.batch import RecordInput, build_batch, iter_records
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage import log as log_module
from lograft.storage.config import LogConfig
from lograft.storage.log import Log

TP = TopicPartition("t", 0)


def batch(
    tag: str, n: int = 2, pid: int = -1, epoch: int = -1, seq: int = -1, size: int = 0
) -> bytes:
    recs = [RecordInput((f"{tag}{i}".encode()).ljust(size, b"."), b"k") for i in range(n)]
    return build_batch(
        recs, timestamp_ms=1, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def corrupt(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0xFF
    return bytes(out)


@pytest.fixture
def leader(tmp_path: Path) -> Partition:
    log = Log(tmp_path / "t-0", LogConfig().with_overrides({"max_message_bytes": 1024}))
    part = Partition(TP, log, 1, PartitionSettings(min_insync_replicas=1))
    part.become_leader(Assignment((1,), (1,), 1, 0, 0), now_ms=0)
    return part


def values(part: Partition) -> list[bytes | None]:
    return [r.value for r in iter_records(part.log.read(0, 1 << 20))]


@pytest.mark.parametrize(
    ("second", "error"),
    [
        (corrupt(batch("b")), CorruptRecordError),
        (batch("b", size=2000), RecordTooLargeError),
        (batch("b")[:-1], CorruptRecordError),
    ],
    ids=["bad-crc", "too-large", "truncated"],
)
def test_a_bad_later_batch_writes_nothing(
    leader: Partition, second: bytes, error: type[LograftError]
) -> None:
    leader.append_records(batch("a"), Acks.LEADER)
    with pytest.raises(error):
        leader.append_records(batch("x") + second, Acks.LEADER)
    assert leader.log.log_end_offset == 2
    assert values(leader) == [b"a0", b"a1"]


def test_bad_records_in_a_later_batch_write_nothing(leader: Partition) -> None:
    import struct

    from lograft.protocol.batch import CRC_POS, HEADER, compute_crc

    lying = bytearray(batch("b"))
    fields = list(HEADER.unpack_from(lying, 0))
    fields[-1] = 1  # recordsCount 1, two records present
    HEADER.pack_into(lying, 0, *fields)
    struct.pack_into(">I", lying, CRC_POS, compute_crc(lying, 0, len(lying)))
    with pytest.raises(InvalidRecordError):
        leader.append_records(batch("x") + bytes(lying), Acks.LEADER)
    assert leader.log.log_end_offset == 0


def test_a_later_batch_out_of_sequence_writes_nothing(leader: Partition) -> None:
    with pytest.raises(OutOfOrderSequenceError):
        leader.append_records(
            batch("a", pid=7, epoch=0, seq=0) + batch("b", pid=7, epoch=0, seq=5), Acks.LEADER
        )
    with pytest.raises(InvalidProducerEpochError):
        leader.append_records(
            batch("a", pid=7, epoch=1, seq=0) + batch("b", pid=7, epoch=0, seq=2), Acks.LEADER
        )
    assert leader.log.log_end_offset == 0
    # The same producer state as if nothing had been sent: sequence 0 is accepted.
    res = leader.append_records(batch("a", pid=7, epoch=0, seq=0), Acks.LEADER)
    assert (res.first_offset, res.last_offset, res.duplicate) == (0, 1, False)


def test_several_batches_of_one_producer_in_one_request(leader: Partition) -> None:
    first = batch("a", pid=7, epoch=0, seq=0)
    second = batch("b", pid=7, epoch=0, seq=2)
    other = batch("c", pid=8, epoch=0, seq=0)
    res = leader.append_records(first + other + second, Acks.LEADER)
    assert (res.first_offset, res.last_offset, res.duplicate) == (0, 5, False)
    assert values(leader) == [b"a0", b"a1", b"c0", b"c1", b"b0", b"b1"]
    # The whole request again: every batch a duplicate, original offsets.
    res = leader.append_records(first + other + second, Acks.LEADER)
    assert (res.first_offset, res.last_offset, res.duplicate) == (0, 5, True)
    # A retry that repeats a written batch and adds a new one writes only the new one.
    third = batch("d", pid=7, epoch=0, seq=4)
    res = leader.append_records(second + third, Acks.LEADER)
    assert (res.first_offset, res.last_offset, res.duplicate) == (4, 7, False)
    assert values(leader)[6:] == [b"d0", b"d1"]
    # Each batch was recorded with its own offsets: a retry of `third` alone finds them.
    res = leader.append_records(third, Acks.LEADER)
    assert (res.first_offset, res.last_offset, res.duplicate) == (6, 7, True)
    # A new epoch may start inside a request, at sequence 0.
    res = leader.append_records(
        batch("e", pid=7, epoch=0, seq=6) + batch("f", pid=7, epoch=1, seq=0), Acks.LEADER
    )
    assert (res.first_offset, res.last_offset, res.duplicate) == (8, 11, False)


def test_a_request_of_one_batch_is_checked_and_planned_without_a_copy(leader: Partition) -> None:
    one = batch("a")
    plan = leader.prepare_append(one, Acks.LEADER)
    [(chunk, _h)] = plan.batches
    assert chunk is one and plan.payload is one  # the request's bytes, not a copy
    two = one + batch("b")
    chunks = [c for c, _h in leader.prepare_append(two, Acks.LEADER).batches]
    assert chunks == [one, two[len(one) :]]
    with pytest.raises(CorruptRecordError):
        leader.prepare_append(corrupt(one), Acks.LEADER)  # still checked (CRC)
    leader.append_records(one, Acks.LEADER)
    assert values(leader) == [b"a0", b"a1"]


def test_checked_batches_are_planned_and_written_on_their_check(
    leader: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = DecompressionBudget(1 << 20, "produce_decompressed_bytes_max")
    two = batch("a") + batch("b")
    checked = leader.check_records(two, budget)
    monkeypatch.setattr(partition_module, "validate_batch", _no_walk)
    monkeypatch.setattr(log_module, "validate_batches", _no_walk)
    res = leader.append_records(two, Acks.LEADER, checked=checked)
    monkeypatch.undo()
    assert (res.first_offset, res.last_offset) == (0, 3)
    assert values(leader) == [b"a0", b"a1", b"b0", b"b1"]
    # A check of other bytes is no check of these: they are validated.
    with pytest.raises(CorruptRecordError):
        leader.append_records(corrupt(two), Acks.LEADER, checked=checked)
    assert values(leader) == [b"a0", b"a1", b"b0", b"b1"]


def _no_walk(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("checked batches were validated again")

"""One batch of records for one partition, from first append to completion.

Life cycle (an explicit state machine, transitions only in the methods):

    OPEN --close()--> CLOSED --seal()--> SEALED --complete()/fail()--> DONE
      \\______________________________fail()__________________________/

- OPEN: the last batch of its partition's queue; accepts appends while it has
  room (`batch_bytes`; a record larger than that gets a batch of its own).
- CLOSED: drained by the sender; records are fixed.
- SEALED: encoded once as a RecordBatch v2 with the producer id, epoch and
  base sequence; every attempt (first send and retries) sends these same
  bytes, which is what lets the broker recognise a retry as a duplicate.
- DONE: each record's completion is resolved exactly once.

Sizes are estimates of the encoded record (before compression); the batch
reserves them in the buffer pool and gives them back when done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from collections.abc import Sequence
from typing import Protocol

from lograft.client.types import Header, RecordMetadata
from lograft.protocol.batch import (
    HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RecordInput,
    build_batch,
)
from lograft.protocol.compression import Compression
from lograft.protocol.topic_partition import TopicPartition

# Worst-case varint overhead of one record's framing: length (5), attributes
# (1), timestamp delta (10), offset delta (5), key and value lengths (5 + 5),
# header count (5).
RECORD_OVERHEAD_BYTES = 36
HEADER_OVERHEAD_BYTES = 10


def estimate_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """An upper bound of the record's encoded size, bytes."""
    size = RECORD_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
    for hk, hv in headers:
        size += HEADER_OVERHEAD_BYTES + len(hk.encode("utf-8", "surrogateescape"))
        size += len(hv) if hv else 0
    return size


class Completion(Protocol):
    """What a record's result is delivered to: an asyncio.Future (async
    producer, resolved on its loop) or a concurrent.futures.Future (sync)."""

    def done(self) -> bool: ...

    def set_result(self, result: RecordMetadata) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...


class BatchState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    SEALED = "sealed"
    DONE = "done"


class ProducerBatch:
    __slots__ = (
        "attempts",
        "base_sequence",
        "completions",
        "created",
        "data",
        "done",
        "maybe_appended",
        "producer_epoch",
        "producer_id",
        "records",
        "reserved_bytes",
        "size_bytes",
        "state",
        "tp",
    )

    def __init__(self, tp: TopicPartition, created: float, done: asyncio.Future[None]) -> None:
        self.tp = tp
        self.created = created  # loop time, seconds
        self.records: list[RecordInput] = []
        self.completions: list[Completion] = []
        self.size_bytes = HEADER_SIZE
        self.reserved_bytes = 0
        self.state = BatchState.OPEN
        self.data: bytes | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.attempts = 0
        # True once an attempt may have reached the broker without a clear answer.
        self.maybe_appended = False
        self.done = done  # resolved (None) when the batch is DONE, for flush()

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp}, {len(self.records)} records, {self.state.value}, "
            f"seq={self.base_sequence})"
        )

    @property
    def record_count(self) -> int:
        return len(self.records)

    def try_append(
        self, record: RecordInput, size: int, completion: Completion, batch_bytes: int
    ) -> bool:
        """Append if OPEN and there is room (an empty batch takes any record)."""
        if self.state is not BatchState.OPEN:
            return False
        if self.records and self.size_bytes + size > batch_bytes:
            return False
        self.records.append(record)
        self.completions.append(completion)
        self.size_bytes += size
        self.reserved_bytes += size
        return True

    def is_full(self, batch_bytes: int) -> bool:
        return self.size_bytes >= batch_bytes

    def close(self) -> None:
        if self.state is not BatchState.OPEN:
            raise AssertionError(f"close() of a {self.state.value} batch")
        self.state = BatchState.CLOSED

    def seal(
        self,
        compression: Compression,
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
    ) -> bytes:
        """Encode once; the bytes never change afterwards."""
        if self.state is not BatchState.CLOSED:
            raise AssertionError(f"seal() of a {self.state.value} batch")
        assert self.records, "a batch has at least one record"
        # Every record carries its own timestamp (set at send), so timestamp_ms
        # is only the base for none of them.
        self.data = build_batch(
            self.records,
            timestamp_ms=self.records[0].timestamp or 0,
            compression=compression,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.state = BatchState.SEALED
        return self.data

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    def complete(self, base_offset: int, log_append_time: int) -> None:
        """Resolve every record: offset base_offset + i (-1 for all with acks=0)."""
        if self.state is not BatchState.SEALED:
            raise AssertionError(f"complete() of a {self.state.value} batch")
        self.state = BatchState.DONE
        topic, partition = self.tp
        for i, (rec, c) in enumerate(zip(self.records, self.completions, strict=True)):
            offset = base_offset + i if base_offset >= 0 else -1
            ts = log_append_time if log_append_time >= 0 else (rec.timestamp or -1)
            _resolve(c, RecordMetadata(topic, partition, offset, ts), None)
        self._finish()

    def fail(self, exc: BaseException) -> None:
        if self.state is BatchState.DONE:
            raise AssertionError("fail() of a done batch")
        self.state = BatchState.DONE
        for c in self.completions:
            _resolve(c, None, exc)
        self._finish()

    def _finish(self) -> None:
        # The records are no longer needed; the completions hold the results.
        self.records = []
        self.completions = []
        if not self.done.done():
            self.done.set_result(None)


def _resolve(c: Completion, result: RecordMetadata | None, exc: BaseException | None) -> None:
    if c.done():  # the caller cancelled its future
        return
    try:
        if exc is not None:
            c.set_exception(exc)
        else:
            assert result is not None
            c.set_result(result)
    except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError, RuntimeError):
        pass  # cancelled by another thread between done() and here

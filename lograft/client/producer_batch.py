"""One batch of records for one partition, from first append to completion.

Life cycle (an explicit state machine, transitions only in the methods):

    OPEN --close()--> CLOSED --seal()--> SEALED --complete()/fail()--> DONE
      \\______________________________fail()__________________________/

- OPEN: the last batch of its partition's queue; records are encoded into
  its `records` (`lograft.protocol.open_batch.OpenBatch`) as they are sent,
  while it has room (`batch_bytes`; a record larger than that gets a batch
  of its own).
- CLOSED: drained by the sender (or replaced by a new batch when full);
  `records` refuses appends, so the records are fixed.
- SEALED: wrapped once in a RecordBatch v2 header with the producer id,
  epoch and base sequence; every attempt (first send and retries) sends
  these same bytes, which is what lets the broker recognise a retry as a
  duplicate.
- DONE: the batch's outcome is set once (`Outcomes.settle`); the sync
  producer's record futures read their metadata from it lazily, and the
  completions registered per record (the AsyncProducer's asyncio futures)
  and per run (`send_many`'s spans) are resolved.

Memory: a batch holds `reserved_bytes` of the buffer pool: `batch_bytes`
(or its one larger record) reserved when it opens, trimmed to what its
records took when it is drained (`RecordAccumulator.drain`), given back
when it is done (the sender).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from lograft.client.record_future import Outcomes
from lograft.client.types import Header, RecordMetadata
from lograft.protocol.batch import (
    HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    batch_from_records,
)
from lograft.protocol.compression import Compression
from lograft.protocol.open_batch import OpenBatch
from lograft.protocol.topic_partition import TopicPartition

if TYPE_CHECKING:
    from lograft.client.many_results import ManySpan

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
    """What one record's result is delivered to: an asyncio.Future (async
    producer, resolved on its loop) or a concurrent.futures.Future."""

    def done(self) -> bool: ...

    def set_result(self, result: RecordMetadata) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...


class BatchState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    SEALED = "sealed"
    DONE = "done"


class ProducerBatch(Outcomes):
    __slots__ = (
        "append_time",
        "attempts",
        "base_offset",
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
        "spans",
        "state",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        created: float,
        done: asyncio.Future[None],
        records: OpenBatch,
        reserved_bytes: int = 0,
    ) -> None:
        super().__init__()
        self.tp = tp
        self.created = created  # loop time, seconds
        self.records = records
        # (index, completion) of records that came with their own future.
        self.completions: list[tuple[int, Completion]] = []
        self.spans: list[ManySpan] = []
        self.reserved_bytes = reserved_bytes
        self.state = BatchState.OPEN
        self.data: bytes | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.base_offset = -1
        self.append_time = -1
        self.attempts = 0
        # True once an attempt may have reached the broker without a clear answer.
        self.maybe_appended = False
        self.done = done  # resolved (None) when the batch is DONE, for flush()

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp}, {self.record_count} records, {self.state.value}, "
            f"seq={self.base_sequence})"
        )

    @property
    def record_count(self) -> int:
        return self.records.count

    @property
    def size_bytes(self) -> int:
        """Bytes of the batch so far, header included (before compression)."""
        return HEADER_SIZE + self.records.size

    def is_full(self) -> bool:
        return self.records.full

    def close(self) -> None:
        if self.state is not BatchState.OPEN:
            raise AssertionError(f"close() of a {self.state.value} batch")
        self.state = BatchState.CLOSED
        self.records.close()

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
        records = self.records
        assert records.count, "a batch has at least one record"
        self.data = batch_from_records(
            records.records(),
            records_count=records.count,
            last_offset_delta=records.count - 1,
            base_timestamp=records.base_timestamp,
            max_timestamp=records.max_timestamp,
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

    def metadata(self, index: int) -> RecordMetadata:
        """Record `index`'s RecordMetadata (once OK): offset base_offset + index
        (-1 for all with acks=0), the broker's append time or its own timestamp."""
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        ts = self.append_time if self.append_time >= 0 else self.records.timestamp(index)
        topic, partition = self.tp
        return RecordMetadata(topic, partition, offset, ts)

    def complete(self, base_offset: int, log_append_time: int) -> None:
        """Resolve every record: offset base_offset + i (-1 for all with acks=0)."""
        if self.state is not BatchState.SEALED:
            raise AssertionError(f"complete() of a {self.state.value} batch")
        self.state = BatchState.DONE
        self.base_offset = base_offset
        self.append_time = log_append_time
        self._finish(None)
        for i, c in self.completions:
            _resolve(c, self, i, None)
        for span in self.spans:
            span.many.span_done(span)
        self._release()

    def fail(self, exc: BaseException) -> None:
        if self.state is BatchState.DONE:
            raise AssertionError("fail() of a done batch")
        self.state = BatchState.DONE
        self.records.close()
        self._finish(exc)
        for _i, c in self.completions:
            _resolve(c, self, 0, exc)
        for span in self.spans:
            span.many.fail(exc)
        self._release()

    def _finish(self, error: BaseException | None) -> None:
        self.settle(error)
        if not self.done.done():
            self.done.set_result(None)

    def _release(self) -> None:
        # The encoded records are no longer needed (their timestamps stay, for
        # the metadata the futures compute); the completions are resolved.
        self.records.release()
        self.data = None
        self.completions = []
        self.spans = []


def _resolve(c: Completion, batch: ProducerBatch, index: int, exc: BaseException | None) -> None:
    if c.done():  # the caller cancelled its future
        return
    try:
        if exc is not None:
            c.set_exception(exc)
        else:
            c.set_result(batch.metadata(index))
    except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError, RuntimeError):
        pass  # cancelled by another thread between done() and here

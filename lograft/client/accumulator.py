"""Per-partition queues of batches waiting to be sent (Kafka's RecordAccumulator).

Invariants:
- Each partition has a FIFO of batches; only the last one may be OPEN, and
  records enter a partition in `send` order, so batches leave in that order.
- `open[tp]` is the partition's OPEN batch, if any; `sticky[topic]` the last
  batch a keyless record of the topic went to (possibly closed since).
- A batch is ready to send when any holds: it is not the last of its queue
  or is full (`batch_bytes` or `batch_records`: the next record like its last
  would not fit); it may not linger (the sender's adaptive rule: no request
  to its leader in flight) or is `linger_ms` old; a flush or close is in
  progress; or the buffer pool has waiters (send what we have to free
  memory). `head_ready()` also says when the next lingering batch will be.
- Every batch not yet DONE is in `incomplete`, for flush().
- Every batch holds `batch_bytes` of the buffer pool from when it opens
  (or its one larger record's size) until it is drained, then what its
  records took until it is done.

Threads: records are appended from any thread (the sync Producer's callers
append in their own threads). Structural changes (opening, closing,
draining, expiring, aborting batches) happen under `lock`. Appending a
record to a batch that is already open needs no lock: `OpenBatch.append`
is one C call that does not release the GIL, and a closed OpenBatch refuses
appends, so a record either enters before the batch is drained or is
refused and goes through `append` (locked) to the next batch. That holds
for the C type only (`lock_free_appends`): with the pure-Python twin every
append goes through the lock. `append_many` runs under the lock and reads
where its run started from the batch (`run_start`), as a lock-free append
may enter between reading the count and the call. The sender's reads
(readiness) run on the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lograft.client.buffer_pool import BufferPool
from lograft.client.errors import ClientClosedError, SerializationError
from lograft.client.metadata import TopicMetadata
from lograft.client.partitioning import StickyPartitioner
from lograft.client.producer_batch import (
    RECORD_OVERHEAD_BYTES,
    BatchState,
    Completion,
    ProducerBatch,
    estimate_size,
)
from lograft.errors import RecordTooLargeError
from lograft.protocol.batch import HEADER_SIZE, Header
from lograft.protocol.open_batch import NO_ROOM, TOO_LARGE, OpenBatch, OpenBatchPython
from lograft.protocol.topic_partition import TopicPartition

if TYPE_CHECKING:
    from lograft.client.many_results import ManyResults


@dataclass(frozen=True, slots=True)
class Appended:
    """Where a record went: its batch and its index there."""

    batch: ProducerBatch
    index: int


@dataclass(frozen=True, slots=True)
class NeedMemory:
    """No room: reserve `size` bytes of the buffer pool (blocking as the
    caller may) and call again with `reserved=size` (append_many: from
    `start`, the first record not yet appended)."""

    size: int
    start: int = 0


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_bytes: int,
        linger_ms: int,
        loop: asyncio.AbstractEventLoop,
        batch_records: int | None = None,
        pool: BufferPool | None = None,
        max_request_bytes: int | None = None,
        partitioner: StickyPartitioner | None = None,
        on_news: Callable[[str], Any] | None = None,
    ) -> None:
        self.batch_bytes = batch_bytes
        self.batch_records = batch_records
        self.linger_s = linger_ms / 1000
        self._loop = loop
        # The defaults serve tests that drive an accumulator alone.
        self.pool = pool if pool is not None else BufferPool(1 << 62)
        self.record_max = (max_request_bytes or 1 << 62) - HEADER_SIZE
        self.partitioner = partitioner if partitioner is not None else StickyPartitioner()
        # Called (from the appending thread, outside the lock) with the topic
        # when a batch opened or filled: the sender has work (and must be woken
        # thread-safely by the callee).
        self.on_news = on_news
        self.lock = threading.Lock()
        # Whether records may be appended to an open batch without `lock`:
        # only the C OpenBatch's append is one atomic call.
        self.lock_free_appends = OpenBatch is not OpenBatchPython
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.open: dict[TopicPartition, ProducerBatch] = {}
        self.sticky: dict[str, ProducerBatch] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.closed = False  # no more appends (the producer closed or aborted)

    def now(self) -> float:
        return self._loop.time()

    # -- appending (any thread) -----------------------------------------------------------

    def append(
        self,
        meta: TopicMetadata,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        partition: int | None,
        timestamp: int | None,
        completion: Completion | None = None,
        *,
        reserved: int = 0,
        size: int | None = None,
        span: tuple[ManyResults, int] | None = None,
    ) -> Appended | NeedMemory:
        """Append one record (value, key, headers already bytes) to its
        partition's open batch, opening one when needed. `reserved` bytes of
        the pool are the caller's, for a new batch (given back if unused);
        when a new batch is needed and the pool has no room, answers
        NeedMemory and appends nothing. `size` is the record's estimate if
        the caller has it. `span` (a send_many's results, the record's index
        there) is registered with the batch. Raises ClientClosedError after close/abort,
        RecordTooLargeError, UnknownTopicOrPartitionError (partition)."""
        topic = meta.name
        with self.lock:
            try:
                out = self._append_locked(
                    meta, value, key, headers, partition, timestamp, reserved, size
                )
            except BaseException:
                if reserved:
                    self.pool.release(reserved)
                raise
            # Registered before the lock is released: the batch cannot be
            # drained (and so not completed) before its completions are known.
            if isinstance(out, Appended):
                if completion is not None:
                    out.batch.completions.append((out.index, completion))
                if span is not None:
                    span[0].add(span[1], out.batch, out.index, 1)
        if self.on_news is not None and (
            isinstance(out, Appended) and (out.index == 0 or out.batch.records.full)
        ):
            self.on_news(topic)
        return out

    def _append_locked(
        self,
        meta: TopicMetadata,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        partition: int | None,
        timestamp: int | None,
        reserved: int,
        size: int | None,
    ) -> Appended | NeedMemory:
        if self.closed:
            raise ClientClosedError("the producer is closed; records can no longer be sent")
        keyless = key is None and partition is None
        p = self.partitioner.partition(meta, key, partition)
        tp = TopicPartition(meta.name, p)
        batch = self.open.get(tp)
        if batch is not None:
            i = _checked(batch.records.append(value, key, headers, timestamp), size)
            if i >= 0:
                return self._appended(batch, i, keyless, reserved)
            self._close_open(batch)  # full: only the last batch may be open
        if keyless:
            # The sticky partition's batch is closed: move on (Kafka's KIP-480).
            p = self.partitioner.on_new_batch(meta, p)
            tp = TopicPartition(meta.name, p)
            batch = self.open.get(tp)
            if batch is not None:
                i = _checked(batch.records.append(value, key, headers, timestamp), size)
                if i >= 0:
                    return self._appended(batch, i, keyless, reserved)
                self._close_open(batch)
        if size is None:
            size = estimate_size(key, value, _header_list(headers))
        need = max(self.batch_bytes, size + HEADER_SIZE)
        if reserved < need:
            if reserved:
                self.pool.release(reserved)
            if not self.pool.try_reserve(need):
                return NeedMemory(need)
            reserved = need
        batch = ProducerBatch(
            tp,
            self.now(),
            self._loop.create_future(),
            OpenBatch(self.batch_bytes - HEADER_SIZE, self.batch_records or 0, self.record_max),
            reserved,
        )
        i = _checked(batch.records.append(value, key, headers, timestamp), size)
        if i < 0:  # an empty batch takes any record no larger than record_max
            self.pool.release(reserved)
            raise AssertionError("an empty batch refused a record")
        q = self.queues.get(tp)
        if q is None:
            q = self.queues[tp] = deque()
        q.append(batch)
        self.open[tp] = batch
        self.incomplete.add(batch)
        if keyless:
            self.sticky[meta.name] = batch
        return Appended(batch, i)

    def _appended(self, batch: ProducerBatch, index: int, keyless: bool, reserved: int) -> Appended:
        if reserved:
            self.pool.release(reserved)
        if keyless:
            self.sticky[batch.tp.topic] = batch
        return Appended(batch, index)

    def append_many(
        self,
        meta: TopicMetadata,
        values: Sequence[Any],
        timestamps: Sequence[int | None] | None,
        many: ManyResults,
        start: int,
        *,
        reserved: int = 0,
    ) -> int | NeedMemory:
        """Append keyless records values[start:] (bytes or None) to the topic's
        sticky batches, a run per batch (one C call each), each run a span of
        `many`. Answers len(values) when all are appended, or NeedMemory (as
        `append`; the records before its `start` are in)."""
        topic = meta.name
        news = False
        count = len(values)
        try:
            with self.lock:
                if self.closed:
                    raise ClientClosedError("the producer is closed; records can no longer be sent")
                while start < count:
                    batch = self.sticky.get(topic)
                    if batch is None or batch.records.closed:
                        batch = None
                        p = self.partitioner.partition(meta, None, None)
                        batch = self.open.get(TopicPartition(topic, p))
                        if batch is not None:
                            self.sticky[topic] = batch
                    n = 0
                    if batch is not None:
                        n = _many(batch.records, values, timestamps, start)
                        if n:
                            many.add(start, batch, batch.records.run_start, n)
                            start += n
                            news = news or batch.records.full
                            continue
                        self._close_open(batch)
                        p = self.partitioner.on_new_batch(meta, batch.tp.partition)
                    else:
                        p = self.partitioner.partition(meta, None, None)
                    # A new batch at p, for the run that did not fit.
                    tp = TopicPartition(topic, p)
                    old = self.open.get(tp)
                    if old is not None:
                        self._close_open(old)
                    size = RECORD_OVERHEAD_BYTES + _value_size(values[start])
                    need = max(self.batch_bytes, size + HEADER_SIZE)
                    if reserved < need:
                        if reserved:
                            self.pool.release(reserved)
                            reserved = 0
                        if not self.pool.try_reserve(need):
                            return NeedMemory(need, start)
                        reserved = need
                    batch = ProducerBatch(
                        tp,
                        self.now(),
                        self._loop.create_future(),
                        OpenBatch(
                            self.batch_bytes - HEADER_SIZE, self.batch_records or 0, self.record_max
                        ),
                        reserved,
                    )
                    reserved = 0
                    try:
                        n = _many(batch.records, values, timestamps, start)
                    except BaseException:
                        self.pool.release(batch.reserved_bytes)  # the batch is dropped
                        raise
                    if n == 0:  # an empty batch takes any record no larger than record_max
                        self.pool.release(batch.reserved_bytes)
                        raise RecordTooLargeError(
                            f"send_many: record {start} (~{size} bytes) does not fit in "
                            "max_request_bytes with its batch header",
                            size=size,
                        )
                    q = self.queues.get(tp)
                    if q is None:
                        q = self.queues[tp] = deque()
                    q.append(batch)
                    self.open[tp] = batch
                    self.incomplete.add(batch)
                    self.sticky[topic] = batch
                    many.add(start, batch, 0, n)
                    start += n
                    news = True
            return start
        finally:
            if reserved:
                self.pool.release(reserved)
            if news and self.on_news is not None:
                self.on_news(topic)

    def filled(self, batch: ProducerBatch) -> None:
        """A lock-free append filled `batch`: the sender can send it now."""
        if self.on_news is not None:
            self.on_news(batch.tp.topic)

    def _close_open(self, batch: ProducerBatch) -> None:
        """Close the partition's open batch (under the lock)."""
        if batch.state is BatchState.OPEN:
            batch.close()
        if self.open.get(batch.tp) is batch:
            del self.open[batch.tp]

    # -- the sender's side (the loop) ---------------------------------------------------------

    def _has_room(self, batch: ProducerBatch) -> bool:
        return self.batch_records is None or batch.record_count < self.batch_records

    def _is_full(self, batch: ProducerBatch) -> bool:
        return batch.is_full() or not self._has_room(batch)

    def head_ready(
        self, tp: TopicPartition, *, force: bool, now: float, linger: bool = True
    ) -> tuple[bool, float | None]:
        """(ready, seconds until it will be) for the partition's first batch;
        `linger` False: an open batch does not wait for `linger_ms`."""
        q = self.queues.get(tp)
        if not q:
            return False, None
        head = q[0]
        if force or not linger or len(q) > 1 or head.state is not BatchState.OPEN:
            return True, 0.0
        if self._is_full(head):
            return True, 0.0
        wait = head.created + self.linger_s - now
        return (wait <= 0), max(wait, 0.0)

    def drain(self, tp: TopicPartition) -> ProducerBatch:
        """Take the partition's first batch for sending (closing it if open), and
        give back the part of its reservation its records did not take."""
        with self.lock:
            batch = self.queues[tp].popleft()
            self._close_open(batch)
        unused = batch.reserved_bytes - batch.size_bytes
        if unused > 0:
            batch.reserved_bytes -= unused
            self.pool.release(unused)
        return batch

    def expire(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Queued (never sent) batches older than the delivery timeout, removed."""
        out: list[ProducerBatch] = []
        with self.lock:
            for q in self.queues.values():
                while q and now - q[0].created >= delivery_timeout_s:
                    batch = q.popleft()
                    self._close_open(batch)
                    out.append(batch)
        return out

    def next_expiry(self, delivery_timeout_s: float) -> float | None:
        """When the oldest queued batch expires (loop time), None if none is queued."""
        with self.lock:
            heads = [q[0].created for q in self.queues.values() if q]
        return min(heads) + delivery_timeout_s if heads else None

    def abort_all(self) -> list[ProducerBatch]:
        with self.lock:
            out = [b for q in self.queues.values() for b in q]
            for q in self.queues.values():
                q.clear()
            for b in out:
                self._close_open(b)
        return out

    def close_appends(self) -> None:
        """Refuse every later append (ClientClosedError); queued batches stay."""
        with self.lock:
            self.closed = True

    def done(self, batch: ProducerBatch) -> None:
        with self.lock:
            self.incomplete.discard(batch)

    def pending_done(self) -> list[asyncio.Future[None]]:
        """The `done` futures of every batch not yet done, for flush()."""
        with self.lock:
            return [b.done for b in self.incomplete]

    def has_queued(self) -> bool:
        with self.lock:
            return any(self.queues.values())


def _checked(index: int, size: int | None) -> int:
    if index == TOO_LARGE:
        raise RecordTooLargeError(
            "a record does not fit in max_request_bytes with its batch header"
            + (f" (~{size} bytes)" if size is not None else ""),
            size=size,
        )
    return index


def _many(
    records: OpenBatch, values: Sequence[Any], timestamps: Sequence[int | None] | None, start: int
) -> int:
    try:
        return records.append_many(values, None, timestamps, start)
    except TypeError as exc:
        raise SerializationError(f"send_many: {exc}") from exc


def _value_size(value: Any) -> int:
    """Bytes of a send_many value (bytes-like or None), without copying it."""
    if value is None:
        return 0
    if isinstance(value, bytes):
        return len(value)
    try:
        with memoryview(value) as view:
            return view.nbytes
    except TypeError as exc:
        raise SerializationError(
            f"send_many: a record's value must be bytes-like or None, not {type(value).__name__}"
        ) from exc


def _header_list(headers: Sequence[Header] | None) -> Sequence[Header]:
    return () if headers is None else headers


__all__ = ["NO_ROOM", "Appended", "NeedMemory", "RecordAccumulator"]

"""Per-partition queues of batches waiting to be sent (Kafka's RecordAccumulator).

Invariants:
- Each partition has a FIFO of batches; only the last one may be OPEN, and
  records enter a partition in `send` order, so batches leave in that order.
- A batch is ready to send when any holds: it is not the last of its queue
  or has reached `batch_bytes` or `batch_records` (full); it may not linger
  (the sender's adaptive rule: no request to its leader in flight) or is
  `linger_ms` old; a flush or close is in progress; or the buffer pool has
  waiters (send what we have to free memory). `head_ready()` also says when
  the next lingering batch will be.
- Every batch not yet DONE is in `incomplete`, for flush().

Loop-bound: only the producer's event loop touches it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from lograft.client.producer_batch import BatchState, Completion, ProducerBatch
from lograft.protocol.batch import RecordInput
from lograft.protocol.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    appended: bool
    new_batch: bool = False  # a batch was opened (a linger timer starts)
    batch_full: bool = False  # the batch it went into is now full


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_bytes: int,
        linger_ms: int,
        loop: asyncio.AbstractEventLoop,
        batch_records: int | None = None,
    ) -> None:
        self.batch_bytes = batch_bytes
        self.batch_records = batch_records
        self.linger_s = linger_ms / 1000
        self._loop = loop
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()

    def now(self) -> float:
        return self._loop.time()

    def append(
        self,
        tp: TopicPartition,
        record: RecordInput,
        size: int,
        completion: Completion,
        *,
        abort_on_new_batch: bool = False,
    ) -> AppendOutcome:
        """Add a record to the partition's open batch, opening one if needed.

        With `abort_on_new_batch` (keyless records) nothing is appended when a
        new batch would be needed: the caller switches sticky partition first.
        """
        q = self.queues.get(tp)
        if q is None:
            q = self.queues[tp] = deque()
        if (
            q
            and self._has_room(q[-1])
            and q[-1].try_append(record, size, completion, self.batch_bytes)
        ):
            return AppendOutcome(True, batch_full=self._is_full(q[-1]))
        if abort_on_new_batch:
            return AppendOutcome(False)
        if q and q[-1].state is BatchState.OPEN:
            q[-1].close()  # full: only the last batch may be open
        batch = ProducerBatch(tp, self.now(), self._loop.create_future())
        appended = batch.try_append(record, size, completion, self.batch_bytes)
        assert appended, "an empty batch takes any record"
        q.append(batch)
        self.incomplete.add(batch)
        return AppendOutcome(True, new_batch=True, batch_full=self._is_full(batch))

    def _has_room(self, batch: ProducerBatch) -> bool:
        return self.batch_records is None or batch.record_count < self.batch_records

    def _is_full(self, batch: ProducerBatch) -> bool:
        return batch.is_full(self.batch_bytes) or not self._has_room(batch)

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
        """Take the partition's first batch for sending (closing it if open)."""
        batch = self.queues[tp].popleft()
        if batch.state is BatchState.OPEN:
            batch.close()
        return batch

    def expire(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Queued (never sent) batches older than the delivery timeout, removed."""
        out: list[ProducerBatch] = []
        for q in self.queues.values():
            while q and now - q[0].created >= delivery_timeout_s:
                out.append(q.popleft())
        return out

    def next_expiry(self, delivery_timeout_s: float) -> float | None:
        """When the oldest queued batch expires (loop time), None if none is queued."""
        heads = [q[0].created for q in self.queues.values() if q]
        return min(heads) + delivery_timeout_s if heads else None

    def abort_all(self) -> list[ProducerBatch]:
        out = [b for q in self.queues.values() for b in q]
        for q in self.queues.values():
            q.clear()
        return out

    def done(self, batch: ProducerBatch) -> None:
        self.incomplete.discard(batch)

    def has_queued(self) -> bool:
        return any(self.queues.values())

"""The completion of a `send_many`: one future for the whole call.

`send_many` appends its records to batches in runs; each run is a `ManySpan`
(this call's records `start..start+count-1` are the batch's records
`batch_start..`), registered on the batch. When a batch completes it tells
each span's `ManyResults` how many of its records are done; the future
resolves once all are, to a `RecordMetadataList` that computes each record's
`RecordMetadata` from its batch when read (nothing is built per record at
completion), or fails with the first error. A concurrent.futures.Future, so
that the sync Producer hands it out as is and the AsyncProducer wraps it for
its loop. Spans are resolved on the producer's loop only.
"""

from __future__ import annotations

import bisect
import concurrent.futures
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from lograft.client.types import RecordMetadata

if TYPE_CHECKING:
    from lograft.client.producer_batch import ProducerBatch


class ManySpan:
    """Records start..start+count-1 of one send_many, in one batch from batch_start."""

    __slots__ = ("batch", "batch_start", "count", "many", "start")

    def __init__(
        self, many: ManyResults, start: int, batch: ProducerBatch, batch_start: int, count: int
    ) -> None:
        self.many = many
        self.start = start
        self.batch = batch
        self.batch_start = batch_start
        self.count = count


class ManyResults:
    __slots__ = ("future", "pending", "spans")

    def __init__(self, count: int) -> None:
        self.future: concurrent.futures.Future[Sequence[RecordMetadata]] = (
            concurrent.futures.Future()
        )
        self.spans: list[ManySpan] = []
        self.pending = count
        if count == 0:
            self.future.set_result(RecordMetadataList([]))

    def add(self, start: int, batch: ProducerBatch, batch_start: int, count: int) -> None:
        """Records start.. of this call went to `batch` from `batch_start` (under
        the accumulator's lock: the batch is not done yet)."""
        last = self.spans[-1] if self.spans else None
        if (
            last is not None
            and last.batch is batch
            and last.start + last.count == start
            and last.batch_start + last.count == batch_start
        ):
            last.count += count  # the same run goes on
            return
        span = ManySpan(self, start, batch, batch_start, count)
        self.spans.append(span)
        batch.spans.append(span)

    def span_done(self, span: ManySpan) -> None:
        self.pending -= span.count
        if self.pending == 0 and not self.future.done():
            self.future.set_result(RecordMetadataList(self.spans))

    def fail(self, exc: BaseException) -> None:
        """Fail the whole call (first error wins; later results are dropped)."""
        if not self.future.done():
            self.future.set_exception(exc)


class RecordMetadataList(Sequence[RecordMetadata]):
    """The RecordMetadata of every record of a send_many, in order, computed
    from the records' batches when read. Compares equal to any sequence of
    the same RecordMetadata (a list included)."""

    __slots__ = ("_len", "_spans", "_starts")

    def __init__(self, spans: list[ManySpan]) -> None:
        self._spans = spans
        self._starts = [s.start for s in spans]
        self._len = sum(s.count for s in spans)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("send_many result index out of range")
        span = self._spans[bisect.bisect_right(self._starts, index) - 1]
        return span.batch.metadata(span.batch_start + index - span.start)

    def __iter__(self) -> Iterator[RecordMetadata]:
        for span in self._spans:
            meta = span.batch.metadata
            for j in range(span.batch_start, span.batch_start + span.count):
                yield meta(j)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordMetadataList({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))

"""The completion of a `send_many`: one future for the whole call.

`send_many` appends each record with a `ManySlot` as its completion (the
accumulator and batches resolve records one by one, as for `send`); the
slots fill one list and resolve `ManyResults.future` when the last record is
acknowledged, or fail it with the first error. A concurrent.futures.Future,
so that the sync Producer hands it out as is and the AsyncProducer wraps it
for its loop. Slots are resolved on the producer's loop only.
"""

from __future__ import annotations

import concurrent.futures

from lograft.client.types import RecordMetadata


class ManyResults:
    __slots__ = ("future", "pending", "results")

    def __init__(self, count: int) -> None:
        self.future: concurrent.futures.Future[list[RecordMetadata]] = concurrent.futures.Future()
        self.results: list[RecordMetadata | None] = [None] * count
        self.pending = count
        if count == 0:
            self.future.set_result([])

    def slot(self, index: int) -> ManySlot:
        return ManySlot(self, index)

    def fail(self, exc: BaseException) -> None:
        """Fail the whole call (first error wins; later results are dropped)."""
        if not self.future.done():
            self.future.set_exception(exc)


class ManySlot:
    """The `Completion` of record `index` of a send_many."""

    __slots__ = ("index", "many")

    def __init__(self, many: ManyResults, index: int) -> None:
        self.many = many
        self.index = index

    def done(self) -> bool:
        return self.many.future.done()

    def set_result(self, result: RecordMetadata) -> None:
        many = self.many
        many.results[self.index] = result
        many.pending -= 1
        if many.pending == 0 and not many.future.done():
            many.future.set_result(many.results)  # type: ignore[arg-type]  # all filled

    def set_exception(self, exception: BaseException) -> None:
        self.many.fail(exception)

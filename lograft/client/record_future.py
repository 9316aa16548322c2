"""Light thread-safe futures for the sync producer's per-record results.

A record's future is two slots: the `Outcomes` it belongs to (its batch)
and its index there. A batch is resolved once (`ProducerBatch.complete` or
`fail` sets its outcome, base offset and append time); a future computes
its `RecordMetadata` from those when it is read, so completing a batch of
500 records builds nothing per record unless someone asks. A
`threading.Event` is created only when a thread actually waits on an
unresolved batch, and only the callbacks that were registered run. One
module lock guards state changes (resolved on the producer's loop thread,
read from any thread).

`FutureRecordMetadata()` without a batch is a standalone future of one
record, resolved by `set_result` / `set_exception` (for code that makes its
own, e.g. tests).

API as kafka-python's FutureRecordMetadata plus the concurrent.futures
names: `get(timeout)` / `result(timeout)`, `exception(timeout)`, `done()`,
`succeeded()`, `failed()`, `add_done_callback(fn)`. A record cannot be
recalled once handed to the producer, so `cancel()` returns False.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from lograft.client.errors import ClientTimeoutError
from lograft.client.types import RecordMetadata

log = logging.getLogger(__name__)

_lock = threading.Lock()
PENDING, OK, FAILED = 0, 1, 2


class Outcomes:
    """The results of a run of records, set once: `metadata(index)` once OK,
    `error` once FAILED. Subclasses say how a record's metadata is computed."""

    __slots__ = ("_callbacks", "_event", "error", "outcome")

    def __init__(self) -> None:
        self.outcome = PENDING
        self.error: BaseException | None = None
        self._event: threading.Event | None = None
        self._callbacks: list[tuple[FutureRecordMetadata, Callable[[Any], Any]]] | None = None

    def metadata(self, index: int) -> RecordMetadata:
        raise NotImplementedError

    def settle(self, error: BaseException | None) -> None:
        """Resolve every record (OK when `error` is None); wakes waiters, runs callbacks."""
        with _lock:
            if self.outcome != PENDING:
                raise RuntimeError("a record's future is resolved once")
            self.error = error
            self.outcome = OK if error is None else FAILED
            event, callbacks = self._event, self._callbacks
            self._callbacks = None
        if event is not None:
            event.set()
        for fut, fn in callbacks or ():
            try:
                fn(fut)
            except Exception:
                # As concurrent.futures does: one callback's bug must not stop
                # the others, nor the batch's completion.
                log.exception("producer: a record's done callback raised")

    def wait(self, timeout: float | None) -> None:
        if self.outcome != PENDING:
            return
        with _lock:
            if self.outcome != PENDING:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout):
            raise ClientTimeoutError(f"the record was not acknowledged within {timeout} s")

    def add_callback(self, fut: FutureRecordMetadata, fn: Callable[[Any], Any]) -> bool:
        """Register `fn(fut)` for when resolved; False if already resolved (run it now)."""
        with _lock:
            if self.outcome != PENDING:
                return False
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append((fut, fn))
            return True


class _One(Outcomes):
    """A standalone future's outcome: one record, its metadata given."""

    __slots__ = ("_meta",)

    def __init__(self) -> None:
        super().__init__()
        self._meta: RecordMetadata | None = None

    def metadata(self, index: int) -> RecordMetadata:
        assert self._meta is not None
        return self._meta


class FutureRecordMetadata:
    __slots__ = ("_index", "_outcomes")

    def __init__(self, outcomes: Outcomes | None = None, index: int = 0) -> None:
        self._outcomes = _One() if outcomes is None else outcomes
        self._index = index

    def __repr__(self) -> str:
        o = self._outcomes
        if o.outcome == PENDING:
            return "<FutureRecordMetadata pending>"
        if o.outcome == FAILED:
            return f"<FutureRecordMetadata failed {o.error!r}>"
        return f"<FutureRecordMetadata done {o.metadata(self._index)!r}>"

    # -- resolving a standalone future ------------------------------------------------------

    def set_result(self, result: RecordMetadata) -> None:
        o = self._outcomes
        if not isinstance(o, _One):
            raise RuntimeError("a batch's record future is resolved by its batch")
        with _lock:
            if o.outcome != PENDING:
                raise RuntimeError("a record's future is resolved once")
            o._meta = result
        o.settle(None)

    def set_exception(self, exception: BaseException) -> None:
        if not isinstance(self._outcomes, _One):
            raise RuntimeError("a batch's record future is resolved by its batch")
        self._outcomes.settle(exception)

    # -- reading (any thread) -------------------------------------------------------------

    def done(self) -> bool:
        return self._outcomes.outcome != PENDING

    def succeeded(self) -> bool:
        return self._outcomes.outcome == OK

    def failed(self) -> bool:
        return self._outcomes.outcome == FAILED

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The RecordMetadata, or the record's error raised; ClientTimeoutError
        after `timeout` seconds (the record is still being delivered)."""
        o = self._outcomes
        o.wait(timeout)
        if o.outcome == FAILED:
            assert o.error is not None
            raise o.error
        return o.metadata(self._index)

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        o = self._outcomes
        o.wait(timeout)
        return o.error if o.outcome == FAILED else None

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], Any]) -> None:
        """Call `fn(future)` once resolved: at once if it is, else on the producer's
        loop thread (keep it short; it must not call the producer's blocking methods).
        An exception it raises is logged, not propagated."""
        if not self._outcomes.add_callback(self, fn):
            fn(self)

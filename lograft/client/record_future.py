"""A light thread-safe future for the sync producer's per-record results.

`concurrent.futures.Future` builds a Condition and an RLock per instance,
which costs more than the rest of `send()` for small records. This future
holds its state in slots and creates a `threading.Event` only when a thread
actually waits on an unfinished one. One module lock guards state changes
(resolved on the producer's loop thread, read from any thread).

API as kafka-python's FutureRecordMetadata plus the concurrent.futures
names: `get(timeout)` / `result(timeout)`, `exception(timeout)`, `done()`,
`succeeded()`, `failed()`, `add_done_callback(fn)`. A record cannot be
recalled once handed to the producer, so `cancel()` returns False.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lograft.client.errors import ClientTimeoutError
from lograft.client.types import RecordMetadata

_lock = threading.Lock()
_PENDING, _OK, _FAILED = 0, 1, 2


class FutureRecordMetadata:
    __slots__ = ("_callbacks", "_event", "_state", "_value")

    def __init__(self) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[FutureRecordMetadata], Any]] | None = None

    def __repr__(self) -> str:
        state = {_PENDING: "pending", _OK: "done", _FAILED: "failed"}[self._state]
        return f"<FutureRecordMetadata {state} {self._value!r}>"

    # -- resolving (the producer's loop thread) -----------------------------------------

    def set_result(self, result: RecordMetadata) -> None:
        self._resolve(_OK, result)

    def set_exception(self, exception: BaseException) -> None:
        self._resolve(_FAILED, exception)

    def _resolve(self, state: int, value: Any) -> None:
        with _lock:
            if self._state != _PENDING:
                raise RuntimeError("a record's future is resolved once")
            self._value = value
            self._state = state
            event, callbacks = self._event, self._callbacks
            self._callbacks = None
        if event is not None:
            event.set()
        for fn in callbacks or ():
            fn(self)

    # -- reading (any thread) -------------------------------------------------------------

    def done(self) -> bool:
        return self._state != _PENDING

    def succeeded(self) -> bool:
        return self._state == _OK

    def failed(self) -> bool:
        return self._state == _FAILED

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def _wait(self, timeout: float | None) -> None:
        if self._state != _PENDING:
            return
        with _lock:
            if self._state != _PENDING:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout):
            raise ClientTimeoutError(f"the record was not acknowledged within {timeout} s")

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The RecordMetadata, or the record's error raised; ClientTimeoutError
        after `timeout` seconds (the record is still being delivered)."""
        self._wait(timeout)
        if self._state == _FAILED:
            raise self._value
        return self._value

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._value if self._state == _FAILED else None

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], Any]) -> None:
        """Call `fn(future)` once resolved: at once if it is, else on the producer's
        loop thread (keep it short; it must not call the producer's blocking methods)."""
        with _lock:
            if self._state == _PENDING:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

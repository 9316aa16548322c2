"""The producer's memory bound: bytes of records accepted but not yet done.

Invariant: 0 <= used <= total_bytes at all times. A batch reserves
`batch_bytes` (or its one larger record's size) when it opens, gives back
what its records did not take when it is drained, and the rest when it
completes (acknowledged or failed), so records waiting in the producer never
take more than `buffer_memory_bytes`. Reserving per batch, not per record,
keeps the pool's lock off the per-record path (Kafka's BufferPool allocates
`batch.size` per batch the same way).

Threads: `reserve_blocking`, `try_reserve` and `release` may be called
from any thread (the sync producer's callers reserve and give back in
their own threads); `reserve` (async) runs on the producer's event loop.
One lock covers the counter; a condition wakes blocked threads and loop
futures wake async waiters, so no release is lost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from lograft.client.errors import BufferFullError
from lograft.errors import RecordTooLargeError


class BufferPool:
    def __init__(self, total_bytes: int) -> None:
        assert total_bytes > 0
        self.total_bytes = total_bytes
        # Called (from any thread) when someone starts waiting for room: the
        # producer wakes its sender, which then sends lingering batches at once.
        self.on_wait: Callable[[], object] | None = None  # its result is ignored
        self._used = 0
        self._cond = threading.Condition(threading.Lock())
        self._blocked_threads = 0
        self._async_waiters: list[asyncio.Future[None]] = []

    @property
    def used(self) -> int:
        return self._used

    @property
    def has_waiters(self) -> bool:
        """Someone is waiting for room: the sender should send what it has now."""
        return self._blocked_threads > 0 or bool(self._async_waiters)

    def _check(self, size: int) -> None:
        if size > self.total_bytes:
            raise RecordTooLargeError(
                f"a record of ~{size} bytes is larger than buffer_memory_bytes={self.total_bytes}",
                size=size,
            )

    def try_reserve(self, size: int) -> bool:
        self._check(size)
        with self._cond:
            if self._used + size > self.total_bytes:
                return False
            self._used += size
            return True

    def reserve_blocking(self, size: int, timeout_ms: int) -> None:
        """Reserve `size` bytes, waiting up to `timeout_ms`; BufferFullError after."""
        self._check(size)
        deadline = time.monotonic() + timeout_ms / 1000
        with self._cond:
            while self._used + size > self.total_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._full(size, timeout_ms)
                self._blocked_threads += 1
                if self.on_wait is not None:
                    self.on_wait()
                try:
                    self._cond.wait(remaining)
                finally:
                    self._blocked_threads -= 1
            self._used += size

    async def reserve(self, size: int, timeout_ms: int) -> None:
        """Async `reserve_blocking`, for callers on the producer's loop."""
        if self.try_reserve(size):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise self._full(size, timeout_ms)
            waiter: asyncio.Future[None] = loop.create_future()
            with self._cond:
                self._async_waiters.append(waiter)
            if self.on_wait is not None:
                self.on_wait()
            try:
                await asyncio.wait([waiter], timeout=remaining)
            finally:
                with self._cond:
                    if waiter in self._async_waiters:
                        self._async_waiters.remove(waiter)
            if self.try_reserve(size):
                return

    def release(self, size: int) -> None:
        """Give `size` bytes back (any thread); wakes every waiter to retry."""
        with self._cond:
            self._used -= size
            assert self._used >= 0, f"released more than reserved (used={self._used})"
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for w in waiters:
            loop = w.get_loop()
            if asyncio._get_running_loop() is loop:
                _wake(w)
            else:  # a sync caller's thread gave back what an async waiter waits for
                loop.call_soon_threadsafe(_wake, w)

    def _full(self, size: int, timeout_ms: int) -> BufferFullError:
        return BufferFullError(
            f"no room for ~{size} bytes in buffer_memory_bytes={self.total_bytes} "
            f"({self._used} in use) after max_block_ms={timeout_ms}; the cluster is slower "
            "than the producer or unreachable",
            size=size,
            used=self._used,
        )


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

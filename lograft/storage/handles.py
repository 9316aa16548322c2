"""A bounded pool of read-only file descriptors for sealed segments.

A broker with thousands of partitions and long retention has far more segment
files than it may hold open. Sealed segments borrow a descriptor from this
pool for the duration of one read and it stays cached, least recently used
first out, up to `max_open_files`. A descriptor in use is pinned and never
closed under its reader; one discarded while pinned closes when released.
Thread-safe: a broker reads from its event loop while flushes and the cleaner
run in threads.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_MAX_OPEN_FILES = 1024


class _Entry:
    __slots__ = ("doomed", "fd", "pins")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.doomed = False


class FilePool:
    def __init__(self, max_open_files: int = DEFAULT_MAX_OPEN_FILES) -> None:
        if max_open_files < 1:
            raise ValueError("max_open_files must be >= 1")
        self.max_open_files = max_open_files
        self._lock = threading.Lock()
        self._open: OrderedDict[str, _Entry] = OrderedDict()

    @contextmanager
    def borrow(self, path: str) -> Iterator[int]:
        entry = self._acquire(path)
        try:
            yield entry.fd
        finally:
            self._release(entry)

    def _acquire(self, path: str) -> _Entry:
        with self._lock:
            entry = self._open.get(path)
            if entry is not None:
                self._open.move_to_end(path)
                entry.pins += 1
                return entry
        fd = os.open(path, os.O_RDONLY)
        with self._lock:
            entry = self._open.get(path)
            if entry is not None:  # another thread opened it meanwhile
                os.close(fd)
            else:
                entry = _Entry(fd)
                self._open[path] = entry
                self._evict_locked()
            entry.pins += 1
            return entry

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.pins -= 1
            if entry.doomed and entry.pins == 0:
                os.close(entry.fd)

    def _evict_locked(self) -> None:
        excess = len(self._open) - self.max_open_files
        if excess <= 0:
            return
        for path in list(self._open):
            if excess <= 0:
                break
            entry = self._open[path]
            if entry.pins:
                continue
            del self._open[path]
            os.close(entry.fd)
            excess -= 1

    def discard(self, path: str) -> None:
        """Forget a file (deleted or renamed); close its descriptor when unused."""
        with self._lock:
            entry = self._open.pop(path, None)
            if entry is None:
                return
            if entry.pins:
                entry.doomed = True
            else:
                os.close(entry.fd)

    def close_all(self) -> None:
        with self._lock:
            for entry in self._open.values():
                if entry.pins:
                    entry.doomed = True
                else:
                    os.close(entry.fd)
            self._open.clear()

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._open)


_default_pool = FilePool()


def default_pool() -> FilePool:
    """The process-wide pool logs share unless given their own."""
    return _default_pool

"""A bounded pool of read-only file descriptors and mappings for sealed segments.

A broker with thousands of partitions and long retention has far more segment
files than it may hold open. Sealed segments borrow what they need from this
pool for the duration of one read, and it stays cached, least recently used
first out, up to `max_open_files`:

- `borrow(path)`: a read-only descriptor (segment `.log` files);
- `borrow_map(path)`: a read-only mmap of the whole file (sealed `.index` and
  `.timeindex` files). CPython's mmap keeps a dup() of the descriptor for
  its lifetime, so each cached mapping costs one descriptor too and counts
  against the same limit.

Something borrowed is pinned and never closed under its reader; one discarded
or evicted while pinned closes when released. Thread-safe: a broker reads
from its event loop while flushes and the cleaner run in threads.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_MAX_OPEN_FILES = 1024


class _Entry:
    __slots__ = ("doomed", "fd", "mm", "pins")

    def __init__(self, fd: int, mm: mmap.mmap | None = None) -> None:
        self.fd = fd
        self.mm = mm
        self.pins = 0
        self.doomed = False

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()  # closes the mapping's own descriptor
        else:
            os.close(self.fd)


_Key = tuple[str, bool]  # (path, mapped)


class FilePool:
    def __init__(self, max_open_files: int = DEFAULT_MAX_OPEN_FILES) -> None:
        if max_open_files < 1:
            raise ValueError("max_open_files must be >= 1")
        self.max_open_files = max_open_files
        self._lock = threading.Lock()
        self._open: OrderedDict[_Key, _Entry] = OrderedDict()

    @contextmanager
    def borrow(self, path: str) -> Iterator[int]:
        entry = self._acquire(path, mapped=False)
        try:
            yield entry.fd
        finally:
            self._release(entry)

    @contextmanager
    def borrow_map(self, path: str) -> Iterator[mmap.mmap]:
        """A read-only mapping of the whole (non-empty) file."""
        entry = self._acquire(path, mapped=True)
        try:
            assert entry.mm is not None
            yield entry.mm
        finally:
            self._release(entry)

    def _acquire(self, path: str, *, mapped: bool) -> _Entry:
        key = (path, mapped)
        with self._lock:
            entry = self._open.get(key)
            if entry is not None:
                self._open.move_to_end(key)
                entry.pins += 1
                return entry
        opened = _open_entry(path, mapped)  # I/O outside the lock
        with self._lock:
            entry = self._open.get(key)
            if entry is not None:  # another thread opened it meanwhile
                opened.close()
            else:
                entry = opened
                self._open[key] = entry
            # Pinned before evicting, so the entry being handed out is never
            # the one closed to make room.
            entry.pins += 1
            self._evict_locked()
            return entry

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.pins -= 1
            if entry.doomed and entry.pins == 0:
                entry.close()

    def _evict_locked(self) -> None:
        excess = len(self._open) - self.max_open_files
        if excess <= 0:
            return
        for key in list(self._open):
            if excess <= 0:
                break
            entry = self._open[key]
            if entry.pins:
                continue
            del self._open[key]
            entry.close()
            excess -= 1

    def discard(self, path: str) -> None:
        """Forget a file (deleted, truncated or renamed over); close what the
        pool holds of it when unused."""
        with self._lock:
            for key in ((path, False), (path, True)):
                entry = self._open.pop(key, None)
                if entry is None:
                    continue
                if entry.pins:
                    entry.doomed = True
                else:
                    entry.close()

    def close_all(self) -> None:
        with self._lock:
            for entry in self._open.values():
                if entry.pins:
                    entry.doomed = True
                else:
                    entry.close()
            self._open.clear()

    @property
    def open_count(self) -> int:
        """Descriptors the pool holds (each cached mapping holds one)."""
        with self._lock:
            return len(self._open)


def _open_entry(path: str, mapped: bool) -> _Entry:
    fd = os.open(path, os.O_RDONLY)
    if not mapped:
        return _Entry(fd)
    try:
        return _Entry(-1, mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
    finally:
        os.close(fd)


_default_pool = FilePool()


def default_pool() -> FilePool:
    """The process-wide pool logs share unless given their own."""
    return _default_pool

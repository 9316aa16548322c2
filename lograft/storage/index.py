"""Sparse offset and time indexes of a segment, as Kafka lays them out.

`.index`: 8-byte entries, big-endian int32 relative offset (offset - segment
base offset) and int32 byte position in the `.log` file; strictly increasing
in both fields.

`.timeindex`: 12-byte entries, big-endian int64 timestamp and int32 relative
offset; timestamps strictly increasing, offsets non-decreasing. Each entry
says "the largest timestamp seen up to this offset".

The index of the active segment is preallocated to `segment_index_bytes` and
mmapped writable (entries are stores into memory, no syscall); when the
segment is sealed, or the log closed, the file is trimmed to its entries.
After an unclean shutdown the trailing preallocated zeros are ignored, and
recovery rebuilds the index of every segment it re-reads. Lookups binary-search
the mmap, so their cost is O(log entries) whatever the log's size, and the
index costs page cache, not Python heap.

A sealed index is not mapped for its lifetime: CPython's mmap holds a dup()
of the descriptor, so a log of many segments would hold two descriptors per
segment. Its mapping is borrowed from the FilePool for each lookup, cached
there least recently used first, within the pool's descriptor limit.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lograft import power_loss
from lograft.storage.handles import FilePool, default_pool

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexFullError(Exception):
    """Internal: the preallocated index has no room; the segment must roll."""


class _MappedIndex:
    """An mmapped file of fixed-size entries; subclasses give them meaning."""

    entry: struct.Struct

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_bytes: int,
        writable: bool,
        pool: FilePool | None = None,
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_bytes = max_bytes - max_bytes % self.entry.size
        self.writable = writable
        self.pool = pool or default_pool()
        self._mm: mmap.mmap | None = None  # only while writable
        self.entries = 0
        # The newest entry while writable: every append compares against it,
        # and reading it back through the mapping cost more than the store.
        self._last: tuple[int, ...] | None = None
        self._open()

    # -- lifecycle ---------------------------------------------------------------

    def _open(self) -> None:
        if not self.writable:
            # Sealed: count the entries; lookups borrow a mapping from the pool.
            # A missing index of a sealed segment has none: the log rebuilds it.
            try:
                self.entries = self.path.stat().st_size // self.entry.size
            except FileNotFoundError:
                self.entries = 0
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            self.entries = size // self.entry.size
            length = max(self.max_bytes, self.entries * self.entry.size)
            if size != length:
                os.ftruncate(fd, length)
            self._mm = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE)
        finally:
            # The mapping keeps its own descriptor.
            os.close(fd)
        # No readahead: on the first store into a fresh (sparse) index the
        # kernel otherwise reads ahead a window of holes, zero-filling page
        # cache for it. With read_ahead_kb=8192 that cost 3 ms of CPU and
        # 8 MiB of page cache per 10 MiB index (17 us without); appends only
        # touch the next page and lookups are binary searches.
        self._mm.madvise(mmap.MADV_RANDOM)
        self._reload_last()

    def _reload_last(self) -> None:
        if self._mm is None or not self.entries:
            self._last = None
        else:
            self._last = self.entry.unpack_from(self._mm, (self.entries - 1) * self.entry.size)

    @contextmanager
    def _view(self) -> Iterator[mmap.mmap]:
        """The entries' bytes: the writable mapping, or one borrowed from the pool."""
        if self._mm is not None:
            yield self._mm
            return
        with self.pool.borrow_map(str(self.path)) as mm:
            if len(mm) < self.entries * self.entry.size:
                # The file shrank under us (it is never rewritten in place
                # while sealed): read what is there.
                self.entries = len(mm) // self.entry.size
            yield mm

    def trim(self) -> None:
        """Shrink the file to its entries and remap it read-only."""
        self.close()
        if self.path.exists():
            os.truncate(self.path, self.entries * self.entry.size)
        self.writable = False
        self._open()

    def make_writable(self) -> None:
        if not self.writable:
            self.close()
            self.writable = True
            self._open()

    def flush(self) -> None:
        """fsync the file. Through the path, not the mapping: the flusher runs
        outside the log's lock and a roll may close or remap the mapping
        meanwhile; on Linux fsync also writes back pages dirtied through a
        shared mapping. A file deleted meanwhile needs nothing."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
            power_loss.synced(self.path)
        finally:
            os.close(fd)

    def close(self) -> None:
        # No msync here: closing (on roll, trim or shutdown) must not put a
        # synchronous disk write on the append path. The shared mapping's
        # pages stay in the page cache; flush() makes them durable when the
        # flush policy says so.
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._last = None
        # The file is about to be rewritten, renamed over or deleted: drop a
        # cached read-only mapping of it.
        self.pool.discard(str(self.path))

    def close_and_trim(self) -> None:
        writable = self.writable
        self.close()
        if writable and self.path.exists():
            os.truncate(self.path, self.entries * self.entry.size)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.truncate_entries(0)

    def truncate_entries(self, count: int) -> None:
        old = self.entries
        self.entries = min(old, count)
        if self._mm is not None and self.writable and old > self.entries:
            # Zero the dropped entries so a crash cannot resurrect them.
            _zero(self._mm, self.entries * self.entry.size, old * self.entry.size)
        self._reload_last()

    # -- entries ------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return (self.entries + 1) * self.entry.size > self.max_bytes

    def _append(self, *fields: int) -> None:
        if not self.writable or self._mm is None:
            raise RuntimeError(f"index {self.path} is not writable")
        if self.is_full:
            raise IndexFullError(str(self.path))
        self.entry.pack_into(self._mm, self.entries * self.entry.size, *fields)
        self.entries += 1
        self._last = fields

    def _entry(self, n: int) -> tuple[int, ...]:
        with self._view() as mm:
            return self.entry.unpack_from(mm, n * self.entry.size)

    def _all(self) -> list[tuple[int, ...]]:
        if not self.entries:
            return []
        with self._view() as mm:
            return list(self.entry.iter_unpack(mm[: self.entries * self.entry.size]))

    def _search(self, key: int, field: int) -> int:
        """Index of the last entry whose `field` is <= key, or -1."""
        if not self.entries:
            return -1
        with self._view() as mm:
            return self._bisect(mm, key, field)

    def _floor_entry(self, key: int, field: int) -> tuple[int, ...] | None:
        """The last entry whose `field` is <= key, or None. One borrow of a
        sealed index's mapping for the search and the entry both."""
        if not self.entries:
            return None
        with self._view() as mm:
            n = self._bisect(mm, key, field)
            return self.entry.unpack_from(mm, n * self.entry.size) if n >= 0 else None

    def _bisect(self, mm: mmap.mmap, key: int, field: int) -> int:
        found = -1
        size = self.entry.size
        unpack = self.entry.unpack_from
        lo, hi = 0, self.entries - 1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if unpack(mm, mid * size)[field] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry.size


class OffsetIndex(_MappedIndex):
    entry = _OFFSET_ENTRY

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._last is not None:
            last_rel, last_pos = self._last
            if relative <= last_rel or position <= last_pos:
                raise AssertionError(
                    f"offset index must increase: ({last_rel}, {last_pos}) then "
                    f"({relative}, {position}) in {self.path}"
                )
        self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before `offset`, else (base, 0)."""
        found = self._floor_entry(offset - self.base_offset, 0)
        if found is None:
            return self.base_offset, 0
        rel, pos = found
        return self.base_offset + rel, pos

    def last_entry(self) -> tuple[int, int]:
        if not self.entries:
            return self.base_offset, 0
        rel, pos = self._entry(self.entries - 1)
        return self.base_offset + rel, pos

    def tail_is_sane(self, log_size: int) -> bool:
        """Cheap check of the last two entries (a full check is O(entries)):
        catches a preallocated index full of zeros and one longer than its log."""
        if not self.entries:
            return True
        rel, pos = self._entry(self.entries - 1)
        if rel < 0 or pos >= log_size:
            return False
        if self.entries >= 2:
            prev_rel, prev_pos = self._entry(self.entries - 2)
            return rel > prev_rel and pos > prev_pos
        return True

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= offset."""
        self.truncate_entries(self._search(offset - self.base_offset - 1, 0) + 1)

    def entry_list(self) -> list[tuple[int, int]]:
        return [(self.base_offset + rel, pos) for rel, pos in self._all()]

    def is_sane(self, log_size: int) -> bool:
        """Entries strictly increasing and inside the log file."""
        prev_rel, prev_pos = -1, -1
        for rel, pos in self._all():
            if rel <= prev_rel or pos <= prev_pos or pos >= max(log_size, 1) or rel < 0:
                return False
            prev_rel, prev_pos = rel, pos
        return True


class TimeIndex(_MappedIndex):
    entry = _TIME_ENTRY

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp is newer than the last entry's."""
        relative = offset - self.base_offset
        if self._last is not None:
            last_ts, last_rel = self._last
            if timestamp <= last_ts:
                return
            if relative < last_rel:
                raise AssertionError(f"time index offsets must not decrease in {self.path}")
        self._append(timestamp, relative)

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is <= `timestamp`, else the base."""
        found = self._floor_entry(timestamp, 0)
        if found is None:
            return self.base_offset
        return self.base_offset + found[1]

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the newest entry."""
        if not self.entries:
            return None
        ts, rel = self._entry(self.entries - 1)
        return ts, self.base_offset + rel

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= offset."""
        keep = self.entries
        while keep and self._entry(keep - 1)[1] + self.base_offset >= offset:
            keep -= 1
        self.truncate_entries(keep)

    def entry_list(self) -> list[tuple[int, int]]:
        return [(ts, self.base_offset + rel) for ts, rel in self._all()]

    def is_sane(self) -> bool:
        prev_ts, prev_rel = -(1 << 63), -1
        for ts, rel in self._all():
            if ts <= prev_ts or rel < prev_rel or rel < 0:
                return False
            prev_ts, prev_rel = ts, rel
        return True


def _zero(mm: mmap.mmap, start: int, end: int) -> None:
    """Zero `mm[start:end]`, punching its whole pages out of the file.

    Reopened after an unclean shutdown, a preallocated index counts every
    slot of its `segment_index_bytes` as an entry, and recovery drops them
    all before it rebuilds. Writing zeros over them dirtied every page of
    the file: 20 MiB of page cache per partition with the default 10 MiB
    indexes, counted in the node's RSS (a node restarted after SIGKILL with
    25 partitions: 536 MiB of file-backed RSS against 60 MiB anonymous) and
    then written back to disk. A punched page (MADV_REMOVE) reads as zeros
    and holds neither page cache nor a disk block. Filesystems that cannot
    punch get the zeros written."""
    page = mmap.PAGESIZE
    head = min(end, -(-start // page) * page)  # start, rounded up to a page
    tail = max(head, end - end % page)  # end, rounded down to a page
    if tail > head and _punch(mm, head, tail - head):
        mm[start:head] = bytes(head - start)
        mm[tail:end] = bytes(end - tail)
    else:
        mm[start:end] = bytes(end - start)


def _punch(mm: mmap.mmap, start: int, length: int) -> bool:
    """Free whole pages of a shared file mapping (they read as zeros after);
    False where the platform or filesystem cannot."""
    advice = getattr(mmap, "MADV_REMOVE", None)
    if advice is None:
        return False
    try:
        mm.madvise(advice, start, length)
    except OSError:
        return False
    return True

"""One segment of a partition log: `<base>.log`, `<base>.index`, `<base>.timeindex`.

The base offset, zero-padded to 20 digits, names the three files. The `.log`
file is a plain concatenation of RecordBatch v2 batches with increasing
offsets, all >= the base offset. Index entries map a batch's last offset to
its byte position (Kafka's convention), one entry per `index_interval_bytes`
of log; the time index records the largest timestamp seen so far at those same
points, plus a final entry with the segment's largest timestamp when sealed.

Only the active (last) segment is written. It keeps a read-write descriptor
open; sealed segments borrow read-only descriptors from the FilePool.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from lograft import power_loss
from lograft.errors import CorruptRecordError, LograftError, StorageError
from lograft.protocol.batch import (
    BATCH_LENGTH_MIN,
    EXTENT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    PREFIX,
    validate_batch,
)
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.index import OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
NO_TIMESTAMP = -1

# How much of a segment one scan step reads; a few index intervals.
_SCAN_CHUNK_BYTES = 64 * 1024
# How much a lookup reads at a time while walking from an index entry to the
# batch it wants: twice the default index interval, so one read usually
# covers the walk and, for reads of a few batches, the data too.
_LOCATE_CHUNK_BYTES = 8 * 1024
# Most buffers one pwritev takes (Linux's IOV_MAX).
_IOV_MAX = 1024
# Above any offset: "no max_offset".
_OFFSET_MAX = 1 << 63
# Header fields walk() reports: baseOffset, batchLength,
# partitionLeaderEpoch, lastOffsetDelta, maxTimestamp (bytes 0..42).
_WALK_FIELDS = struct.Struct(">qii7xi8xq")
# Index entries hold offsets relative to the segment's base as int32.
_RELATIVE_OFFSET_MAX = 0x7FFFFFFF


Buffer = bytes | bytearray | memoryview


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class BatchPos(NamedTuple):
    """Where a batch sits in a segment, with the header fields reads need."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int
    leader_epoch: int = -1


class AppendedBatch(NamedTuple):
    """What a segment needs to index one batch it is given. (NamedTuples, not
    frozen dataclasses: these are built per batch on the append and read
    paths, where a dataclass's per-field setattr shows in the profile.)"""

    last_offset: int
    max_timestamp: int
    size: int


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        pool: FilePool,
        *,
        active: bool,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.pool = pool
        self.log_path = directory / file_name(base_offset, LOG_SUFFIX)
        self.active = active
        self.created_ms = created_ms
        self._fd: int | None = None
        # Guards _fd against a flush, which runs outside the log's lock, while
        # a roll (seal) or close replaces or closes it.
        self._fd_lock = threading.Lock()
        if active:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            self.size = os.fstat(self._fd).st_size
        else:
            self.size = self.log_path.stat().st_size
        index_path = directory / file_name(base_offset, INDEX_SUFFIX)
        time_index_path = directory / file_name(base_offset, TIMEINDEX_SUFFIX)
        # Checked before opening: an active segment's index files are created
        # on open, and a lost index must be rebuilt, not left empty.
        self.index_missing = not index_path.exists() or not time_index_path.exists()
        try:
            self.index = OffsetIndex(
                index_path,
                base_offset,
                config.segment_index_bytes,
                writable=active,
                pool=pool,
            )
            try:
                self.time_index = TimeIndex(
                    time_index_path,
                    base_offset,
                    config.segment_index_bytes,
                    writable=active,
                    pool=pool,
                )
            except BaseException:
                self.index.close()
                raise
        except BaseException:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            raise
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self._bytes_since_index = 0
        self.unflushed = False
        # Bytes appended since the last fsync of the `.log` file (a group
        # commit's `sync_data` or a full `flush`).
        self.unsynced = False
        # Bytes past `size` that a failed write left and could not cut.
        self.tail_dirty = False

    @classmethod
    def create_active(
        cls, directory: Path, base_offset: int, config: LogConfig, pool: FilePool, created_ms: int
    ) -> LogSegment:
        """A new, empty active segment. If its files cannot be created (disk
        full, out of inodes) none of them is left behind and StorageError is
        raised."""
        try:
            return cls(directory, base_offset, config, pool, active=True, created_ms=created_ms)
        except OSError as exc:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                (directory / file_name(base_offset, suffix)).unlink(missing_ok=True)
            raise _storage_error(exc, directory / file_name(base_offset, LOG_SUFFIX)) from exc

    # -- loading -----------------------------------------------------------------

    def load_tail_state(self) -> None:
        """Derive next offset, max timestamp and index spacing from disk.

        Reads only the part after the last index entry, so opening a sealed
        segment or a cleanly closed log does not read the whole file.
        """
        _last_off, pos = self.index.last_entry()
        last_time = self.time_index.last_entry()
        if last_time is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time
        else:
            self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        if self.index.entries:
            # The indexed batch itself ends at the indexed offset.
            self.next_offset = _last_off + 1
        for b in self.walk(pos):
            self.next_offset = b.last_offset + 1
            if b.max_timestamp > self.max_timestamp:
                self.max_timestamp = b.max_timestamp
                self.offset_of_max_timestamp = b.last_offset
            self._bytes_since_index += b.size

    def recover(self, upper_bound: int | None = None) -> int:
        """Re-read and validate every batch, rebuild the indexes, and cut the
        file at the first torn or corrupt batch. Returns the bytes dropped.

        baseOffset lies outside the CRC, so offsets are checked on their own:
        each batch must start after the previous one, stay within the 32-bit
        relative range of the segment's index, and end below `upper_bound`
        (the next segment's base offset)."""
        self.index.make_writable()
        self.time_index.make_writable()
        self.index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self._bytes_since_index = 0
        valid_end = 0
        previous_last = self.base_offset - 1
        with self._fd_for_read() as fd:
            pos = 0
            chunk = b""
            chunk_start = 0
            while pos < self.size:
                rel = pos - chunk_start
                if len(chunk) - rel < LOG_OVERHEAD:
                    chunk = os.pread(fd, max(_SCAN_CHUNK_BYTES, LOG_OVERHEAD), pos)
                    chunk_start, rel = pos, 0
                    if len(chunk) < LOG_OVERHEAD:
                        break
                length = int.from_bytes(chunk[rel + 8 : rel + 12], "big", signed=True)
                size = length + LOG_OVERHEAD
                if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > self.size:
                    break  # garbage length or torn tail
                if len(chunk) - rel < size:
                    chunk = os.pread(fd, max(size, _SCAN_CHUNK_BYTES), pos)
                    chunk_start, rel = pos, 0
                    if len(chunk) < size:
                        break  # torn tail
                try:
                    header = validate_batch(chunk, rel, available=size)
                except LograftError:
                    break
                if (
                    header.base_offset <= previous_last
                    or header.last_offset - self.base_offset > _RELATIVE_OFFSET_MAX
                    or (upper_bound is not None and header.last_offset >= upper_bound)
                ):
                    break
                self._index_batch(
                    pos, AppendedBatch(header.last_offset, header.max_timestamp, size)
                )
                previous_last = header.last_offset
                self.next_offset = header.last_offset + 1
                pos += size
                valid_end = pos
        dropped = self.size - valid_end
        if dropped:
            self._truncate_file(valid_end)
        if not self.active:
            self.index.trim()
            self.time_index.trim()
        return dropped

    # -- writing -------------------------------------------------------------------

    def append(self, parts: Sequence[Buffer], size: int, batches: Sequence[AppendedBatch]) -> None:
        """Write whole batches at the end of the segment and index them.

        `parts` hold the batches' `size` bytes back to back, in as many
        pieces as the caller has them: an append writes a patched 16-byte
        prefix and the rest of each batch as it came, without copying it.
        """
        if self._fd is None:
            raise RuntimeError(f"segment {self.log_path} is not active")
        self._cut_dirty_tail()
        start = self.size
        try:
            _pwrite_all(self._fd, parts, start, size)
        except OSError as exc:
            self._undo_partial_write(start)
            raise _storage_error(exc, self.log_path) from exc
        pos = start
        for b in batches:
            self._index_batch(pos, b)
            pos += b.size
        assert pos == start + size, "the batches must account for every byte written"
        self.size = pos
        self.next_offset = batches[-1].last_offset + 1
        self.unflushed = True
        self.unsynced = True

    def _index_batch(self, position: int, b: AppendedBatch) -> None:
        if b.max_timestamp > self.max_timestamp:
            self.max_timestamp = b.max_timestamp
            self.offset_of_max_timestamp = b.last_offset
        if self._bytes_since_index > self.config.index_interval_bytes and not (
            self.index.is_full or self.time_index.is_full
        ):
            # A full index skips the entry rather than fail: the batches are
            # already on disk, and a sparser index only makes lookups scan a
            # little further. should_roll starts a new segment before the next
            # append.
            self.index.append(b.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += b.size
        self.size = max(self.size, position + b.size)

    def _undo_partial_write(self, size: int) -> None:
        assert self._fd is not None
        power_loss.truncated(self.log_path, size)
        with suppress(OSError):
            os.ftruncate(self._fd, size)
            return
        # The torn bytes stay for now. Nothing reads past `size`; the next
        # append, seal or close cuts them first; and a close that cannot does
        # not mark the shutdown clean. Whole batches among them must not come
        # back after a crash either (their append failed): zero the first
        # length field, an overwrite of allocated space a full disk allows,
        # so recovery stops there.
        self.tail_dirty = True
        with suppress(OSError):
            _pwrite_all(self._fd, [bytes(LOG_OVERHEAD)], size, LOG_OVERHEAD)

    def _cut_dirty_tail(self) -> None:
        if not self.tail_dirty or self._fd is None:
            return
        power_loss.truncated(self.log_path, self.size)
        try:
            os.ftruncate(self._fd, self.size)
        except OSError as exc:
            raise _storage_error(exc, self.log_path) from exc
        self.tail_dirty = False

    def _truncate_file(self, size: int) -> None:
        power_loss.truncated(self.log_path, size)
        if self._fd is not None:
            os.ftruncate(self._fd, size)
            self.tail_dirty = False
        else:
            self.pool.discard(str(self.log_path))
            os.truncate(self.log_path, size)
        self.size = size

    def should_roll(self, incoming_bytes: int, now_ms: int) -> bool:
        if self.size == 0:
            return False
        if self.size + incoming_bytes > self.config.segment_bytes:
            return True
        if now_ms - self.created_ms > self.config.segment_ms:
            return True
        return self.index.is_full or self.time_index.is_full

    def fits_offsets(self, last_offset: int) -> bool:
        """Relative offsets in the index are int32."""
        return last_offset - self.base_offset <= _RELATIVE_OFFSET_MAX

    def seal(self) -> None:
        """Stop being the active segment: record the max timestamp, trim indexes.

        Does nothing to a sealed segment (a roll that failed after sealing is
        retried by the next append)."""
        if not self.active:
            return
        self._cut_dirty_tail()
        # A full time index cannot take the final entry; load_tail_state
        # recomputes the max from the batches after the last offset entry.
        if self.max_timestamp != NO_TIMESTAMP and not self.time_index.is_full:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.trim()
        self.time_index.trim()
        self._close_fd()
        self.active = False

    def make_active(self) -> None:
        """Become the active segment again (after truncation removed later ones)."""
        if self.active:
            return
        self.pool.discard(str(self.log_path))
        fd = os.open(self.log_path, os.O_RDWR, 0o644)
        with self._fd_lock:
            self._fd = fd
        self.index.make_writable()
        self.time_index.make_writable()
        self.active = True

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing `offset` and everything after it.

        Returns the number of bytes removed. The segment's next offset becomes
        the base offset of the removed batch (which may be below `offset`).
        """
        found = self.find_batch(offset)
        if found is None:
            return 0
        cut = found.position
        removed = self.size - cut
        self.index.make_writable()
        self.time_index.make_writable()
        keep = 0
        for i, (_off, pos) in enumerate(self.index.entry_list()):
            if pos >= cut:
                break
            keep = i + 1
        self.index.truncate_entries(keep)
        self.time_index.truncate_to_offset(found.base_offset)
        self._truncate_file(cut)
        if not self.active:
            self.index.trim()
            self.time_index.trim()
        self.load_tail_state()
        return removed

    def flush(self) -> None:
        try:
            self._sync_log(os.fsync)
            self.index.flush()
            self.time_index.flush()
        except OSError as exc:
            raise _storage_error(exc, self.log_path) from exc
        self.unflushed = False

    def sync_data(self) -> None:
        """fdatasync the `.log` file alone (a group commit): its bytes and
        size, not the indexes, which recovery rebuilds for every segment
        past the recovery point after an unclean shutdown."""
        try:
            self._sync_log(os.fdatasync)
        except OSError as exc:
            raise _storage_error(exc, self.log_path) from exc

    def _sync_log(self, sync: Callable[[int], None]) -> None:
        # Bytes written before the sync began are those it makes durable.
        size = self.size
        # A duplicate: the flusher runs outside the log's lock, and a roll
        # may close the segment's own descriptor meanwhile.
        with self._fd_lock:
            own = os.dup(self._fd) if self._fd is not None else None
        if own is not None:
            try:
                sync(own)
            finally:
                os.close(own)
        else:
            with self.pool.borrow(str(self.log_path)) as fd:
                sync(fd)
        power_loss.synced(self.log_path, size)

    def close(self) -> None:
        """Release the files. `tail_dirty` stays set if torn bytes could not
        be cut: the caller must not call the shutdown clean."""
        if self.tail_dirty:
            with suppress(StorageError):
                self._cut_dirty_tail()
        if self.active and self.max_timestamp != NO_TIMESTAMP and not self.time_index.is_full:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.close_and_trim()
        self.time_index.close_and_trim()
        self._close_fd()
        self.pool.discard(str(self.log_path))

    def _close_fd(self) -> None:
        with self._fd_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete(self) -> None:
        self.close()
        self.index.delete()
        self.time_index.delete()
        self.log_path.unlink(missing_ok=True)
        power_loss.forget(self.log_path)

    # -- reading -------------------------------------------------------------------

    @contextmanager
    def _fd_for_read(self) -> Iterator[int]:
        if self._fd is not None:
            yield self._fd
        else:
            with self.pool.borrow(str(self.log_path)) as fd:
                yield fd

    def walk(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchPos]:
        """Headers of the whole batches from a position, reading in chunks."""
        end = self.size if end_position is None else min(end_position, self.size)
        pos = start_position
        with self._fd_for_read() as fd:
            while end - pos >= HEADER_SIZE:
                chunk = os.pread(fd, min(_SCAN_CHUNK_BYTES, end - pos), pos)
                rel = 0
                progressed = False
                while len(chunk) - rel >= HEADER_SIZE:
                    base, length, epoch, last_delta, max_ts = _WALK_FIELDS.unpack_from(chunk, rel)
                    size = length + LOG_OVERHEAD
                    if length < BATCH_LENGTH_MIN or pos + size > end:
                        return
                    yield BatchPos(pos, base, base + last_delta, size, max_ts, epoch)
                    pos += size
                    rel += size
                    progressed = True
                if not progressed and len(chunk) < HEADER_SIZE:
                    return

    def batch_at(self, position: int) -> BatchPos | None:
        for b in self.walk(position):
            return b
        return None

    def find_batch(self, offset: int) -> BatchPos | None:
        """The first batch whose last offset is >= offset (the one holding it,
        or the next one after a compaction gap)."""
        with self._fd_for_read() as fd:
            found = self._locate(fd, offset)
        return None if found is None else self.batch_at(found.position)

    def _locate(self, fd: int, offset: int) -> _Located | None:
        """The first batch whose last offset is >= offset: from the index entry
        at or below it, walk the headers forward (about one index interval).
        Reads in chunks of _LOCATE_CHUNK_BYTES and hands back the last chunk,
        which often holds the data a small read wants as well."""
        pos = self.index.lookup(offset)[1]
        end = self.size
        chunk, chunk_start = b"", pos
        while end - pos >= HEADER_SIZE:
            rel = pos - chunk_start
            if len(chunk) - rel < HEADER_SIZE:
                chunk = os.pread(fd, min(_LOCATE_CHUNK_BYTES, end - pos), pos)
                chunk_start, rel = pos, 0
                if len(chunk) < HEADER_SIZE:
                    return None
            base, length, last_delta = EXTENT.unpack_from(chunk, rel)
            size = length + LOG_OVERHEAD
            if length < BATCH_LENGTH_MIN or size > end - pos:
                return None
            if base + last_delta >= offset:
                return _Located(pos, base, size, chunk, chunk_start)
            pos += size
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool
    ) -> tuple[bytes, int] | None:
        """Whole batches from the one holding `offset`, at most max_bytes of them
        unless min_one and the first alone is larger; none at or past max_offset.

        Returns (data, position of the first batch), where data may be empty
        because a limit excludes the first batch, or None when no batch in
        this segment reaches `offset` (only then may the caller look in the
        next segment).
        """
        span = self.read_span(offset, max_bytes, max_offset, min_one)
        return None if span is None else (span.cut(), span.position)

    def read_span(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool
    ) -> ReadSpan | None:
        """`read`'s bytes before they are cut back to whole batches
        (`ReadSpan.cut`), which needs no lock: a log cuts after releasing its
        own, since walking 50 MiB of small batches takes ~300 ms.

        One descriptor borrow and (beyond the lookup) one pread: the span
        max_bytes allows is read whole, then cut back to its last whole
        batch by a walk over the length fields alone.
        """
        with self._fd_for_read() as fd:
            first = self._locate(fd, offset)
            if first is None:
                return None
            if max_offset is not None and first.base_offset >= max_offset:
                return ReadSpan(b"", 0, 0, max_offset, first.position)
            if first.size > max_bytes:
                if not min_one:
                    return ReadSpan(b"", 0, 0, max_offset, first.position)
                span = first.size
            else:
                span = min(max_bytes, self.size - first.position)
            buf, start = first.chunk, first.position - first.chunk_start
            if len(buf) - start < span:
                buf, start = os.pread(fd, span, first.position), 0
        return ReadSpan(buf, start, min(start + span, len(buf)), max_offset, first.position)

    def read_range(self, start: int, end: int) -> bytes:
        with self._fd_for_read() as fd:
            return os.pread(fd, end - start, start)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> BatchPos | None:
        """The first batch at or after start_offset whose max timestamp >= timestamp."""
        indexed = self.time_index.lookup(timestamp)
        _off, pos = self.index.lookup(max(indexed, start_offset))
        for b in self.walk(pos):
            if b.last_offset >= start_offset and b.max_timestamp >= timestamp:
                return b
        return None

    @property
    def largest_timestamp(self) -> int:
        """Newest record timestamp in the segment (-1 if empty)."""
        return self.max_timestamp

    def last_modified_ms(self) -> int:
        """The `.log` file's last-modified time in ms (-1 if it is gone)."""
        try:
            return self.log_path.stat().st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return -1

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"


class _Located(NamedTuple):
    """A batch _locate found, and the chunk it read it from."""

    position: int
    base_offset: int
    size: int
    chunk: bytes
    chunk_start: int


@dataclass(frozen=True, slots=True)
class ReadSpan:
    """Bytes a read took from a segment, from the first batch's start, not yet
    cut back to whole batches below `max_offset`."""

    buf: bytes
    start: int
    stop: int
    max_offset: int | None
    position: int  # of the first batch in the segment

    def cut(self) -> bytes:
        end = _whole_batches_end(self.buf, self.start, self.stop, self.max_offset)
        if self.start == 0 and end == len(self.buf):
            return self.buf
        return self.buf[self.start : end]


def _whole_batches_end(buf: bytes, start: int, stop: int, max_offset: int | None) -> int:
    """Where the whole batches in buf[start:stop] end, stopping before the
    first batch at or past max_offset. Reads two fields per batch and builds
    nothing: a 64 KiB read of small batches walks hundreds of them."""
    limit = _OFFSET_MAX if max_offset is None else max_offset
    unpack = PREFIX.unpack_from
    pos = start
    while stop - pos >= HEADER_SIZE:
        base, length = unpack(buf, pos)
        if base >= limit or length < BATCH_LENGTH_MIN or length + LOG_OVERHEAD > stop - pos:
            break
        pos += length + LOG_OVERHEAD
    return pos


def _pwrite_all(fd: int, parts: Sequence[Buffer], position: int, size: int) -> None:
    """Write the parts, `size` bytes in all, back to back from `position`,
    going on after short writes (and past `_IOV_MAX` parts per call).

    Linear in the parts: a request of many small batches is two parts per
    batch, and re-slicing the whole rest of the list after each call (as this
    once did) made 50,000 batches take 17 s of the event loop."""
    end = position + size
    first = 0  # parts[first] is the first part not wholly written
    skip = 0  # bytes of parts[first] already written
    while position < end:
        iov: list[Buffer] = list(parts[first : first + _IOV_MAX])
        if skip:
            iov[0] = memoryview(iov[0])[skip:]
        written = os.pwritev(fd, iov, position)
        if written <= 0:
            raise OSError(errno.EIO, "pwritev wrote nothing")
        position += written
        # Step past what was written: whole parts, then into the next one.
        written += skip
        while first < len(parts) and written >= (length := memoryview(parts[first]).nbytes):
            written -= length
            first += 1
        skip = written


def _storage_error(exc: OSError, path: Path) -> StorageError:
    if exc.errno == errno.ENOSPC:
        return StorageError(
            f"disk full while writing {path}; free space and retry", path=str(path), errno="ENOSPC"
        )
    return StorageError(f"I/O error on {path}: {exc.strerror or exc}", path=str(path))


__all__ = [
    "AppendedBatch",
    "BatchPos",
    "CorruptRecordError",
    "LogSegment",
    "file_name",
    "parse_base_offset",
]

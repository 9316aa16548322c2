"""A partition replica's log: an ordered set of segments in one directory.

Invariants kept here (asserted where cheap):

- offsets increase strictly through the segments; the log end offset (LEO)
  is the next offset to assign and equals the active segment's next offset;
- log_start_offset <= LEO and recovery_point <= LEO;
- every byte below the durable offset has been fsynced, and the durable
  offset is at least the recovery point (a group commit moves only the
  former: the checkpoint stays for the flush at roll);
- every byte on disk below the recovery point has been fsynced; after an
  unclean shutdown everything from the segment holding the recovery point on
  is re-validated and cut at the first torn or corrupt batch;
- the leader epoch cache has no entry at or past the LEO;
- a failed append leaves the log exactly as it was (or, if the disk failed,
  consistent up to the last complete batch).

Files in the directory: the segments, `leader-epoch-checkpoint`,
`recovery-point-checkpoint`, `log-start-offset-checkpoint`,
`cleaner-offset-checkpoint` (compacted logs: the first offset the cleaner has
not deduplicated; truncation below it pulls it down, as Kafka's
maybeTruncateCheckpoint does), and `.clean-shutdown` while the log is closed
cleanly.

Thread-safety: one RLock guards all state; a second lock serialises flushes
with segment deletion so fsync runs outside the main lock, off the append
path.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from sortedcontainers import SortedDict

from lograft import power_loss
from lograft.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogClosedError,
    LograftError,
    OffsetOutOfRangeError,
    StorageError,
)
from lograft.protocol.batch import (
    HEADER,
    LOG_OVERHEAD,
    PATCHED_PREFIX,
    PATCHED_PREFIX_SIZE,
    BatchHeader,
    check_batch_size,
    check_batch_sizes,
    iter_batch_records,
    patch_base_offset_and_epoch,
    set_log_append_time,
    validate_batches,
)
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.record_scan import RecordsSummary
from lograft.storage import checkpoint
from lograft.storage.config import FlushPolicy, LogConfig, TimestampType
from lograft.storage.epoch_cache import FILE_NAME as EPOCH_CHECKPOINT_FILE
from lograft.storage.epoch_cache import LeaderEpochCache
from lograft.storage.handles import FilePool, default_pool
from lograft.storage.produce_rules import RecordRules, check_records_summary
from lograft.storage.retention import SegmentInfo, deletable_prefix
from lograft.storage.segment import (
    LOG_SUFFIX,
    AppendedBatch,
    Buffer,
    LogSegment,
    ReadSpan,
    file_name,
    parse_base_offset,
)
from lograft.storage.swap import complete_interrupted_swaps

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class CheckedAppend:
    """Bytes `Log.check_append` passed, with the headers it read. An append of
    these very bytes (the same object: `bytes` cannot change) need not walk
    their structure and CRC again: a produce was checked that way three times
    on its way to the log (~12 us for a batch of 500 records of 100 B, ~46 us
    of 1 KiB, per pass)."""

    data: bytes
    headers: tuple[tuple[int, BatchHeader], ...]

    def headers_of(self, data: bytes | bytearray) -> tuple[tuple[int, BatchHeader], ...] | None:
        """The headers when `data` is the checked object itself, else None."""
        return self.headers if data is self.data else None


class AppendInfo(NamedTuple):
    """What an append did. (A NamedTuple: one is built per append, and a
    frozen dataclass's per-field setattr is measurable there.)"""

    first_offset: int
    last_offset: int
    max_timestamp: int
    batches: int
    records: int
    size_bytes: int
    log_append_time_ms: int = -1


@dataclass(slots=True)
class RecoveryReport:
    clean_shutdown: bool
    segments_loaded: int = 0
    segments_recovered: int = 0
    segments_deleted: int = 0
    bytes_dropped: int = 0
    indexes_rebuilt: int = 0
    swap_actions: list[str] = field(default_factory=list)
    # Checkpoint files that did not parse, and what was done instead.
    checkpoint_errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.segments_loaded:
            return "new log"
        kind = "clean" if self.clean_shutdown else "unclean"
        return (
            f"{kind} open: {self.segments_loaded} segments, "
            f"{self.segments_recovered} re-validated, "
            f"{self.bytes_dropped} bytes dropped, {self.segments_deleted} segments deleted, "
            f"{self.indexes_rebuilt} indexes rebuilt, "
            f"{len(self.checkpoint_errors)} corrupt checkpoints"
        )


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    offset: int
    timestamp: int


class Log:
    def __init__(
        self,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        pool: FilePool | None = None,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.directory = Path(directory)
        self.config = config or LogConfig()
        self.pool = pool or default_pool()
        self.clock = clock
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._segments: SortedDict[int, LogSegment] = SortedDict()
        # The last segment, kept apart from _segments (set wherever its last
        # entry changes): appends and log_end_offset read it on every call.
        self._active: LogSegment
        self._closed = False
        # Bumped by every truncation: the cleaner compares it before swapping,
        # since a truncated-then-rolled segment is the same object with new bytes.
        self._truncations = 0
        self.log_start_offset = 0
        self.recovery_point = 0
        # Offsets below this are on disk (fsynced): the recovery point, or
        # past it after a group commit (`commit`).
        self.durable_offset = 0
        # A file was created in the directory since its last fsync (a roll):
        # a commit must fsync the directory too, or the new segment's name
        # may not survive a power cut.
        self._dir_unsynced = False
        self._last_flush_ms = clock()
        # Called (under the log's lock, on the appending thread) after every
        # write, so the maintenance thread can check only logs with new data
        # instead of every log five times a second. Must be cheap and not block.
        self.on_write: Callable[[Log], None] | None = None
        # Called with the seconds each flush's or commit's fsyncs took (the
        # broker's log flush latency metric, Kafka's LogFlushRateAndTimeMs),
        # on the flushing thread. Must be cheap and thread-safe.
        self.on_flush: Callable[[float], None] | None = None
        if not self.directory.exists():
            self.directory.mkdir(parents=True)
            # The new directory's name must survive a power cut with its files.
            checkpoint.fsync_dir(self.directory.parent)
        self.recovery = self._load()
        self.epochs = self._load_epoch_cache()
        self.epochs.truncate_from_end(self.log_end_offset)
        if self.log_start_offset > 0:
            self.epochs.truncate_from_start(self.log_start_offset)
        log.debug("%s: %s", self.directory, self.recovery.summary())

    # -- opening -------------------------------------------------------------------

    def _load(self) -> RecoveryReport:
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        report = RecoveryReport(clean_shutdown=marker.exists())
        report.swap_actions = complete_interrupted_swaps(self.directory)
        bases = sorted(
            b
            for name in os.listdir(self.directory)
            if name.endswith(LOG_SUFFIX) and (b := parse_base_offset(name)) is not None
        )
        now = self.clock()
        # A corrupt checkpoint does not keep the log closed (Kafka's LogManager
        # does the same): an unknown recovery point means "re-validate
        # everything", an unknown log start falls back to the first segment.
        checkpointed_start = self._read_offset_checkpoint(LOG_START_FILE, report)
        rp = self._read_offset_checkpoint(RECOVERY_POINT_FILE, report)
        self.recovery_point = rp if rp is not None else 0
        for i, base in enumerate(bases):
            seg = LogSegment(
                self.directory,
                base,
                self.config,
                self.pool,
                active=(i == len(bases) - 1),
                created_ms=now,
            )
            self._segments[base] = seg
        report.segments_loaded = len(bases)
        self._recover_segments(report)
        if self._segments:
            # The active segment's age counts from its first batch (Kafka's
            # rollingBasedTimestamp), not from this open: otherwise a log that
            # restarts more often than segment_ms never rolls by time.
            active = self._segments.peekitem(-1)[1]
            first = active.batch_at(0)
            if first is not None and first.max_timestamp >= 0:
                active.created_ms = min(first.max_timestamp, now)
        if not self._segments:
            start = checkpointed_start or 0
            self._segments[start] = LogSegment(
                self.directory, start, self.config, self.pool, active=True, created_ms=now
            )
        self._active = self._segments.peekitem(-1)[1]
        first_base = self._segments.peekitem(0)[0]
        self.log_start_offset = max(first_base, checkpointed_start or 0)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        # After an unclean shutdown the recovery point stays where the
        # checkpoint put it (as Kafka's LogLoader does): recovery read the
        # page cache, not the disk, so the re-read segments are marked
        # unflushed and the point moves only when a flush has fsynced them.
        self.recovery_point = min(max(self.recovery_point, 0), self.log_end_offset)
        self.durable_offset = self.recovery_point
        marker.unlink(missing_ok=True)
        checkpoint.fsync_dir(self.directory)
        return report

    def _read_offset_checkpoint(self, name: str, report: RecoveryReport) -> int | None:
        path = self.directory / name
        try:
            value = checkpoint.read_offset(path)
            if value is not None and value < 0:
                raise checkpoint.CorruptCheckpointError(f"checkpoint {path} holds {value} < 0")
        except checkpoint.CorruptCheckpointError as exc:
            report.checkpoint_errors.append(f"{name}: {exc}; ignored")
            log.warning("%s: ignoring corrupt %s: %s", self.directory, name, exc)
            return None
        return value

    def _load_epoch_cache(self) -> LeaderEpochCache:
        try:
            return LeaderEpochCache(self.directory)
        except checkpoint.CorruptCheckpointError as exc:
            # Every batch carries its partitionLeaderEpoch: the cache is
            # rebuilt from the batch headers (a walk of the whole log, paid
            # only in this case).
            self.recovery.checkpoint_errors.append(
                f"{EPOCH_CHECKPOINT_FILE}: {exc}; rebuilt from the batches"
            )
            log.warning("%s: rebuilding corrupt leader epoch cache: %s", self.directory, exc)
        (self.directory / EPOCH_CHECKPOINT_FILE).unlink(missing_ok=True)
        cache = LeaderEpochCache(self.directory)
        entries: list[tuple[int, int]] = []
        for seg in self._segments.values():
            for b in seg.walk():
                if b.leader_epoch >= 0 and (not entries or b.leader_epoch > entries[-1][0]):
                    entries.append((b.leader_epoch, b.base_offset))
        cache.replace(entries)
        return cache

    def _recover_segments(self, report: RecoveryReport) -> None:
        segments = list(self._segments.values())
        damaged_at: int | None = None
        for i, seg in enumerate(segments):
            needs_index = seg.index_missing or not _index_looks_sane(seg)
            unflushed = seg is segments[-1] or segments[i + 1].base_offset > self.recovery_point
            if needs_index or (not report.clean_shutdown and unflushed):
                # Batches must end below the next segment's base offset.
                upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
                dropped = seg.recover(upper)
                seg.unflushed = True
                seg.unsynced = True
                report.segments_recovered += 1
                report.indexes_rebuilt += int(needs_index)
                if dropped:
                    report.bytes_dropped += dropped
                    log.warning(
                        "%s: dropped %d bytes of torn or corrupt data at the end of %s",
                        self.directory,
                        dropped,
                        seg.log_path.name,
                    )
                    damaged_at = i
                    break
            else:
                seg.load_tail_state()
        if damaged_at is None:
            return
        # Offsets must stay dense: nothing after damaged data can be kept.
        for seg in segments[damaged_at + 1 :]:
            report.bytes_dropped += seg.size
            report.segments_deleted += 1
            del self._segments[seg.base_offset]
            seg.delete()
        if report.segments_deleted:
            log.warning(
                "%s: deleted %d segments after the damage in %s to keep offsets dense",
                self.directory,
                report.segments_deleted,
                segments[damaged_at].log_path.name,
            )
        last = self._segments.peekitem(-1)[1]
        last.make_active()

    # -- properties ----------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self._active

    @property
    def log_end_offset(self) -> int:
        return self._active.next_offset

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments.values())

    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments.values())

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # -- appending -----------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray,
        *,
        leader_epoch: int,
        validate_records: bool = True,
        rules: RecordRules | None = None,
        checked: CheckedAppend | None = None,
    ) -> AppendInfo:
        """Append producer batches as leader: assign offsets from the LEO and
        stamp `leader_epoch`. All batches are validated before anything is
        written; one bad batch rejects the whole call. `rules` adds the
        client rules on records (timestamps, keys: produce_rules.py) to the
        walk of every record, which they imply. `checked`: what
        `check_append` returned for `data` (this object): its batches were
        validated then, so only their sizes are held again to
        `max_message_bytes` as it is now."""
        # The bytes validated must be the bytes written. A bytearray could
        # change in between, so it is copied once; bytes are immutable and
        # are written as they are, behind each batch's patched first 16 bytes.
        data = data if isinstance(data, bytes) else bytes(data)
        known = None if checked is None else checked.headers_of(data)
        if known is not None:
            headers = list(known)
            check_batch_sizes(headers, self.config.max_message_bytes)
        else:
            headers = self._validate_all(
                data, contiguous=True, deep=validate_records or rules is not None, rules=rules
            )
        with self._lock:
            self._check_open()
            now = self.clock()
            first = self._active.next_offset
            append_time = -1
            if self.config.message_timestamp_type is TimestampType.LOG_APPEND_TIME:
                append_time = now
            parts, batches, max_timestamp, records = _assign_offsets(
                data, headers, first, leader_epoch, append_time
            )
            self._write_with_epochs(parts, len(data), batches, first, now, [(leader_epoch, first)])
            return AppendInfo(
                first_offset=first,
                last_offset=batches[-1].last_offset,
                max_timestamp=max_timestamp,
                batches=len(batches),
                records=records,
                size_bytes=len(data),
                log_append_time_ms=append_time,
            )

    def check_append(
        self, data: bytes, *, rules: RecordRules | None, budget: DecompressionBudget
    ) -> CheckedAppend:
        """Every check `append(data, rules=rules)` makes, writing nothing, with
        compressed batches inflating within `budget`. Reads only the config:
        safe in a worker thread, so that the walk of every (decompressed)
        record need not hold the event loop; `append(validate_records=False)`
        then checks only structure and CRC again, or only the batches' sizes
        when given what this returns (`checked`)."""
        headers = self._validate_all(data, contiguous=True, deep=True, rules=rules, budget=budget)
        return CheckedAppend(data, tuple(headers))

    def check_built(
        self,
        data: bytes,
        summary: RecordsSummary,
        *,
        rules: RecordRules | None,
        budget: DecompressionBudget,
    ) -> CheckedAppend:
        """`check_append` for one batch this process encoded itself from
        checked fields (`plain_batch.build_plain_batch`, the JSON produce),
        with what its encoder saw of its records (`summary`, what the record
        scan reports): its size and the client rules on its records are
        judged as `check_append` judges them, but its structure, CRC and
        records are not walked again (~25 us of a JSON produce of 500
        records of 100 B). Bytes that are not exactly one batch get the
        full check."""
        header = BatchHeader(*HEADER.unpack_from(data, 0))
        if header.size != len(data):
            return self.check_append(data, rules=rules, budget=budget)
        check_batch_size(header.size, self.config.max_message_bytes)
        if rules is not None:
            check_records_summary(header, summary, rules, 0)
        return CheckedAppend(data, ((0, header),))

    def append_as_follower(self, data: bytes | bytearray) -> AppendInfo:
        """Append batches copied from the leader, keeping their offsets and
        epochs. The first batch must start at or after the LEO (compaction on
        the leader may leave gaps) and offsets must increase."""
        buf = bytes(data)
        headers = self._validate_all(buf, contiguous=False, deep=False)
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            expected = leo
            for _pos, h in headers:
                if h.base_offset < expected:
                    raise InvalidRecordError(
                        f"replicated batch at offset {h.base_offset} is below the expected "
                        f"offset {expected}",
                        base_offset=h.base_offset,
                        log_end_offset=leo,
                    )
                expected = h.last_offset + 1
            batches = [AppendedBatch(h.last_offset, h.max_timestamp, h.size) for _p, h in headers]
            first = headers[0][1].base_offset
            if first > leo and self.active_segment.size == 0 and self.segment_count == 1:
                # An empty follower log joining a leader whose log starts later.
                self._truncate_fully_locked(first)
            self._write_with_epochs(
                [buf],
                len(buf),
                batches,
                first,
                self.clock(),
                [(h.partition_leader_epoch, h.base_offset) for _pos, h in headers],
            )
            return AppendInfo(
                first_offset=first,
                last_offset=headers[-1][1].last_offset,
                max_timestamp=max(b.max_timestamp for b in batches),
                batches=len(batches),
                records=sum(h.records_count for _p, h in headers),
                size_bytes=len(buf),
            )

    def _validate_all(
        self,
        buf: bytes | bytearray,
        *,
        contiguous: bool,
        deep: bool,
        rules: RecordRules | None = None,
        budget: DecompressionBudget | None = None,
    ) -> list[tuple[int, BatchHeader]]:
        return validate_batches(
            buf,
            max_batch_bytes=self.config.max_message_bytes,
            contiguous=contiguous,
            deep=deep,
            budget=budget,
            on_records=None
            if rules is None
            else lambda h, summary, index: check_records_summary(h, summary, rules, index),
        )

    def _write_with_epochs(
        self,
        parts: list[Buffer],
        size: int,
        batches: list[AppendedBatch],
        first: int,
        now: int,
        epochs: list[tuple[int, int]],
    ) -> None:
        """Kafka's order: the epoch cache learns of the batches' epochs before
        they are written, so a checkpoint that cannot be written fails the
        append with nothing on disk changed, and a write that fails takes the
        new entries back (they all start at or after `first`, the old LEO)."""
        try:
            for epoch, start in epochs:
                self.epochs.assign(epoch, start)
        except OSError as exc:
            with suppress(OSError):
                self.epochs.truncate_from_end(first)
            raise StorageError(
                f"cannot write the leader epoch checkpoint of {self.directory}: {exc}",
                path=str(self.directory),
                errno=errno.errorcode.get(exc.errno or 0, str(exc.errno)),
            ) from exc
        try:
            self._write(parts, size, batches, first, now)
        except BaseException:
            with suppress(OSError):
                self.epochs.truncate_from_end(first)
            raise

    def _write(
        self, parts: list[Buffer], size: int, batches: list[AppendedBatch], first: int, now: int
    ) -> None:
        seg = self._active
        last = batches[-1].last_offset
        if not seg.active or seg.should_roll(size, now) or not seg.fits_offsets(last):
            # (not active: an earlier roll sealed it, then failed to create
            # the next segment.)
            seg = self._roll_locked(first, now)
        elif first > seg.next_offset and seg.size == 0:
            # An empty active segment whose base is below a gap: rebase it.
            seg = self._roll_locked(first, now)
        seg.append(parts, size, batches)
        if self.on_write is not None:
            self.on_write(self)
        if self.config.flush_policy is FlushPolicy.EVERY_BATCH:
            try:
                seg.flush()
            except StorageError:
                # Not durable, so not acknowledged: take the batches back, so
                # that the producer's retry cannot duplicate them.
                with suppress(OSError, LograftError):
                    seg.truncate_to(first)
                raise
            seg.unsynced = False
            self.recovery_point = self.durable_offset = self.log_end_offset

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs to the open log (Kafka's updateConfig).

        Retention, rolling, flushing, compaction and size limits take effect
        from the next operation; existing segments and indexes stay as they are.
        """
        with self._lock:
            self.config = config
            for seg in self._segments.values():
                seg.config = config

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (tests and admin use)."""
        with self._lock:
            self._check_open()
            return self._roll_locked(self.log_end_offset, self.clock())

    def _roll_locked(self, base: int, now: int) -> LogSegment:
        """The new segment is created before the old one is given up, so a
        failure to create it (StorageError) leaves a usable log: the old
        segment, active or sealed, stays last and the next append retries."""
        old = self.active_segment
        if old.size == 0 and old.active:
            # Never leave an empty sealed segment behind.
            if base == old.base_offset:
                old.created_ms = now
                return old
            seg = LogSegment.create_active(self.directory, base, self.config, self.pool, now)
            del self._segments[old.base_offset]
            old.delete()
        else:
            assert base >= old.next_offset, "a new segment must start at or after the LEO"
            old.seal()
            seg = LogSegment.create_active(self.directory, base, self.config, self.pool, now)
        self._dir_unsynced = True
        self._segments[base] = seg
        self._active = seg
        return seg

    # -- reading -------------------------------------------------------------------

    def readable_bytes(self, offset: int, limit: int) -> int:
        """At most how many bytes a read from `offset` could return, capped at
        `limit` (a first batch larger than `limit` aside): the segments' sizes
        from the offset index entry at or below `offset` on. No file I/O, a
        few microseconds: a read costs in proportion to its bytes, and callers
        decide by this bound where to run one (the event loop or a thread)."""
        if offset >= self.log_end_offset or limit <= 0:
            return 0  # the common case of a reader at the end: no lock
        with self._lock:
            if self._closed:
                return 0
            total = 0
            first = max(self._segments.bisect_right(offset) - 1, 0)
            for i in range(first, len(self._segments)):
                seg: LogSegment = self._segments.peekitem(i)[1]
                start = seg.index.lookup(offset)[1] if i == first else 0
                total += max(seg.size - start, 0)
                if total >= limit:
                    return limit
            return total

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one: bool = True,
    ) -> bytes:
        """Whole batches starting with the one that holds `offset`.

        At most `max_bytes`, except that with `min_one` the first batch is
        returned whole even if larger (so a consumer can always progress).
        Batches starting at or past `max_offset` (e.g. the high watermark)
        are not returned. Raises OffsetOutOfRangeError outside [start, LEO].
        """
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside the log's range [{self.log_start_offset}, {leo}]",
                    offset=offset,
                    log_start_offset=self.log_start_offset,
                    log_end_offset=leo,
                )
            if offset == leo:
                return b""
            i = max(self._segments.bisect_right(offset) - 1, 0)
            span: ReadSpan | None = None
            for j in range(i, len(self._segments)):
                seg: LogSegment = self._segments.peekitem(j)[1]
                span = seg.read_span(offset, max_bytes, max_offset, min_one)
                if span is not None:
                    break
                if max_offset is not None and seg.next_offset >= max_offset:
                    break
        # Cut back to whole batches without the lock: the bytes are this
        # read's own, and a walk of 50 MiB of small batches would keep an
        # append to this log (on the event loop) waiting ~300 ms.
        return b"" if span is None else span.cut()

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record with timestamp >= `timestamp`, or None if none is."""
        with self._lock:
            self._check_open()
            for seg in self._segments.values():
                if seg.largest_timestamp < timestamp:
                    continue
                start = self.log_start_offset
                # A batch straddling the log start may reach the timestamp
                # only below it: then the search goes on after that batch.
                while (found := seg.find_offset_by_timestamp(timestamp, start)) is not None:
                    data = seg.read_range(found.position, found.position + found.size)
                    h = BatchHeader(*HEADER.unpack_from(data, 0))
                    for rec in iter_batch_records(data, 0, h):
                        if rec.offset >= self.log_start_offset and rec.timestamp >= timestamp:
                            return TimestampOffset(rec.offset, rec.timestamp)
                    start = found.last_offset + 1
            return None

    # -- truncation ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove everything at or after `offset` (follower truncation).

        A batch that straddles `offset` is removed whole, so the new LEO may
        be below `offset` (and if that takes it below the log start offset,
        the log restarts empty at the new LEO). Returns the bytes removed.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                # No records to remove, but an epoch may start at the log end:
                # this replica led a term in which it appended nothing. The new
                # leader never had that epoch; kept, it makes every fetch
                # diverge again at the same place (Kafka truncates it too).
                self.epochs.truncate_from_end(self.log_end_offset)
                return 0
            if offset <= self.log_start_offset:
                removed = self.size_bytes
                self._truncate_fully_locked(offset)
                return removed
            removed = 0
            while self._segments.peekitem(-1)[0] >= offset:
                _base, seg = self._segments.popitem(-1)
                removed += seg.size
                seg.delete()
            seg = self._active = self._segments.peekitem(-1)[1]
            seg.make_active()
            removed += seg.truncate_to(offset)
            leo = self.log_end_offset
            if leo < self.log_start_offset:
                # The batch holding the log start straddled `offset` and went
                # whole: nothing readable is left. Start empty at that batch's
                # base, where the leader's copy of it will be appended again.
                removed += self.size_bytes
                self._truncate_fully_locked(leo)
                return removed
            self._truncations += 1
            self._clamp_cleaner_checkpoint(leo)
            self.epochs.truncate_from_end(leo)
            self.recovery_point = min(self.recovery_point, leo)
            self.durable_offset = min(self.durable_offset, leo)
            checkpoint.write_offset(self.directory / RECOVERY_POINT_FILE, self.recovery_point)
            assert leo <= offset
            return removed

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._flush_lock, self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        for seg in list(self._segments.values()):
            seg.delete()
        self._segments.clear()
        self._active = LogSegment(
            self.directory, offset, self.config, self.pool, active=True, created_ms=self.clock()
        )
        self._segments[offset] = self._active
        self.log_start_offset = offset
        self.recovery_point = self.durable_offset = offset
        self._dir_unsynced = True
        self._truncations += 1
        self._clamp_cleaner_checkpoint(offset)
        self.epochs.clear()
        checkpoint.write_offset(self.directory / LOG_START_FILE, offset)
        checkpoint.write_offset(self.directory / RECOVERY_POINT_FILE, offset)

    # -- retention -----------------------------------------------------------------

    def advance_log_start_offset(self, offset: int) -> None:
        """Make offsets below `offset` unreadable (Kafka's DeleteRecords);
        whole segments below it are deleted by the next retention pass."""
        with self._lock:
            self._check_open()
            if offset <= self.log_start_offset:
                return
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot start the log at {offset}, past its end {self.log_end_offset}",
                    offset=offset,
                    log_end_offset=self.log_end_offset,
                )
            self.log_start_offset = offset
            self.epochs.truncate_from_start(offset)
            checkpoint.write_offset(self.directory / LOG_START_FILE, offset)

    def delete_old_segments(self, max_offset: int | None = None) -> int:
        """Apply retention (time, size, log start). Only segments wholly below
        `max_offset` (the high watermark, for a leader) may go. Returns the
        number of segments deleted."""
        with self._flush_lock, self._lock:
            self._check_open()
            segs = list(self._segments.values())
            infos = [_retention_info(s) for s in segs]
            count = deletable_prefix(
                infos,
                now_ms=self.clock(),
                log_start_offset=self.log_start_offset,
                retention_ms=self.config.retention_ms,
                retention_bytes=self.config.retention_bytes,
                delete_enabled=self.config.delete,
                max_offset=max_offset,
            )
            if not count:
                return 0
            for seg in segs[:count]:
                del self._segments[seg.base_offset]
                seg.delete()
            new_start = max(self.log_start_offset, self._segments.peekitem(0)[0])
            if new_start != self.log_start_offset:
                self.log_start_offset = new_start
                self.epochs.truncate_from_start(new_start)
                checkpoint.write_offset(self.directory / LOG_START_FILE, new_start)
            log.info(
                "%s: retention deleted %d segments; log starts at %d",
                self.directory,
                count,
                self.log_start_offset,
            )
            return count

    # -- durability ----------------------------------------------------------------

    def flush(self, *, sealed_only: bool = False) -> None:
        """fsync unflushed segments and advance the recovery point.

        With sealed_only the active segment is left alone and the recovery
        point moves to its base offset (the `none` policy flushes on roll).
        """
        with self._flush_lock:
            with self._lock:
                self._check_open()
                segs = [s for s in self._segments.values() if s.unflushed]
                if sealed_only:
                    segs = [s for s in segs if not s.active]
                    target = self.active_segment.base_offset
                else:
                    target = self.log_end_offset
                # Clear before syncing: an append racing with the fsync marks
                # its segment again and the next flush picks it up.
                for s in segs:
                    s.unflushed = s.unsynced = False
                dir_unsynced, self._dir_unsynced = self._dir_unsynced, False
            started = time.perf_counter()
            try:
                if dir_unsynced:
                    checkpoint.fsync_dir(self.directory)
                for s in segs:
                    s.flush()
            except Exception:
                for s in segs:
                    s.unflushed = s.unsynced = True
                self._dir_unsynced = self._dir_unsynced or dir_unsynced
                raise
            self._flushed(started, bool(segs) or dir_unsynced)
            with self._lock:
                self._last_flush_ms = self.clock()
                self.durable_offset = max(self.durable_offset, min(target, self.log_end_offset))
                if target > self.recovery_point:
                    self.recovery_point = target
                    checkpoint.write_offset(self.directory / RECOVERY_POINT_FILE, target)

    def commit(self) -> int:
        """Group commit: make every batch appended so far durable and return
        the durable offset. One fdatasync of each segment written since the
        last commit (the active one, and the one a roll sealed meanwhile),
        and of the directory when a segment was created since: so one call
        covers every append before it, however many producers made them.
        Appends may go on meanwhile (the next commit covers them); the
        recovery-point checkpoint is left to the flush at roll. Blocking:
        run it off the event loop (lograft/brokers/group_commit.py)."""
        with self._flush_lock:
            with self._lock:
                self._check_open()
                target = self.log_end_offset
                if target <= self.durable_offset:
                    return self.durable_offset
                segs = [s for s in self._segments.values() if s.unsynced]
                for s in segs:
                    s.unsynced = False
                dir_unsynced, self._dir_unsynced = self._dir_unsynced, False
            started = time.perf_counter()
            try:
                if dir_unsynced:
                    checkpoint.fsync_dir(self.directory)
                for s in segs:
                    s.sync_data()
            except Exception:
                for s in segs:
                    s.unsynced = True
                self._dir_unsynced = self._dir_unsynced or dir_unsynced
                raise
            self._flushed(started, bool(segs) or dir_unsynced)
            with self._lock:
                # Truncations take the flush lock: none ran since `target`.
                self.durable_offset = max(self.durable_offset, target)
                return self.durable_offset

    def _flushed(self, started: float, synced: bool) -> None:
        """Report a flush's fsync time to `on_flush` (only one that synced something)."""
        observer = self.on_flush
        if observer is not None and synced:
            observer(time.perf_counter() - started)

    def maybe_flush(self) -> bool:
        """Called periodically by the maintenance thread; flushes per policy."""
        policy = self.config.flush_policy
        with self._lock:
            if self._closed:
                return False
            due = self.clock() - self._last_flush_ms >= self.config.flush_interval_ms
            dirty = any(s.unflushed for s in self._segments.values())
            sealed_dirty = any(s.unflushed and not s.active for s in self._segments.values())
        if policy is FlushPolicy.INTERVAL_MS and due and dirty:
            self.flush()
            return True
        if sealed_dirty:
            self.flush(sealed_only=policy in (FlushPolicy.NONE, FlushPolicy.GROUP_COMMIT))
            return True
        return False

    def close(self) -> None:
        """Flush everything and mark the shutdown clean."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            for seg in self._segments.values():
                if seg.unflushed:
                    seg.flush()
            self.recovery_point = self.durable_offset = self.log_end_offset
            checkpoint.write_offset(self.directory / RECOVERY_POINT_FILE, self.recovery_point)
            checkpoint.write_offset(self.directory / LOG_START_FILE, self.log_start_offset)
            for seg in self._segments.values():
                seg.close()
            self._closed = True
            torn = [s.log_path.name for s in self._segments.values() if s.tail_dirty]
            if torn:
                # Bytes of a failed write are still there: the next open
                # must recover rather than trust the files.
                log.warning(
                    "%s: not marking the shutdown clean; torn bytes in %s", self.directory, torn
                )
                return
            checkpoint.write_atomic(self.directory / CLEAN_SHUTDOWN_FILE, b"")

    def close_unclean(self) -> None:
        """Release files without flushing or marking clean (tests simulate crashes)."""
        with self._lock:
            for seg in self._segments.values():
                seg.index.close()
                seg.time_index.close()
                if seg._fd is not None:
                    os.close(seg._fd)
                    seg._fd = None
                self.pool.discard(str(seg.log_path))
            self._closed = True

    def delete(self) -> None:
        """Remove the log and its directory (the partition moved away)."""
        import shutil

        with self._flush_lock, self._lock:
            for seg in self._segments.values():
                seg.close()
            self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)
            power_loss.forget(self.directory)

    # -- compaction support -----------------------------------------------------

    @property
    def truncations(self) -> int:
        """How many times the log was truncated since it was opened."""
        return self._truncations

    def _clamp_cleaner_checkpoint(self, end: int) -> None:
        # Data re-appended after a truncation is new, not deduplicated: were
        # the checkpoint left above it, the cleaner could drop a tombstone
        # whose older value it never removed.
        path = self.directory / CLEANER_CHECKPOINT_FILE
        try:
            current = checkpoint.read_offset(path)
        except checkpoint.CorruptCheckpointError:
            return  # the cleaner treats a corrupt checkpoint as "all dirty"
        if current is not None and current > end:
            checkpoint.write_offset(path, end)

    def set_cleaner_checkpoint(self, offset: int, *, expected_truncations: int) -> bool:
        """Record the cleaner's first dirty offset, unless the log was truncated
        since the cleaner looked at it (then returns False and writes nothing)."""
        with self._lock:
            self._check_open()
            if self._truncations != expected_truncations:
                return False
            checkpoint.write_offset(self.directory / CLEANER_CHECKPOINT_FILE, offset)
            return True

    def replace_segments(
        self,
        old: list[LogSegment],
        new_base: int,
        end: int,
        *,
        expected_truncations: int | None = None,
    ) -> LogSegment:
        """Swap a cleaned segment (staged in `.cleaner/`) in for `old`.

        Called by the cleaner. Fails with CleanerConflictError if any old
        segment changed meanwhile (deleted by retention, truncated, or became
        active) or, given `expected_truncations`, if the log was truncated at
        all. If the swap fails before its commit point nothing has changed; if
        it fails after, the log is closed (its files are half swapped) and the
        next open completes the swap.
        """
        from lograft.storage.swap import CLEANER_DIR, commit_swap

        staged = self.directory / CLEANER_DIR / file_name(new_base, LOG_SUFFIX)
        with self._flush_lock, self._lock:
            self._check_open()
            if expected_truncations is not None and expected_truncations != self._truncations:
                raise CleanerConflictError("the log was truncated during cleaning")
            for seg in old:
                if self._segments.get(seg.base_offset) is not seg or seg.active:
                    raise CleanerConflictError(f"segment {seg.base_offset} changed during cleaning")
            if not staged.exists():
                raise FileNotFoundError(f"no staged segment {staged}")
            try:
                commit_swap(self.directory, new_base, end, [s.base_offset for s in old])
            except BaseException:
                if not staged.exists():
                    # Moved: past the commit point, the segments in memory no
                    # longer match the files. Reopening finishes the swap.
                    self._closed = True
                raise
            # The old files are gone; closing also drops pooled descriptors,
            # one of which is for the path the new segment now has.
            for seg in old:
                seg.close()
                del self._segments[seg.base_offset]
            fresh = LogSegment(
                self.directory,
                new_base,
                self.config,
                self.pool,
                active=False,
                created_ms=self.clock(),
            )
            fresh.load_tail_state()
            self._segments[new_base] = fresh
            return fresh

    def __repr__(self) -> str:
        return (
            f"Log({self.directory}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )


def _retention_info(seg: LogSegment) -> SegmentInfo:
    # The file's mtime matters only to a segment without timestamps: the
    # stat is skipped for the others.
    mtime = seg.last_modified_ms() if seg.largest_timestamp < 0 else -1
    return SegmentInfo(seg.base_offset, seg.next_offset, seg.size, seg.largest_timestamp, mtime)


def _assign_offsets(
    data: bytes,
    headers: list[tuple[int, BatchHeader]],
    first: int,
    leader_epoch: int,
    append_time: int,
) -> tuple[list[Buffer], list[AppendedBatch], int, int]:
    """The bytes that write producer batches with offsets from `first` and
    `leader_epoch` stamped, what the segment indexes of each batch, and the
    batches' largest timestamp and record count (for AppendInfo).

    baseOffset and partitionLeaderEpoch lie outside the CRC, so each batch
    goes out as a new 16-byte prefix plus a view of its bytes 16..end: the
    request is never copied. LogAppendTime (append_time >= 0) changes bytes
    the CRC covers, so those batches are copied and checksummed again.
    """
    view = memoryview(data)
    parts: list[Buffer] = []
    batches: list[AppendedBatch] = []
    next_offset = first
    largest = -(1 << 63)  # below any int64 maxTimestamp
    records = 0
    for pos, h in headers:
        size = h.batch_length + LOG_OVERHEAD
        max_ts = h.max_timestamp
        if append_time < 0:
            parts.append(PATCHED_PREFIX.pack(next_offset, h.batch_length, leader_epoch))
            parts.append(view[pos + PATCHED_PREFIX_SIZE : pos + size])
        else:
            batch = bytearray(view[pos : pos + size])
            patch_base_offset_and_epoch(batch, 0, next_offset, leader_epoch)
            set_log_append_time(batch, 0, size, append_time)
            parts.append(batch)
            max_ts = append_time
        last = next_offset + h.last_offset_delta
        batches.append(AppendedBatch(last, max_ts, size))
        next_offset = last + 1
        largest = max_ts if max_ts > largest else largest
        records += h.records_count
    return parts, batches, largest, records


class CleanerConflictError(Exception):
    """Internal: the log changed under the cleaner; it retries next round."""


def _index_looks_sane(seg: LogSegment) -> bool:
    if not seg.index.tail_is_sane(seg.size):
        return False
    last = seg.time_index.last_entry()
    return last is None or last[1] >= seg.base_offset


__all__ = [
    "LOG_OVERHEAD",
    "AppendInfo",
    "CheckedAppend",
    "CorruptRecordError",
    "Log",
    "RecoveryReport",
    "TimestampOffset",
]

"""Log compaction (cleanup_policy=compact or compact,delete), as Kafka's log cleaner.

One pass of `clean_log` over a partition log:

1. Plan. The *cleanable* segments are the sealed ones from the log start up
   to (not including) the first *uncleanable* one: the active segment, the
   first segment reaching `max_offset` (the high watermark, when the caller
   gives one), and, when `min_compaction_lag_ms > 0`, the first dirty segment
   whose newest timestamp is later than `now_ms - min_compaction_lag_ms`.
   `cleaner-offset-checkpoint` holds the *first dirty offset* F; segments
   wholly below F are *clean*, the cleanable ones from the segment holding F
   on are *dirty*. The pass runs when dirty bytes / (clean + dirty bytes)
   >= `min_cleanable_dirty_ratio` (and dirty bytes > 0), or when forced.
2. Map. Read the dirty segments in offset order into a map key -> newest
   offset. The map is bounded by `CleanerConfig.cleaner_offset_map_bytes_max`
   (each entry is charged its key's length plus OFFSET_MAP_ENTRY_BYTES). When
   the next batch would overflow it, mapping stops before that batch and the
   pass covers only the offsets mapped so far: E, the end of the map, is that
   batch's base offset (else the base of the first uncleanable segment). The
   map always takes at least one batch, so every pass makes progress; a batch
   is bounded by max_message_bytes, so the overshoot is too.
3. Clean. The cleanable segments with a base below E are grouped, oldest
   first, into runs whose input bytes fit `segment_bytes` and whose offsets
   fit 32-bit relative offsets. Each run is rewritten into one complete
   segment staged in `<partition>/.cleaner/` (log, index, time index, sealed
   and fsynced), then swapped in by `Log.replace_segments` (crash-safe, see
   swap.py). Reading and writing happen outside the log's lock; only the
   swap takes it.
4. Checkpoint E as the new first dirty offset, after every run is swapped.

Invariants:

- Offsets never change. A retained record keeps its offset, key, value,
  headers and timestamp; a rewritten batch keeps its baseOffset,
  lastOffsetDelta, producerId/epoch, baseSequence, partitionLeaderEpoch,
  codec, timestamp type and transactional flag (Kafka's filterTo does the
  same; baseTimestamp/maxTimestamp are recomputed from the retained records,
  except maxTimestamp of LogAppendTime batches, which is the records' time).
  A batch nothing was removed from is copied byte for byte; a batch
  everything was removed from is dropped.
- A record is removed only if it is below E and either a newer record with
  the same key is below E, or it is a tombstone (null value) that is the
  newest of its key and lies in a segment whose newest timestamp is more
  than `delete_retention_ms` before `now_ms`. This is Kafka's older
  tombstone rule (segment time, not the v2 delete-horizon attribute): it
  needs no rewrite to stamp a horizon, at the price that a tombstone written
  with an old producer timestamp may go on the first clean.
- Records without a key, and control batches, are always kept. (Refusing
  keyless produces to compacted topics is the broker's job.) Transactional
  batches are compacted like any other: lograft has no transaction
  coordinator yet, so aborted transactional data is not recognised.
- After a pass that ends at E, [log start, E) holds at most one keyed record
  per key. That is why dropping a tombstone is safe: no older value of its key
  survives below E. It only holds because truncation below the checkpoint
  pulls the checkpoint down (Log._clamp_cleaner_checkpoint) and any
  truncation during a pass aborts it (CleanerConflictError).
- The active segment, and anything at or after E, is never rewritten.
- A run that conflicts with a concurrent change (retention, truncation)
  aborts the rest of the pass; the staging directory is removed and the
  checkpoint is not moved. Runs already swapped stay: each is a valid clean.

A run whose every record is removed becomes an empty segment (as in Kafka);
the next pass merges it into a neighbour.

Pure file I/O, no asyncio; time is passed in. One pass per log at a time.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import weakref
from collections.abc import Generator, Iterator, Sequence
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path

import msgspec.structs

from lograft.errors import CorruptRecordError
from lograft.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    RecordInput,
    build_batch,
    iter_batch_records,
    parse_header,
    set_log_append_time,
    validate_batch,
)
from lograft.protocol.compression import Compression
from lograft.storage import checkpoint
from lograft.storage.config import MIB, LogConfig
from lograft.storage.log import CLEANER_CHECKPOINT_FILE, CleanerConflictError, Log
from lograft.storage.segment import AppendedBatch, LogSegment
from lograft.storage.swap import CLEANER_DIR

logger = logging.getLogger(__name__)

# What one map entry costs beyond its key's bytes: a CPython 3.11 dict slot,
# the bytes object's header and an int, measured with tracemalloc (~117).
OFFSET_MAP_ENTRY_BYTES = 120
# Index entries hold offsets relative to the segment base as int32.
_RELATIVE_OFFSET_MAX = 0x7FFFFFFF
_TIME_INDEX_ENTRY_BYTES = 12


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-wide cleaner limits (Kafka's log.cleaner.* settings)."""

    # Memory for the key -> offset map of one pass, bytes
    # (Kafka's log.cleaner.dedupe.buffer.size).
    cleaner_offset_map_bytes_max: int = 64 * MIB
    # Bytes read from a segment file per read call.
    cleaner_read_chunk_bytes: int = 1 * MIB
    # Cleaned output buffered before each write to the staged segment, bytes.
    cleaner_write_buffer_bytes: int = 1 * MIB

    def __post_init__(self) -> None:
        if self.cleaner_offset_map_bytes_max < 1:
            raise ValueError("cleaner_offset_map_bytes_max must be >= 1 byte")
        if self.cleaner_read_chunk_bytes < HEADER_SIZE:
            raise ValueError(f"cleaner_read_chunk_bytes must be >= {HEADER_SIZE} bytes")
        if self.cleaner_write_buffer_bytes < 1:
            raise ValueError("cleaner_write_buffer_bytes must be >= 1 byte")


@dataclass(slots=True)
class CleanResult:
    """What one pass did. Counts cover the runs actually swapped in."""

    first_dirty_offset: int  # the checkpoint the pass started from
    end_offset: int  # E: the new first dirty offset when not aborted
    dirty_ratio: float
    map_full: bool = False  # the map bound cut the pass short of the dirty end
    aborted: bool = False  # a concurrent change stopped the pass
    segments_cleaned: int = 0  # old segments replaced
    segments_written: int = 0  # cleaned segments swapped in
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0  # every record removed, tombstones included
    tombstones_removed: int = 0  # null-value records removed, for any reason


@dataclass(frozen=True, slots=True)
class _Plan:
    cleanable: list[LogSegment]  # oldest first, all sealed
    following_base: list[int]  # base offset of the segment after each one
    sizes: list[int]
    largest_timestamps: list[int]
    dirty_from: int  # index into cleanable of the first dirty segment
    first_dirty: int
    uncleanable_base: int  # base offset of the first segment not cleanable
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(slots=True)
class _OffsetMap:
    limit_bytes: int
    offsets: dict[bytes, int] = field(default_factory=dict)
    used_bytes: int = 0

    def add_batch(self, keyed: Sequence[tuple[bytes, int]]) -> bool:
        """Add one batch's (key, offset) pairs whole, or nothing if they do
        not fit; an empty map takes any batch so a pass always progresses."""
        new_keys = {k for k, _off in keyed if k not in self.offsets}
        cost = sum(len(k) + OFFSET_MAP_ENTRY_BYTES for k in new_keys)
        if self.offsets and self.used_bytes + cost > self.limit_bytes:
            return False
        for key, offset in keyed:
            self.offsets[key] = offset
        self.used_bytes += cost
        return True


@dataclass(frozen=True, slots=True)
class _Rules:
    """What decides a record's fate in one pass."""

    offset_map: dict[bytes, int]
    end_offset: int


@dataclass(slots=True)
class _RunStats:
    records_removed: int = 0
    tombstones_removed: int = 0
    bytes_after: int = 0


_pass_locks: weakref.WeakKeyDictionary[Log, threading.Lock] = weakref.WeakKeyDictionary()
_pass_locks_guard = threading.Lock()


def _pass_lock(target: Log) -> threading.Lock:
    with _pass_locks_guard:
        lock = _pass_locks.get(target)
        if lock is None:
            lock = _pass_locks[target] = threading.Lock()
        return lock


# -- public API -------------------------------------------------------------------


def clean_log(
    target: Log,
    now_ms: int,
    *,
    force: bool = False,
    max_offset: int | None = None,
    config: CleanerConfig | None = None,
) -> CleanResult | None:
    """Compact `target` once. Returns None when there was nothing to do (not a
    compacted log, nothing cleanable, or the dirty ratio below the minimum
    without `force`). `max_offset`, the high watermark for a leader, keeps
    segments reaching it out of the pass. Raises CorruptRecordError if a
    sealed segment holds a corrupt batch (nothing is changed)."""
    if not target.config.compact:
        return None
    cfg = config or CleanerConfig()
    with _pass_lock(target):
        # Count first, snapshot second: a truncation the snapshot misses
        # changes the count, which the swap and the checkpoint check.
        truncations = target.truncations
        segments = target.segments()
        log_start = target.log_start_offset
        first_dirty = read_first_dirty_offset(target.directory, log_start, segments)
        plan = _plan(segments, log_start, first_dirty, target.config, now_ms, max_offset)
        if plan is None or not (force or _ratio_due(plan, target.config)):
            return None
        return _run_pass(target, plan, now_ms, truncations, cfg)


def read_first_dirty_offset(
    directory: Path, log_start_offset: int, segments: Sequence[LogSegment]
) -> int:
    """The checkpointed first dirty offset, reset to the log start when it is
    missing, corrupt or outside [log start, log end] (Kafka does the same)."""
    try:
        offset = checkpoint.read_offset(directory / CLEANER_CHECKPOINT_FILE)
    except checkpoint.CorruptCheckpointError as exc:
        logger.warning("%s: %s; cleaning the whole log", directory, exc)
        offset = None
    log_end = segments[-1].next_offset
    if offset is None or not log_start_offset <= offset <= log_end:
        return log_start_offset
    return offset


# -- planning -----------------------------------------------------------------------


def _plan(
    segments: Sequence[LogSegment],
    log_start: int,
    first_dirty: int,
    config: LogConfig,
    now_ms: int,
    max_offset: int | None,
) -> _Plan | None:
    # Segments wholly below the log start are retention's to delete; an empty
    # one at the start is kept in so the next run merges it away.
    sealed = [s for s in segments[:-1] if s.next_offset > log_start or s.base_offset >= log_start]
    following = {s.base_offset: segments[i + 1].base_offset for i, s in enumerate(segments[:-1])}
    dirty_from = next((i for i, s in enumerate(sealed) if s.next_offset > first_dirty), len(sealed))
    stop = _first_uncleanable(sealed, dirty_from, config, now_ms, max_offset)
    cleanable = sealed[:stop]
    if not cleanable:
        return None
    sizes = [s.size for s in cleanable]
    dirty_from = min(dirty_from, stop)
    uncleanable_base = sealed[stop].base_offset if stop < len(sealed) else segments[-1].base_offset
    return _Plan(
        cleanable=cleanable,
        following_base=[following[s.base_offset] for s in cleanable],
        sizes=sizes,
        largest_timestamps=[s.largest_timestamp for s in cleanable],
        dirty_from=dirty_from,
        first_dirty=first_dirty,
        uncleanable_base=uncleanable_base,
        clean_bytes=sum(sizes[:dirty_from]),
        dirty_bytes=sum(sizes[dirty_from:]),
    )


def _first_uncleanable(
    sealed: Sequence[LogSegment],
    dirty_from: int,
    config: LogConfig,
    now_ms: int,
    max_offset: int | None,
) -> int:
    lag = config.min_compaction_lag_ms
    for i, seg in enumerate(sealed):
        if max_offset is not None and seg.next_offset > max_offset:
            return i
        # Only dirty segments are held back by the lag, as in Kafka: clean
        # ones were old enough when first cleaned and only get older.
        if lag > 0 and i >= dirty_from and seg.largest_timestamp > now_ms - lag:
            return i
    return len(sealed)


def _ratio_due(plan: _Plan, config: LogConfig) -> bool:
    return plan.dirty_bytes > 0 and plan.dirty_ratio >= config.min_cleanable_dirty_ratio


# -- one pass -----------------------------------------------------------------------


def _run_pass(
    target: Log, plan: _Plan, now_ms: int, truncations: int, cfg: CleanerConfig
) -> CleanResult:
    offset_map, end_offset, map_full = _build_offset_map(plan, cfg)
    result = CleanResult(plan.first_dirty, end_offset, plan.dirty_ratio, map_full=map_full)
    rules = _Rules(offset_map.offsets, end_offset)
    for run in _group_runs(plan, end_offset, target.config.segment_bytes):
        try:
            _clean_run(target, plan, run, rules, now_ms, truncations, cfg, result)
        except CleanerConflictError as exc:
            logger.info("%s: cleaning aborted: %s", target.directory, exc)
            result.aborted = True
            return result
    if not target.set_cleaner_checkpoint(end_offset, expected_truncations=truncations):
        result.aborted = True
        return result
    logger.info(
        "%s: cleaned [%d, %d): %d segments into %d, %d -> %d bytes, %d records and %d "
        "tombstones removed",
        target.directory,
        plan.cleanable[0].base_offset,
        end_offset,
        result.segments_cleaned,
        result.segments_written,
        result.bytes_before,
        result.bytes_after,
        result.records_removed,
        result.tombstones_removed,
    )
    return result


def _build_offset_map(plan: _Plan, cfg: CleanerConfig) -> tuple[_OffsetMap, int, bool]:
    """Map the dirty segments; returns (map, E, whether the bound stopped it)."""
    offset_map = _OffsetMap(cfg.cleaner_offset_map_bytes_max)
    for seg, size in zip(
        plan.cleanable[plan.dirty_from :], plan.sizes[plan.dirty_from :], strict=True
    ):
        with closing(_read_batches(seg.log_path, size, cfg.cleaner_read_chunk_bytes)) as batches:
            for header, data in batches:
                if header.last_offset < plan.first_dirty or header.is_control:
                    continue
                keyed = [
                    (r.key, r.offset)
                    for r in iter_batch_records(data, 0, header)
                    if r.key is not None
                ]
                if not offset_map.add_batch(keyed):
                    return offset_map, header.base_offset, True
    # Fully mapped (or nothing dirty): E is where the dirty section ends, or
    # the old checkpoint when a forced pass only re-cleans clean segments.
    end = plan.uncleanable_base if plan.dirty_from < len(plan.cleanable) else plan.first_dirty
    return offset_map, end, False


def _group_runs(plan: _Plan, end_offset: int, segment_bytes: int) -> Iterator[list[int]]:
    """Indexes of consecutive cleanable segments below E, in runs whose input
    fits one segment (output is never larger than input) and 32-bit offsets."""
    run: list[int] = []
    run_bytes = 0
    for i, seg in enumerate(plan.cleanable):
        if seg.base_offset >= end_offset:
            break
        last = max(seg.next_offset - 1, seg.base_offset)
        if run and (
            run_bytes + plan.sizes[i] > segment_bytes
            or last - plan.cleanable[run[0]].base_offset > _RELATIVE_OFFSET_MAX
        ):
            yield run
            run, run_bytes = [], 0
        run.append(i)
        run_bytes += plan.sizes[i]
    if run:
        yield run


def _clean_run(
    target: Log,
    plan: _Plan,
    run: list[int],
    rules: _Rules,
    now_ms: int,
    truncations: int,
    cfg: CleanerConfig,
    result: CleanResult,
) -> None:
    old = [plan.cleanable[i] for i in run]
    base = old[0].base_offset
    staging = target.directory / CLEANER_DIR
    shutil.rmtree(staging, ignore_errors=True)  # left by an attempt that failed
    staging.mkdir()
    input_bytes = sum(plan.sizes[i] for i in run)
    staged = LogSegment(
        staging,
        base,
        _staging_config(target.config, input_bytes),
        target.pool,
        active=True,
        created_ms=now_ms,
    )
    try:
        stats = _write_run(staged, plan, run, rules, now_ms, target.config, cfg)
        # Durable before the swap: after the commit point it is the only copy.
        staged.seal()
        _inherit_last_modified(staged, old)
        staged.flush()
        staged.close()
        if stats.records_removed == 0 and len(old) == 1:
            shutil.rmtree(staging, ignore_errors=True)  # byte-identical; skip the swap
            return
        target.replace_segments(
            old, base, plan.following_base[run[-1]], expected_truncations=truncations
        )
    except Exception:
        # Exception only: a simulated (or real) crash must leave the files as they are.
        staged.close()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result.segments_cleaned += len(old)
    result.segments_written += 1
    result.bytes_before += input_bytes
    result.bytes_after += stats.bytes_after
    result.records_removed += stats.records_removed
    result.tombstones_removed += stats.tombstones_removed


def _inherit_last_modified(staged: LogSegment, old: list[LogSegment]) -> None:
    """Give the cleaned file the newest mtime of the files it replaces, as
    Kafka's cleaner does: time retention of a segment without timestamps
    (one this pass emptied, say) goes by its mtime, and cleaning must not
    restart that clock."""
    newest = -1
    for seg in old:
        with suppress(FileNotFoundError):  # deleted meanwhile: the swap will refuse
            newest = max(newest, seg.log_path.stat().st_mtime_ns)
    if newest >= 0:
        os.utime(staged.log_path, ns=(newest, newest))


def _staging_config(config: LogConfig, input_bytes: int) -> LogConfig:
    # An index entry needs more than index_interval_bytes of log since the
    # previous one and at least one whole batch, so this many entries always
    # fit: the staged segment can never fail with a full index.
    per_entry = max(config.index_interval_bytes, HEADER_SIZE)
    entries = input_bytes // per_entry + 2
    return msgspec.structs.replace(
        config, segment_index_bytes=max(4096, entries * _TIME_INDEX_ENTRY_BYTES)
    )


def _write_run(
    staged: LogSegment,
    plan: _Plan,
    run: list[int],
    rules: _Rules,
    now_ms: int,
    config: LogConfig,
    cfg: CleanerConfig,
) -> _RunStats:
    stats = _RunStats()
    out = _BufferedAppender(staged, cfg.cleaner_write_buffer_bytes)
    for i in run:
        seg_ts = plan.largest_timestamps[i]
        drop_tombstones = seg_ts >= 0 and now_ms - seg_ts > config.delete_retention_ms
        with closing(
            _read_batches(plan.cleanable[i].log_path, plan.sizes[i], cfg.cleaner_read_chunk_bytes)
        ) as batches:
            for header, data in batches:
                kept = _filter_batch(header, data, rules, drop_tombstones, stats)
                if kept is not None:
                    out.add(kept)
    out.flush()
    stats.bytes_after = staged.size
    return stats


# -- batches ------------------------------------------------------------------------


def _filter_batch(
    header: BatchHeader, data: bytes, rules: _Rules, drop_tombstones: bool, stats: _RunStats
) -> bytes | None:
    """The batch as it should be after cleaning, or None if nothing is left."""
    if header.is_control or header.records_count == 0:
        return data  # markers (and Kafka's empty producer-state batches) are kept
    records = list(iter_batch_records(data, 0, header))
    kept = [r for r in records if _retain(r, rules, drop_tombstones)]
    removed = len(records) - len(kept)
    if not removed:
        return data
    stats.records_removed += removed
    stats.tombstones_removed += sum(r.value is None for r in records) - sum(
        r.value is None for r in kept
    )
    return _rebuild(header, kept) if kept else None


def _retain(record: Record, rules: _Rules, drop_tombstones: bool) -> bool:
    if record.key is None or record.offset >= rules.end_offset:
        return True
    newest = rules.offset_map.get(record.key)
    if newest is not None and newest > record.offset:
        return False
    # The newest of its key below E (or in the clean section, which holds one
    # record per key): a tombstone here shadows nothing once it is gone.
    return not (record.value is None and drop_tombstones)


def _rebuild(header: BatchHeader, kept: list[Record]) -> bytes:
    """A batch of the kept records with the original batch's identity."""
    data = build_batch(
        [RecordInput(r.value, r.key, r.headers, r.timestamp) for r in kept],
        timestamp_ms=kept[0].timestamp,
        base_offset=header.base_offset,
        compression=Compression(header.compression),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        is_transactional=header.is_transactional,
        offset_deltas=[r.offset - header.base_offset for r in kept],
        # Kept as Kafka keeps it, so the producer's last sequence still maps
        # to the batch's last offset.
        last_offset_delta=header.last_offset_delta,
    )
    if header.is_log_append_time:
        buf = bytearray(data)
        set_log_append_time(buf, 0, len(buf), header.max_timestamp)
        data = bytes(buf)
    return data


class _BufferedAppender:
    """Appends whole batches to the staged segment in writes of bounded size."""

    def __init__(self, segment: LogSegment, buffer_bytes: int) -> None:
        self.segment = segment
        self.buffer_bytes = buffer_bytes
        self._chunks: list[bytes] = []
        self._batches: list[AppendedBatch] = []
        self._size = 0

    def add(self, data: bytes) -> None:
        h = parse_header(data)
        self._chunks.append(data)
        self._batches.append(AppendedBatch(h.last_offset, h.max_timestamp, h.size))
        self._size += h.size
        if self._size >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        if self._batches:
            self.segment.append(self._chunks, self._size, self._batches)
        self._chunks, self._batches, self._size = [], [], 0


def _read_batches(
    path: Path, size: int, chunk_bytes: int
) -> Generator[tuple[BatchHeader, bytes], None, None]:
    """Every batch of the first `size` bytes of a sealed segment file, CRC
    checked (a corrupt batch must not be re-encoded with a fresh CRC). Reads
    through its own descriptor: a file retention deletes meanwhile stays
    readable, and the swap then reports the conflict."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise CleanerConflictError(f"{path.name} was deleted during cleaning") from exc
    try:
        pos, buf, rel = 0, b"", 0
        while pos < size:
            if len(buf) - rel < LOG_OVERHEAD:
                buf, rel = _pread_exact(fd, path, pos, max(chunk_bytes, LOG_OVERHEAD), size), 0
            batch_size = int.from_bytes(buf[rel + 8 : rel + 12], "big", signed=True) + LOG_OVERHEAD
            if batch_size < HEADER_SIZE or pos + batch_size > size:
                raise CorruptRecordError(
                    f"{path.name}: bad batch length at position {pos}", position=pos
                )
            if len(buf) - rel < batch_size:
                buf, rel = _pread_exact(fd, path, pos, max(chunk_bytes, batch_size), size), 0
            header = validate_batch(buf, rel, available=batch_size)
            yield header, buf[rel : rel + batch_size]
            pos += batch_size
            rel += batch_size
    finally:
        os.close(fd)


def _pread_exact(fd: int, path: Path, pos: int, want: int, size: int) -> bytes:
    want = min(want, size - pos)
    data = os.pread(fd, want, pos)
    if len(data) < want:
        # A sealed segment only shrinks when the log is truncated.
        raise CleanerConflictError(f"{path.name} shrank during cleaning")
    return data


__all__ = [
    "OFFSET_MAP_ENTRY_BYTES",
    "CleanResult",
    "CleanerConfig",
    "clean_log",
    "read_first_dirty_offset",
]

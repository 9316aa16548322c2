"""Log compaction: what survives, what is kept byte for byte, and crash safety
of the segment swap (a crash at every file operation of a pass)."""

from __future__ import annotations

import bisect
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from lograft.errors import CorruptRecordError
from lograft.protocol.batch import (
    Header,
    RecordInput,
    build_batch,
    check_records,
    iter_batches,
    validate_batch,
)
from lograft.protocol.compression import Compression
from lograft.storage import cleaner, swap
from lograft.storage.checkpoint import read_offset
from lograft.storage.cleaner import (
    OFFSET_MAP_ENTRY_BYTES,
    CleanerConfig,
    CleanResult,
    clean_log,
)
from lograft.storage.config import CleanupPolicy, LogConfig, TimestampType
from lograft.storage.handles import FilePool
from lograft.storage.log import CLEANER_CHECKPOINT_FILE, Log
from lograft.storage.swap import CLEANER_DIR

from .storage_support import FakeClock, ModelRecord, batch_bases, decode_all

NOW = 1_700_000_000_000
HOUR = 3_600_000
DAY = 24 * HOUR


# -- helpers ------------------------------------------------------------------------


def compact_config(**overrides: object) -> LogConfig:
    settings_: dict[str, object] = {
        "cleanup_policy": CleanupPolicy.COMPACT,
        "segment_bytes": 1 << 20,
        "index_interval_bytes": 128,
        "segment_index_bytes": 64 * 1024,
        "min_cleanable_dirty_ratio": 0.0,
    }
    settings_.update(overrides)
    return LogConfig(**settings_)  # type: ignore[arg-type]


def open_log(path: Path, config: LogConfig, clock: FakeClock | None = None) -> Log:
    # A pool per log: a reopened log must not inherit descriptors of replaced files.
    return Log(path, config, pool=FilePool(64), clock=clock or FakeClock(NOW))


def put(
    log: Log,
    records: list[tuple[bytes | None, bytes | None]],
    ts: int,
    *,
    compression: Compression = Compression.NONE,
    producer: tuple[int, int, int] | None = None,
    leader_epoch: int = 0,
    headers: tuple[Header, ...] = (),
) -> None:
    """Append one batch of (key, value) records, timestamps ts, ts+1, ..."""
    pid, epoch, seq = producer or (-1, -1, -1)
    inputs = [RecordInput(v, k, headers, ts + i) for i, (k, v) in enumerate(records)]
    batch = build_batch(
        inputs,
        timestamp_ms=ts,
        compression=compression,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    log.append(batch, leader_epoch=leader_epoch)


def read_all(log: Log) -> list[ModelRecord]:
    """Every record from the log start on, as a consumer fetching forward sees
    them; compaction may leave nothing between the last record and the LEO."""
    out: list[ModelRecord] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        out.extend(r for r in decode_all(data) if r.offset >= offset)
        offset = batch_bases(data)[-1][1] + 1
    return out


def consumer_view(records: list[ModelRecord]) -> dict[bytes, bytes]:
    """What a consumer reading from offset 0 ends up with per key."""
    view: dict[bytes, bytes] = {}
    for r in records:
        if r.key is None:
            continue
        if r.value is None:
            view.pop(r.key, None)
        else:
            view[r.key] = r.value
    return view


def expected_after_full_clean(
    records: list[ModelRecord], active_base: int, tombstones_expired: bool
) -> list[ModelRecord]:
    """Below the active segment: keyless records and the newest record of each
    key, minus expired tombstones; the active segment as it was."""
    newest = {r.key: r.offset for r in records if r.key is not None and r.offset < active_base}
    out = []
    for r in records:
        if (
            r.offset >= active_base
            or r.key is None
            or (newest[r.key] == r.offset and not (r.value is None and tombstones_expired))
        ):
            out.append(r)
    return out


def first_record_from(log: Log, offset: int) -> ModelRecord | None:
    """The first record at or after `offset`, fetching as a consumer does: a
    batch may keep offsets its removed records had, so skip past it."""
    position = offset
    while position < log.log_end_offset:
        data = log.read(position, 1)
        if not data:
            return None
        got = [r for r in decode_all(data) if r.offset >= offset]
        if got:
            return got[0]
        position = batch_bases(data)[-1][1] + 1
    return None


def assert_reads_everywhere(log: Log, expected: list[ModelRecord]) -> None:
    """Fetching from every offset of the log finds, first, the record the
    model says comes at or after it (removed offsets lead to the next one)."""
    offsets = [r.offset for r in expected]
    for o in range(log.log_start_offset, log.log_end_offset):
        i = bisect.bisect_left(offsets, o)
        want = expected[i] if i < len(expected) else None
        assert first_record_from(log, o) == want, f"fetch from {o}"


def active_bytes(log: Log) -> bytes:
    return log.active_segment.log_path.read_bytes()


def leftovers(directory: Path) -> list[str]:
    return sorted(
        n for n in os.listdir(directory) if n == CLEANER_DIR or ".swap" in n or n.endswith(".tmp")
    )


def orphan_indexes(directory: Path) -> list[str]:
    """Index files without their segment's .log (a later segment with that
    base offset would adopt their stale entries)."""
    logs = {p.stem for p in directory.glob("*.log")}
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.suffix in (".index", ".timeindex") and p.stem not in logs
    )


def clean_until_done(log: Log, now_ms: int, config: CleanerConfig | None = None) -> int:
    """Forced passes until one covers all it can; returns how many ran."""
    passes = 0
    while True:
        passes += 1
        result = clean_log(log, now_ms, force=True, config=config)
        if result is None:  # nothing sealed to clean
            return passes
        assert not result.aborted
        if not result.map_full:
            return passes
        assert passes < 10_000


def sample_log(path: Path, config: LogConfig | None = None) -> Log:
    """Five keys updated and deleted across four sealed segments and an active one."""
    log = open_log(path, config or compact_config())
    ts = NOW
    for i in range(60):
        key = b"k%d" % (i % 5)
        value = None if i % 13 == 12 else b"value-%d" % i
        put(log, [(key, value)], ts)
        ts += 10
        if i % 15 == 14:
            log.roll()
    put(log, [(None, b"keyless")], ts)
    return log


# -- what survives --------------------------------------------------------------------


def test_last_value_per_key_survives_with_offsets_unchanged(tmp_path):
    log = sample_log(tmp_path / "p")
    before = read_all(log)
    active_base = log.active_segment.base_offset
    result = clean_log(log, NOW + 1000)
    assert isinstance(result, CleanResult)
    after = read_all(log)
    assert after == expected_after_full_clean(before, active_base, tombstones_expired=False)
    assert consumer_view(after) == consumer_view(before)
    assert result.end_offset == active_base
    assert result.records_removed == len(before) - len(after)
    assert result.bytes_after < result.bytes_before
    assert_reads_everywhere(log, after)
    log.close()


def test_cleaned_log_reopens_with_the_same_records(tmp_path):
    log = sample_log(tmp_path / "p")
    clean_log(log, NOW + 1000)
    after = read_all(log)
    log.close()
    reopened = open_log(tmp_path / "p", compact_config())
    assert read_all(reopened) == after
    assert_reads_everywhere(reopened, after)
    reopened.close()


def test_rewritten_batches_keep_their_identity(tmp_path):
    log = open_log(tmp_path / "p", compact_config())
    hdrs: tuple[Header, ...] = (("trace", b"t1"), ("nil", None))
    for n, codec in enumerate([Compression.NONE, Compression.GZIP, Compression.ZSTD]):
        put(
            log,
            [(b"%s%d" % (k, n), b"v") for k in (b"a", b"b", b"c", b"d")],
            NOW + n * 100,
            compression=codec,
            producer=(40 + n, 3, 100 * n),
            leader_epoch=7 + n,
            headers=hdrs,
        )
    # Supersede a and d: every batch loses its first and last record, and
    # must still end at its original last offset.
    put(log, [(b"x", b"untouched")], NOW + 400, producer=(99, 1, 0), leader_epoch=9)
    log.roll()
    put(log, [(b"%s%d" % (k, n), b"new") for n in range(3) for k in (b"a", b"d")], NOW + 500)
    log.roll()
    old_file = log.segments()[0].log_path.read_bytes()
    old_batches = [(p, h) for p, h in iter_batches(old_file)]

    clean_log(log, NOW + 1000)

    new_file = log.segments()[0].log_path.read_bytes()
    new_batches = [(p, h) for p, h in iter_batches(new_file)]
    # Both sealed segments fit one run: the new segment also holds the second's batch.
    assert len(old_batches) == 4 and len(new_batches) == 5
    for (_old_pos, old), (new_pos, new) in zip(old_batches[:3], new_batches[:3], strict=True):
        validate_batch(new_file, new_pos)  # CRC and structure
        check_records(new_file, new_pos, new, contiguous=False)
        assert new.records_count == 2 and old.records_count == 4
        for attr in (
            "base_offset",
            "last_offset_delta",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            "partition_leader_epoch",
            "compression",
            "is_transactional",
            "is_log_append_time",
        ):
            assert getattr(new, attr) == getattr(old, attr), attr
    # A batch nothing was removed from is copied byte for byte.
    (op, oh), (np_, nh) = old_batches[3], new_batches[3]
    assert new_file[np_ : np_ + nh.size] == old_file[op : op + oh.size]
    survivors = [r for r in read_all(log) if r.offset < 13]
    assert [(r.offset, r.key, r.headers) for r in survivors] == [
        (4 * n + delta, b"%s%d" % (k, n), hdrs)
        for n in range(3)
        for delta, k in ((1, b"b"), (2, b"c"))
    ] + [(12, b"x", ())]
    log.close()


def test_log_append_time_batches_keep_their_time(tmp_path):
    clock = FakeClock(NOW)
    cfg = compact_config(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = open_log(tmp_path / "p", cfg, clock)
    put(log, [(b"a", b"1"), (b"b", b"2")], 5)
    clock.advance(1000)
    put(log, [(b"a", b"3")], 6)
    log.roll()
    clean_log(log, clock.now)
    data = log.segments()[0].log_path.read_bytes()
    (_pos, first), _second = list(iter_batches(data))
    assert first.is_log_append_time and first.max_timestamp == NOW
    assert [(r.offset, r.timestamp) for r in read_all(log)] == [(1, NOW), (2, NOW + 1000)]
    log.close()


def test_keyless_records_are_kept(tmp_path):
    log = open_log(tmp_path / "p", compact_config())
    for i in range(4):
        put(log, [(None, b"v%d" % i), (None, None)], NOW + i)
    log.roll()
    before = read_all(log)
    clean_log(log, NOW + 10 * DAY)
    assert read_all(log) == before
    log.close()


def test_control_batches_are_copied_and_not_mapped(tmp_path):
    log = open_log(tmp_path / "p", compact_config())
    put(log, [(b"k", b"v1")], NOW)
    marker = build_batch(
        [RecordInput(b"\x00\x00\x00\x00\x00\x00", b"k")],
        timestamp_ms=NOW + 1,
        producer_id=5,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    log.append(marker, leader_epoch=0, validate_records=False)
    log.roll()
    clean_log(log, NOW + 10 * DAY)
    # The marker's key is not a data key: the value before it survives.
    assert [(r.offset, r.value) for r in read_all(log)] == [
        (0, b"v1"),
        (1, b"\x00\x00\x00\x00\x00\x00"),
    ]
    log.close()


def test_not_compacted_log_is_left_alone(tmp_path):
    log = sample_log(tmp_path / "p", compact_config(cleanup_policy=CleanupPolicy.DELETE))
    before = read_all(log)
    assert clean_log(log, NOW + 1000, force=True) is None
    assert read_all(log) == before
    log.close()


# -- tombstones, lag, ratio, checkpoint ------------------------------------------------


def test_tombstone_kept_until_delete_retention_passes(tmp_path):
    cfg = compact_config(delete_retention_ms=DAY)
    log = open_log(tmp_path / "p", cfg)
    put(log, [(b"gone", b"v")], NOW)
    put(log, [(b"gone", None)], NOW + 10)
    put(log, [(b"kept", b"v")], NOW + 20)
    log.roll()
    newest = NOW + 20  # the segment's largest timestamp
    first = clean_log(log, newest + DAY)  # exactly delete_retention_ms old: kept
    assert first is not None and first.tombstones_removed == 0 and first.records_removed == 1
    assert [(r.key, r.value) for r in read_all(log)] == [(b"gone", None), (b"kept", b"v")]
    second = clean_log(log, newest + DAY + 1, force=True)
    assert second is not None and second.tombstones_removed == 1
    assert [(r.key, r.value) for r in read_all(log)] == [(b"kept", b"v")]
    log.close()


def test_superseded_tombstone_counts_as_removed_tombstone(tmp_path):
    log = open_log(tmp_path / "p", compact_config())
    put(log, [(b"k", None)], NOW)
    put(log, [(b"k", b"back")], NOW + 1)
    log.roll()
    result = clean_log(log, NOW + 2)
    assert result is not None and (result.records_removed, result.tombstones_removed) == (1, 1)
    log.close()


def test_min_compaction_lag_holds_back_young_segments(tmp_path):
    cfg = compact_config(min_compaction_lag_ms=HOUR)
    log = open_log(tmp_path / "p", cfg)
    put(log, [(b"a", b"old1"), (b"a", b"old2"), (b"b", b"old")], NOW)
    log.roll()
    put(log, [(b"a", b"young1"), (b"a", b"young2"), (b"b", b"young")], NOW + 2 * HOUR)
    log.roll()
    young = log.segments()[1]
    young_bytes = young.log_path.read_bytes()
    now = NOW + 2 * HOUR + 60_000
    result = clean_log(log, now)
    assert result is not None and result.end_offset == young.base_offset
    assert log.segments()[1].log_path.read_bytes() == young_bytes
    # The old segment is deduplicated only against itself: the young segment
    # is not mapped, so the old values it supersedes stay.
    assert [r.value for r in read_all(log)] == [
        b"old2",
        b"old",
        b"young1",
        b"young2",
        b"young",
    ]
    assert all(r in read_all(log) for r in decode_all(young_bytes))
    later = clean_log(log, NOW + 4 * HOUR)
    assert later is not None
    assert [r.value for r in read_all(log)] == [b"young2", b"young"]
    log.close()


def test_dirty_ratio_and_checkpoint_across_reopen(tmp_path):
    cfg = compact_config(min_cleanable_dirty_ratio=0.5)
    path = tmp_path / "p"
    log = open_log(path, cfg)
    for i in range(20):
        put(log, [(b"key-%02d" % i, b"x" * 100)], NOW + i)
    log.roll()
    first = clean_log(log, NOW + 1000)
    assert first is not None and first.dirty_ratio == 1.0
    checkpointed = log.active_segment.base_offset
    assert read_offset(path / CLEANER_CHECKPOINT_FILE) == checkpointed
    put(log, [(b"key-00", b"y" * 100)], NOW + 100)  # far less dirty than clean
    log.roll()
    assert clean_log(log, NOW + 1000) is None
    log.close()

    log = open_log(path, cfg)
    # Were the checkpoint lost, the whole log would be dirty and this would clean.
    assert clean_log(log, NOW + 1000) is None
    assert read_offset(path / CLEANER_CHECKPOINT_FILE) == checkpointed
    for i in range(20):
        put(log, [(b"key-%02d" % i, b"z" * 100)], NOW + 200 + i)
    log.roll()
    due = clean_log(log, NOW + 1000)
    assert due is not None and due.dirty_ratio >= 0.5
    assert {r.value for r in read_all(log)} == {b"z" * 100}
    put(log, [(b"key-00", b"w" * 100)], NOW + 300)
    log.roll()
    assert clean_log(log, NOW + 1000) is None
    forced = clean_log(log, NOW + 1000, force=True)
    assert forced is not None and forced.records_removed == 1
    log.close()


def test_truncation_below_checkpoint_makes_reappended_data_dirty(tmp_path):
    path = tmp_path / "p"
    log = open_log(path, compact_config(delete_retention_ms=DAY))
    for key in (b"x", b"y", b"z"):
        put(log, [(key, b"1")], NOW)
    log.roll()
    clean_log(log, NOW + 1)
    assert read_offset(path / CLEANER_CHECKPOINT_FILE) == 3
    log.truncate_to(1)  # a follower truncating to its new leader's log
    assert read_offset(path / CLEANER_CHECKPOINT_FILE) == 1
    put(log, [(b"k", b"a")], NOW + 1)
    put(log, [(b"k", None)], NOW + 2)
    put(log, [(b"w", b"1"), (b"w", b"2")], NOW + 3)
    log.roll()
    model = consumer_view(read_all(log))
    # The tombstone has expired. Had the checkpoint stayed at 3, offsets 1-2
    # would count as clean and k=a would outlive its tombstone.
    clean_log(log, NOW + 2 * DAY, force=True)
    assert consumer_view(read_all(log)) == model == {b"x": b"1", b"w": b"2"}
    log.close()


def test_high_watermark_bounds_the_pass(tmp_path):
    log = sample_log(tmp_path / "p")
    segs = log.segments()
    second = segs[1]
    result = clean_log(log, NOW + 1000, max_offset=second.next_offset - 1)
    assert result is not None and result.end_offset == second.base_offset
    assert log.segments()[1] is second  # not replaced
    log.close()


def test_active_segment_is_never_touched(tmp_path):
    log = sample_log(tmp_path / "p")
    for i in range(10):
        put(log, [(b"k0", b"again-%d" % i)], NOW + 5000 + i)
    put(log, [(b"k1", None)], NOW + 6000)
    before_active = active_bytes(log)
    active_records = [r for r in read_all(log) if r.offset >= log.active_segment.base_offset]
    clean_log(log, NOW + 10 * DAY, force=True)
    assert active_bytes(log) == before_active
    assert [
        r for r in read_all(log) if r.offset >= log.active_segment.base_offset
    ] == active_records
    log.close()


# -- the map bound -------------------------------------------------------------------


def test_a_full_offset_map_cleans_a_prefix_and_later_passes_finish(tmp_path):
    src = tmp_path / "src"
    log = open_log(src, compact_config())
    for round_ in range(3):
        for i in range(40):
            put(log, [(b"key-%02d" % i, b"r%d" % round_)], NOW + round_ * 100 + i)
        log.roll()
    log.close()
    shutil.copytree(src, tmp_path / "ref")
    ref = open_log(tmp_path / "ref", compact_config())
    clean_log(ref, NOW + 1000)
    expected = read_all(ref)
    ref.close()

    log = open_log(src, compact_config())
    before = read_all(log)
    small = CleanerConfig(cleaner_offset_map_bytes_max=10 * (OFFSET_MAP_ENTRY_BYTES + 6))
    first = clean_log(log, NOW + 1000, config=small)
    assert first is not None and first.map_full
    assert 0 < first.end_offset < log.active_segment.base_offset
    assert read_offset(src / CLEANER_CHECKPOINT_FILE) == first.end_offset
    after_first = read_all(log)
    # At and after the map's end nothing may be removed.
    assert [r for r in after_first if r.offset >= first.end_offset] == [
        r for r in before if r.offset >= first.end_offset
    ]
    assert consumer_view(after_first) == consumer_view(before)
    passes = clean_until_done(log, NOW + 1000, small)
    assert passes > 1
    assert read_all(log) == expected
    log.close()


def test_map_takes_at_least_one_batch(tmp_path):
    log = open_log(tmp_path / "p", compact_config())
    put(log, [(b"k%d" % i, b"v") for i in range(50)], NOW)
    put(log, [(b"k%d" % i, b"w") for i in range(50)], NOW + 100)
    log.roll()
    tiny = CleanerConfig(cleaner_offset_map_bytes_max=1)
    result = clean_log(log, NOW + 1000, config=tiny)
    assert result is not None and result.map_full and result.end_offset == 50
    clean_until_done(log, NOW + 1000, tiny)
    assert [r.value for r in read_all(log)] == [b"w"] * 50
    log.close()


# -- property: a random history against a model ---------------------------------------

_KEYS = [b"a", b"b", b"c", b"d", b"e", None]
_record = st.tuples(st.sampled_from(_KEYS), st.one_of(st.none(), st.binary(max_size=40)))
_op = st.one_of(
    st.just("roll"),
    st.tuples(
        st.lists(_record, min_size=1, max_size=4),
        st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD]),
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(_op, min_size=1, max_size=60),
    segment_bytes=st.sampled_from([1024, 2048, 1 << 20]),
    map_bytes=st.sampled_from([1, 3 * (OFFSET_MAP_ENTRY_BYTES + 1), 1 << 20]),
    expire=st.booleans(),
)
def test_random_histories_match_the_model(ops, segment_bytes, map_bytes, expire):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p"
        cfg = compact_config(segment_bytes=segment_bytes, delete_retention_ms=DAY)
        log = open_log(path, cfg)
        ts = NOW
        for op in ops:
            if op == "roll":
                log.roll()
            else:
                records, codec = op
                put(log, records, ts, compression=codec)
                ts += 10
        before = read_all(log)
        active_base = log.active_segment.base_offset
        active_before = active_bytes(log)
        now = NOW + 10 * DAY if expire else NOW + 5_000
        clean_until_done(log, now, CleanerConfig(cleaner_offset_map_bytes_max=map_bytes))

        after = read_all(log)
        assert after == expected_after_full_clean(before, active_base, expire)
        assert consumer_view(after) == consumer_view(before)
        assert active_bytes(log) == active_before
        assert_reads_everywhere(log, after)
        assert leftovers(path) == []
        log.close()
        reopened = open_log(path, cfg)
        assert read_all(reopened) == after
        reopened.close()


# -- kafka-python reads what the cleaner wrote -----------------------------------------


def test_kafka_python_parses_cleaned_segments(tmp_path):
    log = open_log(tmp_path / "p", compact_config())
    for n, codec in enumerate([Compression.NONE, Compression.GZIP, Compression.ZSTD] * 4):
        put(
            log,
            [(b"k%d" % (n % 3), b"v%d" % n), (b"j%d" % (n % 2), None), (None, b"free")],
            NOW + n,
            compression=codec,
            producer=(7, 1, 3 * n),
        )
        if n % 4 == 3:
            log.roll()
    clean_log(log, NOW + 1000)
    seen = []
    for seg in log.segments()[:-1]:
        data = seg.log_path.read_bytes()
        ours = {(p, h.base_offset): h for p, h in iter_batches(data)}
        records = MemoryRecords(data)
        pos = 0
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            h = ours[(pos, batch.base_offset)]
            assert (batch.last_offset_delta, batch.producer_id, batch.base_sequence) == (
                h.last_offset_delta,
                h.producer_id,
                h.base_sequence,
            )
            seen.extend((r.offset, r.key, r.value) for r in batch)
            pos += h.size
    assert seen == [
        (r.offset, r.key, r.value)
        for r in read_all(log)
        if r.offset < log.active_segment.base_offset
    ]
    assert len(seen) > 0
    log.close()


# -- conflicts and corrupt input ------------------------------------------------------


def test_truncation_during_a_pass_aborts_it(tmp_path, monkeypatch):
    log = sample_log(tmp_path / "p")
    real = log.replace_segments
    last_sealed = log.segments()[-2]
    cut = last_sealed.base_offset + 1

    def truncate_refill_then_swap(old, *args, **kwargs):
        # A follower truncates into the run and refills it: the last segment
        # of the run is the same object again, sealed, with other bytes.
        assert old[-1] is last_sealed
        log.truncate_to(cut)
        put(log, [(b"k1", b"after truncation")], NOW + 9000)
        log.roll()
        assert not last_sealed.active
        return real(old, *args, **kwargs)

    monkeypatch.setattr(log, "replace_segments", truncate_refill_then_swap)
    before = read_all(log)
    result = clean_log(log, NOW + 1000)
    assert result is not None and result.aborted and result.segments_cleaned == 0
    after = read_all(log)
    assert after[:-1] == [r for r in before if r.offset < cut]
    assert (after[-1].offset, after[-1].value) == (cut, b"after truncation")
    assert leftovers(tmp_path / "p") == []
    assert not (tmp_path / "p" / CLEANER_CHECKPOINT_FILE).exists()
    log.close()


def test_retention_during_a_pass_aborts_the_run(tmp_path, monkeypatch):
    log = sample_log(tmp_path / "p")
    real = log.replace_segments

    def delete_then_swap(old, *args, **kwargs):
        log.advance_log_start_offset(old[0].next_offset)
        log.delete_old_segments()
        return real(old, *args, **kwargs)

    monkeypatch.setattr(log, "replace_segments", delete_then_swap)
    result = clean_log(log, NOW + 1000)
    assert result is not None and result.aborted
    assert leftovers(tmp_path / "p") == []
    assert_reads_everywhere(log, read_all(log))
    log.close()


def test_corrupt_sealed_segment_raises_and_changes_nothing(tmp_path):
    path = tmp_path / "p"
    log = sample_log(path)
    seg = log.segments()[1]
    raw = bytearray(seg.log_path.read_bytes())
    raw[-3] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    seg.log_path.write_bytes(bytes(raw))
    files = {p.name: p.read_bytes() for p in path.iterdir() if p.suffix == ".log"}
    with pytest.raises(CorruptRecordError):
        clean_log(log, NOW + 1000)
    assert {p.name: p.read_bytes() for p in path.iterdir() if p.suffix == ".log"} == files
    assert leftovers(path) == []
    log.close_unclean()


# -- crash safety ---------------------------------------------------------------------


class SimulatedCrash(BaseException):
    """Not an Exception: cleanup handlers must not run, as in a real crash."""


_FILE_OPS = ("replace", "rename", "unlink", "remove", "rmdir", "fsync", "truncate", "ftruncate")


@contextmanager
def crash_after(steps: int) -> Iterator[list[int]]:
    """Let `steps` file operations happen; the next one, and every one after
    it (the process is dead), raises SimulatedCrash."""
    done = [0]
    originals = {name: getattr(os, name) for name in _FILE_OPS}

    def wrap(name, fn):
        def op(*args, **kwargs):
            if done[0] >= steps:
                raise SimulatedCrash(name)
            done[0] += 1
            return fn(*args, **kwargs)

        return op

    for name, fn in originals.items():
        setattr(os, name, wrap(name, fn))
    try:
        yield done
    finally:
        for name, fn in originals.items():
            setattr(os, name, fn)


def _build_and_reference(tmp_path: Path, cfg: LogConfig, build) -> tuple[Path, list, list]:
    src = tmp_path / "src"
    build(open_log(src, cfg)).close()
    shutil.copytree(src, tmp_path / "ref")
    ref = open_log(tmp_path / "ref", cfg)
    old = read_all(ref)
    clean_log(ref, NOW + 1000, force=True)
    cleaned = read_all(ref)
    ref.close()
    assert cleaned != old
    return src, old, cleaned


def _crash_and_reopen(src: Path, work: Path, cfg: LogConfig, steps: int) -> tuple[Log, bool]:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    log = open_log(work, cfg)
    crashed = False
    with crash_after(steps):
        try:
            clean_log(log, NOW + 1000, force=True)
        except SimulatedCrash:
            crashed = True
    if crashed:
        log.close_unclean()
    else:
        log.close()
    return open_log(work, cfg), crashed


def _sealed_in_one_run(log: Log) -> Log:
    ts = NOW
    for i in range(48):
        put(log, [(b"k%d" % (i % 6), None if i % 11 == 10 else b"v%d" % i)], ts)
        ts += 1
        if i % 12 == 11:
            log.roll()
    put(log, [(b"k0", b"active")], ts)
    return log


def test_crash_at_every_step_leaves_old_or_cleaned_records(tmp_path):
    cfg = compact_config()
    src, old, cleaned = _build_and_reference(tmp_path, cfg, _sealed_in_one_run)
    outcomes = []
    steps = 0
    while True:
        log, crashed = _crash_and_reopen(src, tmp_path / "work", cfg, steps)
        records = read_all(log)
        assert records in (old, cleaned), f"crash after {steps} file operations: a mix"
        assert_reads_everywhere(log, records)
        assert leftovers(tmp_path / "work") == []
        assert orphan_indexes(tmp_path / "work") == []
        outcomes.append(records == cleaned)
        # Whatever the crash left, the next pass gets to the cleaned log.
        clean_log(log, NOW + 1000, force=True)
        assert read_all(log) == cleaned
        log.close()
        if not crashed:
            break
        steps += 1
    assert steps > 10  # the sweep went through staging, the swap and the checkpoint
    assert outcomes[0] is False and outcomes[-1] is True
    # Once the commit point passed, every later crash keeps the cleaned log.
    first_new = outcomes.index(True)
    assert all(outcomes[first_new:])


def _sealed_in_many_runs(log: Log) -> Log:
    ts = NOW
    for i in range(100):
        put(log, [(b"key-%d" % (i % 9), b"x" * 40 + b"%d" % i)], ts)
        ts += 1
    return log


def test_crash_during_a_multi_run_pass_leaves_whole_runs(tmp_path):
    cfg = compact_config(segment_bytes=2048)
    src, old, cleaned = _build_and_reference(tmp_path, cfg, _sealed_in_many_runs)
    probe = open_log(src, cfg)
    bounds = [s.base_offset for s in probe.segments()]
    probe.close()
    assert len(bounds) >= 4
    states = [
        [r for r in cleaned if r.offset < b] + [r for r in old if r.offset >= b] for b in bounds
    ]
    states.append(cleaned)
    steps = 0
    seen = set()
    while True:
        log, crashed = _crash_and_reopen(src, tmp_path / "work", cfg, steps)
        records = read_all(log)
        assert records in states, f"crash after {steps} file operations: not whole runs"
        assert consumer_view(records) == consumer_view(old)
        assert_reads_everywhere(log, records)
        assert leftovers(tmp_path / "work") == []
        assert orphan_indexes(tmp_path / "work") == []
        seen.add(states.index(records))
        log.close()
        if not crashed:
            break
        steps += 1
    assert len(seen) >= 3  # crashes landed between runs, not only before and after


def test_leftover_staging_and_swap_files_are_removed_on_open(tmp_path):
    path = tmp_path / "p"
    log = sample_log(path)
    before = read_all(log)
    log.close()
    staging = path / CLEANER_DIR
    staging.mkdir()
    (staging / "00000000000000000000.log").write_bytes(b"half a segment")
    (staging / "00000000000000000000.index").write_bytes(b"\x00" * 8)
    (path / "00000000000000000000.index.swap").write_bytes(b"\x00" * 8)
    (path / "00000000000000000000.timeindex.swap").write_bytes(b"\x00" * 12)
    log = open_log(path, compact_config())
    assert leftovers(path) == []
    assert read_all(log) == before
    assert_reads_everywhere(log, before)
    log.close()


def test_failure_before_the_commit_point_keeps_the_log_usable(tmp_path, monkeypatch):
    log = sample_log(tmp_path / "p")
    before = read_all(log)
    real_replace = os.replace
    calls = [0]

    def fail_first_rename(src, dst, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 1:
            raise OSError(5, "injected I/O error")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(cleaner.os, "replace", fail_first_rename)
    with pytest.raises(OSError, match="injected"):
        clean_log(log, NOW + 1000)
    monkeypatch.undo()
    assert not log.closed
    assert read_all(log) == before
    assert leftovers(tmp_path / "p") == []
    clean_log(log, NOW + 1000)
    assert consumer_view(read_all(log)) == consumer_view(before)
    log.close()


def test_failure_after_the_commit_point_closes_the_log(tmp_path, monkeypatch):
    path = tmp_path / "p"
    log = sample_log(path)
    before = read_all(log)

    def fail(*args, **kwargs):
        raise OSError(5, "injected I/O error")

    monkeypatch.setattr(swap, "_finish", fail)
    with pytest.raises(OSError, match="injected"):
        clean_log(log, NOW + 1000)
    monkeypatch.undo()
    # The files are half swapped: serving the old segments would be a mix.
    assert log.closed
    log.close_unclean()
    reopened = open_log(path, compact_config())
    after = read_all(reopened)
    assert after == expected_after_full_clean(before, reopened.active_segment.base_offset, False)
    assert leftovers(path) == [] and orphan_indexes(path) == []
    reopened.close()

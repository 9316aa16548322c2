"""Retention: whole segments go by time (their largest timestamp, or for a
segment without timestamps its file's mtime) or by size,
oldest first, never the active segment and never past max_offset (the high
watermark); the log start offset advances and reads below it are out of
range; advance_log_start_offset (DeleteRecords) hides offsets at once."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.errors import OffsetOutOfRangeError
from lograft.storage.config import CleanupPolicy, LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log
from lograft.storage.retention import SegmentInfo, deletable_prefix

from .storage_support import FakeClock, batch_bases, batch_of, no_fsync, read_everything  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_fsync")


# -- the pure decision ---------------------------------------------------------------


def _reference(segs, now, start, retention_ms, retention_bytes, delete, max_offset):
    total = sum(s.size_bytes for s in segs)
    n = 0
    for s in segs[:-1]:
        if max_offset is not None and s.next_offset > max_offset:
            break
        below_start = s.next_offset <= start
        newest = s.largest_timestamp if s.largest_timestamp >= 0 else s.last_modified_ms
        expired = retention_ms >= 0 and newest >= 0 and (now - newest > retention_ms)
        too_big = retention_bytes >= 0 and total - s.size_bytes >= retention_bytes
        if not (below_start or (delete and (expired or too_big))):
            break
        total -= s.size_bytes
        n += 1
    return n


segments_strategy = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=10),
        st.integers(min_value=1, max_value=1000),
        st.integers(min_value=-1, max_value=10_000),
        st.integers(min_value=-1, max_value=10_000),  # file mtime
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(
    raw=segments_strategy,
    now=st.integers(min_value=0, max_value=20_000),
    start_frac=st.floats(min_value=0, max_value=1),
    retention_ms=st.integers(min_value=-1, max_value=10_000),
    retention_bytes=st.integers(min_value=-1, max_value=6000),
    delete=st.booleans(),
    hw_frac=st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
)
def test_deletable_prefix_matches_the_rules(
    raw, now, start_frac, retention_ms, retention_bytes, delete, hw_frac
):
    segs, base = [], 0
    for count, size, ts, mtime in raw:
        segs.append(SegmentInfo(base, base + count, size, ts, mtime))
        base += count
    start = int(start_frac * base)
    hw = None if hw_frac is None else int(hw_frac * base)
    n = deletable_prefix(
        segs,
        now_ms=now,
        log_start_offset=start,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        delete_enabled=delete,
        max_offset=hw,
    )
    assert n == _reference(segs, now, start, retention_ms, retention_bytes, delete, hw)
    assert n < len(segs)  # never the active segment
    if hw is not None:
        assert all(s.next_offset <= hw for s in segs[:n])
    if retention_bytes >= 0 and delete and n:
        # Size retention never takes the log below its limit on its own.
        remaining = sum(s.size_bytes for s in segs[n:])
        last = segs[n - 1]
        newest = last.retention_timestamp
        expired = retention_ms >= 0 and newest >= 0 and (now - newest > retention_ms)
        if not expired and last.next_offset > start:
            assert remaining >= retention_bytes


# -- through a Log ---------------------------------------------------------------------


def _log(tmp_path, clock, **cfg) -> Log:
    config = LogConfig(segment_bytes=1024, segment_index_bytes=4096, **cfg)
    return Log(tmp_path / "p", config, pool=FilePool(16), clock=clock)


def _fill(log, clock, segments, *, step_ms=1000):
    """One segment per step: each ~700-byte batch rolls the previous one."""
    for i in range(segments):
        log.append(batch_of(2, value_size=300, timestamp_ms=clock.now, tag=i)[0], leader_epoch=0)
        clock.advance(step_ms)
    assert log.segment_count == segments


def test_time_retention_by_largest_timestamp(tmp_path):
    clock = FakeClock(1_000_000)
    log = _log(tmp_path, clock, retention_ms=4500)
    _fill(log, clock, 6)  # segment i holds timestamps 1_000_000 + 1000 i (+0, +1)
    # now = start + 6000: segments whose newest record is > 4500 ms old go.
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments()] == [4, 6, 8, 10]
    assert log.log_start_offset == 4
    clock.advance(100_000)
    assert log.delete_old_segments() == 3  # all but the active segment
    assert log.segment_count == 1
    assert log.log_start_offset == 10
    assert [r.offset for r in read_everything(log)] == [10, 11]


def test_a_recent_record_keeps_an_old_segment(tmp_path):
    clock = FakeClock(1_000_000)
    log = _log(tmp_path, clock, retention_ms=1000)
    old_then_new = batch_of(2, value_size=300, timestamp_ms=clock.now - 50_000)[0]
    log.append(old_then_new, leader_epoch=0)  # timestamps now-50000, now-49999
    log.append(batch_of(2, value_size=300, timestamp_ms=clock.now + 10_000)[0], leader_epoch=0)
    log.append(batch_of(1, value_size=300, timestamp_ms=clock.now)[0], leader_epoch=0)
    assert log.segment_count == 3
    # The first segment's newest record is old: it goes; the second's is in the future.
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 2


def test_segments_without_timestamps_go_by_their_file_mtime(tmp_path):
    """As Kafka's LogSegment.largestTimestamp: a segment whose batches carry
    no timestamp is as old as its .log file."""
    clock = FakeClock(1_000_000)
    log = _log(tmp_path, clock, retention_ms=1000)
    log.append(batch_of(2, value_size=300, timestamp_ms=-1 - 1)[0], leader_epoch=0)
    log.roll()
    log.append(batch_of(2, value_size=300, timestamp_ms=clock.now - 5000)[0], leader_epoch=0)
    log.roll()
    log.append(batch_of(1)[0], leader_epoch=0)
    # Timestamps -2, -1: largest is -1 (none).
    first = log.segments()[0]
    assert first.largest_timestamp == -1
    os.utime(first.log_path, ns=(0, (clock.now - 500) * 1_000_000))
    assert log.delete_old_segments() == 0  # modified 500 ms ago: kept, and so is the next
    os.utime(first.log_path, ns=(0, (clock.now - 1001) * 1_000_000))
    assert log.delete_old_segments() == 2  # by its mtime, then the next by its timestamp
    assert log.log_start_offset == 4


def test_a_segment_without_timestamps_or_file_is_kept():
    info = SegmentInfo(0, 5, 100, largest_timestamp=-1, last_modified_ms=-1)
    active = SegmentInfo(5, 6, 100, largest_timestamp=10)
    kwargs = {"log_start_offset": 0, "retention_bytes": -1, "delete_enabled": True}
    assert deletable_prefix([info, active], now_ms=10**12, retention_ms=0, **kwargs) == 0


def test_size_retention(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, retention_bytes=2000, retention_ms=-1)
    _fill(log, clock, 6)
    sizes = [s.size for s in log.segments()]
    assert log.delete_old_segments() > 0
    kept = [s.size for s in log.segments()]
    assert sum(kept) >= 2000
    assert sum(kept) - kept[0] < 2000 or log.segment_count == 1
    assert sizes[-len(kept) :] == kept


def test_never_the_active_segment(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, retention_ms=0, retention_bytes=0)
    log.append(batch_of(3)[0], leader_epoch=0)
    clock.advance(10_000)
    assert log.delete_old_segments() == 0
    assert log.log_end_offset == 3
    assert log.log_start_offset == 0


def test_never_past_the_high_watermark(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, retention_ms=0)
    _fill(log, clock, 6)  # segments at 0, 2, 4, 6, 8, 10
    clock.advance(10_000)
    assert log.delete_old_segments(max_offset=5) == 2  # [0, 2) and [2, 4) end <= 5
    assert log.log_start_offset == 4
    assert log.delete_old_segments(max_offset=5) == 0
    assert log.delete_old_segments(max_offset=8) == 2
    assert log.log_start_offset == 8


def test_reads_below_the_start_are_out_of_range_with_the_valid_range(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, retention_ms=0)
    _fill(log, clock, 4)
    clock.advance(10_000)
    log.delete_old_segments()
    assert log.log_start_offset == 6
    for offset in (0, 5):
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(offset, 1000)
        assert info.value.code == "OFFSET_OUT_OF_RANGE"
        assert info.value.details == {
            "offset": offset,
            "log_start_offset": 6,
            "log_end_offset": 8,
        }
    assert batch_bases(log.read(6, 1000))[0][0] == 6
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(9, 1000)
    assert info.value.details["log_end_offset"] == 8


def test_retention_survives_reopen(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, retention_ms=0)
    _fill(log, clock, 5)
    clock.advance(10_000)
    log.delete_old_segments()
    log.close()
    again = _log(tmp_path, clock, retention_ms=0)
    assert again.log_start_offset == 8
    assert [s.base_offset for s in again.segments()] == [8]
    with pytest.raises(OffsetOutOfRangeError):
        again.read(7, 100)


def test_advance_log_start_offset(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, retention_ms=-1, cleanup_policy=CleanupPolicy.COMPACT)
    _fill(log, clock, 5)  # segments at 0, 2, 4, 6, 8
    log.advance_log_start_offset(5)
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    # The batch holding 5 starts at 4: it is returned whole, the consumer skips 4.
    assert batch_bases(log.read(5, 100))[0][:2] == (4, 5)
    assert [r.offset for r in read_everything(log)] == list(range(5, 10))
    log.advance_log_start_offset(3)  # never backwards
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(11)
    # Whole segments below the start go at the next pass, even when the
    # cleanup policy deletes nothing by time or size.
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments()] == [4, 6, 8]
    assert log.log_start_offset == 5
    log.close()
    again = _log(tmp_path, clock, retention_ms=-1, cleanup_policy=CleanupPolicy.COMPACT)
    assert again.log_start_offset == 5
    assert again.epochs.entries() == [(0, 5)]


def test_advance_to_the_end_then_append(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock)
    log.append(batch_of(3)[0], leader_epoch=0)
    log.advance_log_start_offset(3)
    assert log.read(3, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    log.append(batch_of(2)[0], leader_epoch=1)
    assert [r.offset for r in read_everything(log)] == [3, 4]


def test_truncation_through_the_batch_holding_the_log_start(tmp_path):
    """The log start must never pass the LEO: when truncation removes the
    batch that holds the log start, the log restarts empty at that batch's
    base, where the follower will append the leader's copy again."""
    clock = FakeClock()
    log = _log(tmp_path, clock)
    log.append(batch_of(1)[0], leader_epoch=0)  # 0
    log.append(batch_of(4)[0], leader_epoch=0)  # 1-4
    log.append(batch_of(1)[0], leader_epoch=0)  # 5
    log.advance_log_start_offset(2)
    log.truncate_to(3)  # the batch 1-4 straddles 3: it goes whole
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (1, 1, 0)
    assert log.read(1, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    again = batch_of(4)[0]
    log.append_as_follower(_rebase(again, 1))
    assert [r.offset for r in read_everything(log)] == [1, 2, 3, 4]
    log.close()
    reopened = _log(tmp_path, clock)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1, 5)


def _rebase(blob: bytes, base: int) -> bytes:
    return base.to_bytes(8, "big") + blob[8:]

"""Flush policies and the recovery point, with an injected clock and os.fsync
spied on: every_batch fsyncs before append returns, interval_ms when
maybe_flush finds the interval passed, none only sealed segments (and never
on the append path); close marks the shutdown clean; an unclean open
re-validates from the recovery point and does not move it past data it did
not fsync."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from lograft.storage import checkpoint
from lograft.storage.config import FlushPolicy, LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE, Log

from .storage_support import FakeClock, batch_of, read_everything


class FsyncSpy:
    """Records the path of every fsynced descriptor; fsyncs for real."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.paths: list[str] = []

    def __call__(self, fd: int) -> None:
        self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        self.real(fd)

    def names(self) -> list[str]:
        return [Path(p).name for p in self.paths]

    def clear(self) -> None:
        self.paths.clear()


@pytest.fixture
def spy(monkeypatch):
    s = FsyncSpy()
    monkeypatch.setattr(os, "fsync", s)
    return s


def _log(tmp_path, clock, policy, **cfg) -> Log:
    settings = {"segment_bytes": 1024, "segment_index_bytes": 4096, **cfg}
    config = LogConfig(flush_policy=policy, **settings)
    return Log(tmp_path / "p", config, pool=FilePool(16), clock=clock)


def _append(log, n=1, value_size=600):
    """One batch of ~680 bytes: with 1024-byte segments, one batch each."""
    return log.append(batch_of(n, value_size=value_size)[0], leader_epoch=0)


def test_every_batch_fsyncs_before_append_returns(tmp_path, spy):
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.EVERY_BATCH)
    _append(log)  # the first append assigns epoch 0 (checkpoint write)
    for _ in range(6):
        spy.clear()
        info = _append(log)
        assert log.recovery_point == log.log_end_offset == info.last_offset + 1
        assert log.active_segment.log_path.name in spy.names()
    assert log.segment_count > 2


def test_none_never_fsyncs_on_the_append_path(tmp_path, spy):
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.NONE)
    _append(log)
    spy.clear()
    for _ in range(10):
        _append(log)  # rolls several segments
    assert log.segment_count > 3
    assert spy.paths == []
    assert log.recovery_point == 0


def test_none_flushes_sealed_segments_only(tmp_path, spy):
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.NONE)
    for _ in range(6):
        _append(log)
    clock.advance(10 * 60_000)
    spy.clear()
    assert log.maybe_flush()
    active = log.active_segment
    assert log.recovery_point == active.base_offset < log.log_end_offset
    sealed = {s.log_path.name for s in log.segments() if s is not active}
    assert sealed <= set(spy.names())
    assert active.log_path.name not in spy.names()
    assert checkpoint.read_offset(tmp_path / "p" / RECOVERY_POINT_FILE) == active.base_offset
    spy.clear()
    assert not log.maybe_flush()  # nothing sealed is dirty any more
    assert spy.paths == []


def test_interval_flush_follows_the_clock(tmp_path, spy):
    clock = FakeClock()
    log = _log(
        tmp_path, clock, FlushPolicy.INTERVAL_MS, segment_bytes=1 << 20, flush_interval_ms=1000
    )
    _append(log)
    spy.clear()
    clock.advance(999)
    assert not log.maybe_flush()
    assert spy.paths == []
    assert log.recovery_point == 0
    clock.advance(1)
    assert log.maybe_flush()
    assert log.recovery_point == log.log_end_offset == 1
    assert log.active_segment.log_path.name in spy.names()
    assert checkpoint.read_offset(tmp_path / "p" / RECOVERY_POINT_FILE) == 1
    # Due again, but nothing is dirty.
    clock.advance(5000)
    spy.clear()
    assert not log.maybe_flush()
    assert spy.paths == []
    # The interval counts from the last flush (as Kafka's flush.ms).
    _append(log)
    assert log.maybe_flush()
    assert log.recovery_point == 2
    _append(log)
    clock.advance(500)
    assert not log.maybe_flush()
    assert log.recovery_point == 2
    clock.advance(500)
    assert log.maybe_flush()
    assert log.recovery_point == 3


def test_close_marks_clean_and_the_next_open_is_clean(tmp_path, spy):
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.NONE)
    for _ in range(5):
        _append(log)
    log.close()
    directory = tmp_path / "p"
    assert (directory / CLEAN_SHUTDOWN_FILE).exists()
    assert {s.log_path.name for s in log.segments()} <= set(spy.names())
    assert checkpoint.read_offset(directory / RECOVERY_POINT_FILE) == 5
    again = _log(tmp_path, clock, FlushPolicy.NONE)
    assert again.recovery.clean_shutdown
    assert again.recovery.segments_recovered == 0
    assert again.recovery_point == 5
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists()  # removed while open
    assert [r.offset for r in read_everything(again)] == list(range(5))


def test_unclean_open_revalidates_from_the_recovery_point(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.NONE)
    for _ in range(4):
        _append(log)
    log.flush(sealed_only=True)
    rp = log.recovery_point
    assert rp == log.active_segment.base_offset == 3
    for _ in range(3):
        _append(log)
    bases = [s.base_offset for s in log.segments()]
    log.close_unclean()
    again = _log(tmp_path, clock, FlushPolicy.NONE)
    report = again.recovery
    assert not report.clean_shutdown
    # Segments wholly below the recovery point are trusted, the rest re-read.
    assert report.segments_recovered == len([b for b in bases if b >= rp])
    assert report.segments_loaded == len(bases)
    assert again.log_end_offset == 7


def test_unclean_open_does_not_move_the_recovery_point_past_unsynced_data(tmp_path, spy):
    """Recovery re-reads what the page cache holds; until it is fsynced, the
    recovery point must stay where the checkpoint said, or a second crash
    (of the machine) could lose data a clean-looking checkpoint vouches for."""
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.NONE)
    for _ in range(4):
        _append(log)
    log.flush(sealed_only=True)
    for _ in range(3):
        _append(log)
    log.close_unclean()
    again = _log(tmp_path, clock, FlushPolicy.NONE)
    assert again.recovery_point == 3
    recovered = [s for s in again.segments() if s.base_offset >= 3]
    # A second crash right away re-validates the same segments.
    again.close_unclean()
    third = _log(tmp_path, clock, FlushPolicy.NONE)
    assert third.recovery.segments_recovered == len(recovered)
    # Closing cleanly fsyncs what recovery re-read, then moves the point.
    spy.clear()
    third.close()
    assert {s.log_path.name for s in recovered} <= set(spy.names())
    assert checkpoint.read_offset(tmp_path / "p" / RECOVERY_POINT_FILE) == 7


def test_flush_then_crash_keeps_the_recovery_point(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.INTERVAL_MS, flush_interval_ms=10)
    rnd = random.Random(1)
    for _ in range(5):
        log.append(batch_of(rnd.randrange(1, 4), value_size=200)[0], leader_epoch=0)
        clock.advance(10)
        log.maybe_flush()
    leo = log.log_end_offset
    assert log.recovery_point == leo
    log.close_unclean()
    again = _log(tmp_path, clock, FlushPolicy.INTERVAL_MS, flush_interval_ms=10)
    assert again.recovery_point == leo
    # Only the active segment is re-read: everything before it was flushed.
    assert again.recovery.segments_recovered == 1


def test_a_roll_during_a_flush_does_not_break_it(tmp_path, monkeypatch):
    """The flusher fsyncs outside the log's lock; an append that rolls (and
    so closes the active segment's descriptor and index mappings) can run in
    the middle. Made deterministic: the roll happens inside the first fsync."""
    clock = FakeClock()
    log = _log(tmp_path, clock, FlushPolicy.INTERVAL_MS, flush_interval_ms=1)
    _append(log)
    active = log.active_segment.log_path
    real = os.fsync
    rolled, synced = [], []

    def fsync(fd):
        if not rolled and os.readlink(f"/proc/self/fd/{fd}") == str(active):
            rolled.append(_append(log))  # seals the segment being flushed
            assert log.segment_count == 2
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))  # what really gets synced
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    log.flush()
    assert rolled
    assert str(active) in synced
    assert log.recovery_point == 1  # the LEO when the flush began
    clock.advance(10)
    assert log.maybe_flush()
    assert log.recovery_point == log.log_end_offset == 2
    log.close()
    again = _log(tmp_path, clock, FlushPolicy.INTERVAL_MS)
    assert [r.offset for r in read_everything(again)] == [0, 1]

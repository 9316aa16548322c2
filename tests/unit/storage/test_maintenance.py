"""The maintenance thread applies flush policy, retention and compaction."""

from __future__ import annotations

import time

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import CleanupPolicy, FlushPolicy, LogConfig
from lograft.storage.log import Log
from lograft.storage.maintenance import LogMaintainer, MaintenanceConfig


class FakeClock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _batch(ts: int, n: int = 10) -> bytes:
    return build_batch([RecordInput(b"x" * 100, b"k") for _ in range(n)], timestamp_ms=ts)


def test_interval_flush_advances_recovery_point_only_when_due(tmp_path):
    clock = FakeClock()
    cfg = LogConfig(flush_policy=FlushPolicy.INTERVAL_MS, flush_interval_ms=1000)
    log = Log(tmp_path / "p", cfg, clock=clock)
    m = LogMaintainer(clock=clock)
    m.add(log)
    log.append(_batch(clock.now), leader_epoch=0)
    m.run_once()
    assert log.recovery_point == 0
    clock.now += 1000
    m.run_once()
    assert log.recovery_point == log.log_end_offset == 10
    assert m.stats.flushes == 1
    log.close()


def test_none_policy_flushes_sealed_segments_after_roll(tmp_path):
    clock = FakeClock()
    log = Log(tmp_path / "p", LogConfig(segment_bytes=2048), clock=clock)
    m = LogMaintainer(clock=clock)
    m.add(log)
    for _ in range(5):
        log.append(_batch(clock.now), leader_epoch=0)
    assert log.segment_count > 1
    m.run_once()
    assert log.recovery_point == log.active_segment.base_offset > 0
    log.close()


def test_retention_runs_on_schedule_and_respects_high_watermark(tmp_path):
    clock = FakeClock()
    cfg = LogConfig(segment_bytes=2048, retention_ms=10_000)
    log = Log(tmp_path / "p", cfg, clock=clock)
    for _ in range(6):
        log.append(_batch(clock.now), leader_epoch=0)
    hw = {"value": 0}
    m = LogMaintainer(MaintenanceConfig(retention_check_interval_ms=5_000), clock=clock)
    m.add(log, lambda: hw["value"])
    clock.now += 20_000
    m.run_once()
    assert log.log_start_offset == 0, "nothing below the high watermark yet"
    hw["value"] = log.log_end_offset
    clock.now += 5_000
    m.run_once()
    assert m.stats.segments_deleted >= 1
    assert log.segment_count == 1
    assert log.log_start_offset == log.active_segment.base_offset
    log.close()


def test_a_failing_log_is_counted_and_others_still_served(tmp_path):
    clock = FakeClock()
    good = Log(tmp_path / "good", LogConfig(segment_bytes=2048), clock=clock)

    def broken(_log, _now, _hw):
        raise RuntimeError("boom")

    m = LogMaintainer(clock=clock, compactor=broken)
    bad = Log(tmp_path / "bad", LogConfig(cleanup_policy=CleanupPolicy.COMPACT), clock=clock)
    m.add(bad)
    m.add(good)
    for _ in range(4):
        good.append(_batch(clock.now), leader_epoch=0)
    m.run_once(force_all=True)
    assert m.stats.errors == 1
    assert good.recovery_point == good.active_segment.base_offset > 0
    good.close()
    bad.close()
    m.run_once(force_all=True)  # closed logs are dropped by the next full sweep
    assert m._snapshot() == []


def test_thread_starts_and_stops(tmp_path):
    cfg = LogConfig(flush_policy=FlushPolicy.INTERVAL_MS, flush_interval_ms=1)
    log = Log(tmp_path / "p", cfg)
    m = LogMaintainer(MaintenanceConfig(flush_check_interval_ms=5))
    m.add(log)
    m.start()
    try:
        log.append(_batch(1), leader_epoch=0)
        deadline = time.monotonic() + 10
        while log.recovery_point < 10 and time.monotonic() < deadline:
            time.sleep(0.005)  # polling a condition with a deadline
        assert log.recovery_point == 10
    finally:
        m.stop()
        log.close()
    assert m._thread is None


def test_compaction_is_bounded_by_the_high_watermark(tmp_path):
    clock = FakeClock()
    log = Log(tmp_path / "p", LogConfig(cleanup_policy=CleanupPolicy.COMPACT), clock=clock)
    seen = []
    m = LogMaintainer(clock=clock, compactor=lambda lg, now, hw: seen.append(hw))
    m.add(log, lambda: 42)
    m.run_once(force_all=True)
    assert seen == [42]
    log.close()

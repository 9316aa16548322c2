"""The maintenance thread checks the flush policy of logs written since their
last check, not of every log on every pass; a full sweep still visits all."""

from __future__ import annotations

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import FlushPolicy, LogConfig
from lograft.storage.log import Log
from lograft.storage.maintenance import LogMaintainer, MaintenanceConfig

SWEEP_MS = 10_000


class FakeClock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(ts: int) -> bytes:
    return build_batch([RecordInput(b"x" * 100, b"k") for _ in range(10)], timestamp_ms=ts)


def setup(tmp_path, config: LogConfig, count: int = 50):
    clock = FakeClock()
    m = LogMaintainer(MaintenanceConfig(flush_sweep_interval_ms=SWEEP_MS), clock=clock)
    logs = [Log(tmp_path / f"p{i}", config, clock=clock) for i in range(count)]
    for target in logs:
        m.add(target)
    return clock, m, logs


def test_idle_logs_are_not_checked_between_sweeps(tmp_path):
    clock, m, logs = setup(tmp_path, LogConfig(segment_bytes=2048))
    m.run_once()
    assert m.flush_checks == 50  # each newly added log is checked once
    clock.now += 200
    m.run_once()
    assert m.flush_checks == 50  # nothing written: nothing checked
    for _ in range(5):  # rolls: a sealed segment to flush under the none policy
        logs[7].append(batch(clock.now), leader_epoch=0)
    clock.now += 200
    m.run_once()
    assert m.flush_checks == 51
    assert logs[7].recovery_point == logs[7].active_segment.base_offset > 0
    clock.now += 200
    m.run_once()
    assert m.flush_checks == 51  # the mark was dropped with the check
    clock.now += SWEEP_MS
    m.run_once()
    assert m.flush_checks == 101  # the sweep visits every log
    for target in logs:
        target.close()


def test_an_interval_log_stays_marked_until_its_write_is_due(tmp_path):
    config = LogConfig(flush_policy=FlushPolicy.INTERVAL_MS, flush_interval_ms=1000)
    clock, m, logs = setup(tmp_path, config, count=3)
    m.run_once()
    clock.now += 1000  # past every log's last flush time
    logs[1].append(batch(clock.now), leader_epoch=0)
    clock.now += 1
    m.run_once()  # the log's last flush is due, so it flushes at once
    assert logs[1].recovery_point == 10
    logs[1].append(batch(clock.now), leader_epoch=0)
    checks = m.flush_checks
    for _ in range(4):  # not due yet: checked on every pass, not flushed
        clock.now += 200
        m.run_once()
    assert logs[1].recovery_point == 10
    assert m.flush_checks == checks + 4
    clock.now += 200
    m.run_once()
    assert logs[1].recovery_point == 20  # due 1,000 ms after the previous flush
    clock.now += 200
    m.run_once()
    assert m.flush_checks == checks + 5  # flushed: no longer marked
    for target in logs:
        target.close()


def test_a_removed_log_is_no_longer_marked(tmp_path):
    clock, m, logs = setup(tmp_path, LogConfig(), count=1)
    m.remove(logs[0])
    assert logs[0].on_write is None
    logs[0].append(batch(clock.now), leader_epoch=0)
    m.run_once(force_all=True)
    assert m.flush_checks == 0
    logs[0].close()

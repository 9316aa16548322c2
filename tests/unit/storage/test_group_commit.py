"""`flush_policy = group_commit` in the log (`Log.commit`), and the power-loss
test mode (lograft/power_loss.py) that proves what it promises: after
a simulated power cut the log holds exactly what a commit covered, across
rolls (the new segment's name is fsynced with its directory), truncations and
a reopen; under `none` the unsynced batches are gone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lograft import power_loss
from lograft.storage.config import FlushPolicy, LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import batch_of, read_everything


@pytest.fixture
def recorder(tmp_path, monkeypatch) -> Path:
    where = tmp_path / "record"
    monkeypatch.setattr(power_loss, "RECORDER", power_loss.Recorder(where))
    return where


def _log(root: Path, policy: FlushPolicy = FlushPolicy.GROUP_COMMIT) -> Log:
    config = LogConfig(flush_policy=policy, segment_bytes=2048, segment_index_bytes=4096)
    return Log(root / "t-0", config, pool=FilePool(16))


def _append(log: Log, count: int) -> None:
    for _ in range(count):
        log.append(batch_of(2, value_size=300)[0], leader_epoch=0)


def _cut(log: Log, record: Path, root: Path) -> power_loss.CutReport:
    log.close_unclean()  # the process dies: nothing flushed, nothing marked clean
    return power_loss.cut_power(record, root)


def test_commit_makes_every_append_before_it_durable_with_one_sync(tmp_path, monkeypatch):
    log = _log(tmp_path)
    syncs: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd)))
    _append(log, 2)
    assert log.durable_offset == 0  # appends do not sync under this policy
    assert log.commit() == log.log_end_offset == 4
    assert len(syncs) == 1, "one fdatasync covered both appends"
    assert log.commit() == 4 and len(syncs) == 1, "nothing new: no sync"
    log.close()


def test_after_a_power_cut_the_log_holds_exactly_what_was_committed(tmp_path, recorder):
    root = tmp_path / "logs"
    root.mkdir()
    log = _log(root)
    _append(log, 5)  # ~680 bytes each: rolls into new segments on the way
    assert log.segment_count > 1
    committed = log.commit()
    _append(log, 3)
    assert log.log_end_offset > committed
    report = _cut(log, recorder, root)
    assert report.bytes_dropped > 0
    reopened = _log(root)
    assert reopened.log_end_offset == committed
    assert [r.offset for r in read_everything(reopened)] == list(range(committed))
    reopened.close()


def test_a_segment_rolled_after_the_last_commit_disappears_with_its_name(tmp_path, recorder):
    root = tmp_path / "logs"
    root.mkdir()
    log = _log(root)
    _append(log, 1)
    committed = log.commit()
    segments = log.segment_count
    _append(log, 4)  # rolls: new files whose names no fsync of the directory covered
    assert log.segment_count > segments
    report = _cut(log, recorder, root)
    assert any(p.endswith(".log") for p in report.removed), report
    reopened = _log(root)
    assert reopened.log_end_offset == committed
    assert reopened.segment_count == segments
    reopened.close()


def test_a_truncation_then_new_appends_commit_the_new_bytes(tmp_path, recorder):
    root = tmp_path / "logs"
    root.mkdir()
    log = _log(root)
    _append(log, 2)
    log.commit()
    log.truncate_to(2)
    assert log.durable_offset == 2
    _append(log, 1)
    new = log.read(2, 1 << 20)
    assert log.commit() == log.log_end_offset
    _cut(log, recorder, root)
    reopened = _log(root)
    assert reopened.log_end_offset == 4
    assert reopened.read(2, 1 << 20) == new
    reopened.close()


def test_under_none_a_power_cut_loses_what_was_never_flushed(tmp_path, recorder):
    root = tmp_path / "logs"
    root.mkdir()
    log = _log(root, FlushPolicy.NONE)
    _append(log, 2)
    assert log.durable_offset == 0
    _cut(log, recorder, root)
    reopened = _log(root, FlushPolicy.NONE)
    assert reopened.log_end_offset == 0
    reopened.close()


def test_a_reopened_log_counts_as_durable_only_its_recovery_point(tmp_path):
    log = _log(tmp_path)
    _append(log, 2)
    log.close_unclean()  # SIGKILL: the page cache may hold it, the disk may not
    reopened = _log(tmp_path)
    assert reopened.log_end_offset == 4
    assert reopened.durable_offset == reopened.recovery_point == 0
    assert reopened.commit() == 4
    reopened.close()

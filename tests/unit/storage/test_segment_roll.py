"""When a new segment starts: on segment_bytes, on segment_ms (also across a
reopen), when the index is full, and when offsets would overflow the index's
32-bit relative offsets; never leaving an empty sealed segment behind."""

from __future__ import annotations

import pytest

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import FakeClock, batch_of, no_fsync, read_everything  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_fsync")


def _log(tmp_path, clock, **cfg) -> Log:
    return Log(tmp_path / "p", LogConfig(**cfg), pool=FilePool(8), clock=clock)


def test_roll_on_segment_bytes(tmp_path):
    log = _log(tmp_path, FakeClock(), segment_bytes=2000)
    blob = batch_of(1, value_size=600)[0]
    sizes = []
    for _ in range(7):
        log.append(blob, leader_epoch=0)
        sizes.append([s.size for s in log.segments()])
    # Three 671-byte batches exceed 2000 bytes: two per segment.
    assert [s.size for s in log.segments()] == [2 * len(blob)] * 3 + [len(blob)]
    assert [s.base_offset for s in log.segments()] == [0, 2, 4, 6]


def test_a_batch_larger_than_a_segment_gets_one_of_its_own(tmp_path):
    log = _log(tmp_path, FakeClock(), segment_bytes=1024, max_message_bytes=10_000)
    log.append(batch_of(1, value_size=100)[0], leader_epoch=0)
    log.append(batch_of(1, value_size=3000)[0], leader_epoch=0)
    log.append(batch_of(1, value_size=100)[0], leader_epoch=0)
    assert [s.base_offset for s in log.segments()] == [0, 1, 2]


def test_roll_on_segment_ms(tmp_path):
    clock = FakeClock()
    log = _log(tmp_path, clock, segment_ms=1000)
    log.append(batch_of(1, timestamp_ms=clock.now)[0], leader_epoch=0)
    clock.advance(1000)
    log.append(batch_of(1, timestamp_ms=clock.now)[0], leader_epoch=0)
    assert log.segment_count == 1
    clock.advance(1)
    log.append(batch_of(1, timestamp_ms=clock.now)[0], leader_epoch=0)
    assert [s.base_offset for s in log.segments()] == [0, 2]


@pytest.mark.parametrize("clean", [True, False])
def test_segment_age_survives_a_reopen(tmp_path, clean):
    """A restart must not reset a segment's age, or a low-traffic log that
    restarts more often than segment_ms never rolls, and time retention
    (which never deletes the active segment) never frees it."""
    clock = FakeClock()
    log = _log(tmp_path, clock, segment_ms=1000)
    log.append(batch_of(1, timestamp_ms=clock.now)[0], leader_epoch=0)
    for _ in range(3):
        clock.advance(600)
        if clean:
            log.close()
        else:
            log.close_unclean()
        log = _log(tmp_path, clock, segment_ms=1000)
    log.append(batch_of(1, timestamp_ms=clock.now)[0], leader_epoch=0)
    assert [s.base_offset for s in log.segments()] == [0, 1]


def test_roll_when_the_index_is_full(tmp_path):
    log = _log(tmp_path, FakeClock(), segment_index_bytes=4096, index_interval_bytes=0)
    blob = build_batch([RecordInput(b"v")], timestamp_ms=1)
    for _ in range(700):
        log.append(blob, leader_epoch=0)
    # 512 offset-index entries (and 341 time entries) per segment at most.
    assert log.segment_count >= 2
    assert all(s.index.entries <= 512 for s in log.segments())
    assert [r.offset for r in read_everything(log)] == list(range(700))


def test_roll_before_relative_offsets_overflow(tmp_path):
    log = _log(tmp_path, FakeClock())
    far = 1 << 31
    buf = build_batch([RecordInput(b"a")], timestamp_ms=1, base_offset=0) + build_batch(
        [RecordInput(b"b")], timestamp_ms=1, base_offset=10
    )
    log.append_as_follower(buf)
    log.append_as_follower(build_batch([RecordInput(b"c")], timestamp_ms=1, base_offset=far + 5))
    assert [s.base_offset for s in log.segments()] == [0, far + 5]
    assert [r.offset for r in read_everything(log)] == [0, 10, far + 5]
    log.close()
    again = _log(tmp_path, FakeClock())
    assert [r.offset for r in read_everything(again)] == [0, 10, far + 5]


def test_rolling_an_empty_segment_leaves_nothing_behind(tmp_path):
    log = _log(tmp_path, FakeClock())
    log.append(batch_of(2)[0], leader_epoch=0)
    log.roll()
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments()] == [0, 2]
    assert sorted(p.name for p in (tmp_path / "p").glob("*.log")) == [
        "00000000000000000000.log",
        "00000000000000000002.log",
    ]

"""Bad input and faults. Each malformed append gets its typed error and
nothing on disk changes (every file's bytes and the LEO are compared before
and after). A disk that fills up mid-write (ENOSPC from os.pwrite or
os.pwritev) fails the append with KAFKA_STORAGE_ERROR and leaves the log
readable and consistent up to the last complete batch, before and after
reopening."""

from __future__ import annotations

import errno
import os
import random
import struct

import msgspec.structs
import pytest

from lograft.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    StorageError,
    UnsupportedCompressionError,
)
from lograft.protocol.batch import CRC_POS, HEADER_SIZE, RecordInput, build_batch, compute_crc
from lograft.protocol.compression import Compression
from lograft.storage import checkpoint
from lograft.storage import segment as segment_module
from lograft.storage.config import FlushPolicy, LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import (
    FakeClock,
    LogHarness,
    batch_of,
    read_everything,
    segment_logs,
    snapshot_dir,
)

CONFIG = LogConfig(
    segment_bytes=2048, segment_index_bytes=4096, index_interval_bytes=100, max_message_bytes=1500
)


@pytest.fixture
def harness(tmp_path):
    h = LogHarness(tmp_path / "p", CONFIG)
    rnd = random.Random(7)
    for _ in range(10):
        h.append([3], rnd, value_size=100)
    assert h.log.segment_count >= 2
    return h


def _refresh_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, CRC_POS, compute_crc(data))
    return bytes(data)


def _three(**kw) -> bytearray:
    return bytearray(
        build_batch([RecordInput(b"value %d" % i, b"k") for i in range(3)], timestamp_ms=9, **kw)
    )


def _with_header_field(fmt: str, pos: int, value: int) -> bytes:
    data = _three()
    struct.pack_into(fmt, data, pos, value)
    return _refresh_crc(data)


def _bad_crc() -> bytes:
    data = _three()
    data[-1] ^= 0x01
    return bytes(data)


def _wrong_magic() -> bytes:
    data = _three()
    data[16] = 1  # magic lies outside the CRC
    return bytes(data)


def _length(value: int) -> bytes:
    data = _three()
    struct.pack_into(">i", data, 8, value)
    return bytes(data)


def _deltas(deltas, last) -> bytes:
    return build_batch(
        [RecordInput(b"v%d" % i) for i in range(len(deltas))],
        timestamp_ms=9,
        offset_deltas=deltas,
        last_offset_delta=last,
    )


def _bad_record_structure() -> bytes:
    # The first record's key length (a varint after length, attributes,
    # timestampDelta, offsetDelta) claims 60 bytes inside a small record.
    data = _three()
    assert data[HEADER_SIZE + 4] == 2  # key length 1 ("k"), zigzag
    data[HEADER_SIZE + 4] = 120
    return _refresh_crc(data)


def _garbage_compressed() -> bytes:
    data = bytearray(
        build_batch([RecordInput(b"x" * 50)], timestamp_ms=1, compression=Compression.ZSTD)
    )
    data[HEADER_SIZE + 6 :] = b"\x55" * (len(data) - HEADER_SIZE - 6)
    return _refresh_crc(data)


def _snappy() -> bytes:
    data = _three()
    struct.pack_into(">h", data, 21, 2)
    return _refresh_crc(data)


BAD = {
    # name: (bytes, error class)
    "too-large": (build_batch([RecordInput(b"x" * 1500)], timestamp_ms=1), RecordTooLargeError),
    "empty": (b"", InvalidRecordError),
    "bad-crc": (_bad_crc(), CorruptRecordError),
    "wrong-magic": (_wrong_magic(), CorruptRecordError),
    "length-below-header": (_length(48), CorruptRecordError),
    "length-negative": (_length(-5), CorruptRecordError),
    "length-past-the-buffer": (_length(len(_three()) - 11), CorruptRecordError),
    "shorter-than-a-prefix": (bytes(_three()[:11]), CorruptRecordError),
    "shorter-than-a-header": (bytes(_three()[:40]), CorruptRecordError),
    "cut-in-the-records": (bytes(_three()[:-3]), CorruptRecordError),
    "count-above-last-delta": (_with_header_field(">i", 57, 4), InvalidRecordError),
    "count-below-last-delta": (_with_header_field(">i", 57, 2), InvalidRecordError),
    "count-zero": (_with_header_field(">i", 57, 0), InvalidRecordError),
    "last-delta-negative": (_with_header_field(">i", 23, -1), InvalidRecordError),
    "deltas-not-monotonic": (_deltas([0, 2, 1], 2), InvalidRecordError),
    "deltas-repeat": (_deltas([0, 1, 1], 2), InvalidRecordError),
    "deltas-with-a-gap": (_deltas([0, 1, 3], 3), InvalidRecordError),
    "delta-past-last": (_deltas([0, 1, 3], 2), InvalidRecordError),
    "deltas-not-from-zero": (_deltas([1, 2, 3], 3), InvalidRecordError),
    "record-field-overrun": (_bad_record_structure(), CorruptRecordError),
    "compressed-garbage": (_garbage_compressed(), CorruptRecordError),
    "snappy": (_snappy(), UnsupportedCompressionError),
    "trailing-short-garbage": (bytes(_three()) + b"\x00\x01\x02", CorruptRecordError),
    "trailing-long-garbage": (bytes(_three()) + bytes(range(70)), CorruptRecordError),
    "good-then-bad": (bytes(_three()) + _bad_crc(), CorruptRecordError),
    "good-then-too-large": (
        bytes(_three()) + build_batch([RecordInput(b"x" * 1500)], timestamp_ms=1),
        RecordTooLargeError,
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_append_gets_a_typed_error_and_changes_nothing(harness, name):
    data, error = BAD[name]
    log = harness.log
    before = snapshot_dir(harness.directory)
    leo, size, epochs = log.log_end_offset, log.size_bytes, log.epochs.entries()
    with pytest.raises(error) as info:
        log.append(data, leader_epoch=harness.epoch + 1)
    assert info.value.code == error.code
    assert not info.value.retriable
    assert snapshot_dir(harness.directory) == before
    assert (log.log_end_offset, log.size_bytes, log.epochs.entries()) == (leo, size, epochs)
    assert read_everything(log) == harness.model.records()
    # A good append afterwards lands at the same LEO.
    assert log.append(batch_of(2)[0], leader_epoch=harness.epoch).first_offset == leo


def test_too_large_says_how_large(harness):
    data, _ = BAD["too-large"]
    with pytest.raises(RecordTooLargeError) as info:
        harness.log.append(data, leader_epoch=0)
    assert info.value.details == {"size": len(data), "limit": 1500}


@pytest.mark.parametrize("name", ["bad-crc", "wrong-magic", "cut-in-the-records", "empty"])
def test_bad_follower_append_changes_nothing(harness, name):
    data, error = BAD[name]
    before = snapshot_dir(harness.directory)
    with pytest.raises(error):
        harness.log.append_as_follower(data)
    assert snapshot_dir(harness.directory) == before


def test_follower_batches_below_the_leo_or_overlapping_are_refused(harness):
    log = harness.log
    leo = log.log_end_offset
    before = snapshot_dir(harness.directory)
    for bases in ([leo - 1], [leo, leo + 1], [leo, leo]):
        blob = b"".join(
            build_batch([RecordInput(b"a"), RecordInput(b"b")], timestamp_ms=1, base_offset=b)
            for b in bases
        )
        with pytest.raises(InvalidRecordError):
            log.append_as_follower(blob)
        assert snapshot_dir(harness.directory) == before
    assert log.log_end_offset == leo


# -- disk full --------------------------------------------------------------------------


class DiskFull:
    """os.pwrite on a disk that fills up: the failing append finds room for
    half its bytes. Writes that end within that room succeed (overwriting
    allocated space needs none); one that crosses it writes what fits, then
    raises ENOSPC ("partial-then-error") or returns the short count so the
    retry raises ("short-then-error")."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.real = os.pwrite
        self.calls = 0
        self.enabled = True
        self.capacity: int | None = None

    def __call__(self, fd, data, position):
        if not self.enabled:
            return self.real(fd, data, position)
        self.calls += 1
        if self.capacity is None:
            self.capacity = position + max(len(data) // 2, 1)
        room = self.capacity - position
        if len(data) <= room:
            return self.real(fd, data, position)
        if room > 0:
            written = self.real(fd, bytes(data[:room]), position)
            if self.mode == "short-then-error":
                return written
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def pwritev(self, fd, buffers, position):
        """os.pwritev on the same disk (appends write a batch as pieces)."""
        return self(fd, b"".join(buffers), position)

    def install(self, monkeypatch) -> DiskFull:
        monkeypatch.setattr(segment_module.os, "pwrite", self)
        monkeypatch.setattr(segment_module.os, "pwritev", self.pwritev)
        return self


def _assert_log_is(log: Log, h: LogHarness) -> None:
    assert log.log_end_offset == h.model.leo
    assert read_everything(log) == h.model.records()
    for offset in range(h.model.leo):
        assert log.read(offset, 1)  # every offset still reachable


@pytest.mark.parametrize("mode", ["partial-then-error", "short-then-error"])
@pytest.mark.parametrize("rolls", [False, True])
@pytest.mark.parametrize("policy", [FlushPolicy.NONE, FlushPolicy.EVERY_BATCH])
def test_disk_full_mid_append(harness, monkeypatch, mode, rolls, policy):
    h = harness
    if policy is not FlushPolicy.NONE:
        h.log.close()
        h.config = msgspec.structs.replace(CONFIG, flush_policy=policy)
        h.log = Log(h.directory, h.config, pool=h.pool, clock=h.clock)
    log = h.log
    if rolls:
        log.roll()  # the failing append lands in a fresh, empty segment
    active = log.active_segment.log_path
    size_before = active.stat().st_size
    leo = log.log_end_offset
    epochs = log.epochs.entries()
    fault = DiskFull(mode).install(monkeypatch)
    blob = b"".join(batch_of(3, value_size=80, tag=t)[0] for t in range(3))
    with pytest.raises(StorageError) as info:
        log.append(blob, leader_epoch=h.epoch + 1)
    assert fault.calls >= 1
    assert info.value.code == "KAFKA_STORAGE_ERROR"
    assert info.value.retriable
    assert info.value.details["errno"] == "ENOSPC"
    # Consistent up to the last complete batch: no torn bytes, nothing new.
    assert active.stat().st_size == size_before
    assert log.log_end_offset == leo
    assert log.epochs.entries() == epochs
    _assert_log_is(log, h)
    # Space comes back: the retry succeeds at the same offset.
    fault.enabled = False
    rnd = random.Random(11)
    h.epoch += 1
    h.append([3, 3, 3], rnd, value_size=80)
    assert h.model.batches[-3].base_offset == leo
    _assert_log_is(log, h)
    h.reopen(clean=True)
    _assert_log_is(h.log, h)
    h.reopen(clean=False)
    _assert_log_is(h.log, h)
    assert h.log.recovery.bytes_dropped == 0


def test_disk_full_and_the_undo_fails_too(harness, monkeypatch):
    """If even cutting the torn bytes fails, they must never be mistaken
    for data: the next append cuts them first, and a reopen never sees them."""
    h = harness
    log = h.log
    active = log.active_segment.log_path
    size_before = active.stat().st_size
    fault = DiskFull("partial-then-error").install(monkeypatch)

    real_ftruncate = os.ftruncate
    ftruncate_fails = True

    def ftruncate(fd, length):
        if ftruncate_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_ftruncate(fd, length)

    monkeypatch.setattr(segment_module.os, "ftruncate", ftruncate)
    big = b"".join(batch_of(3, value_size=100, tag=t)[0] for t in range(3))
    assert size_before + len(big) < CONFIG.segment_bytes  # no roll: the active segment tears
    with pytest.raises(StorageError):
        log.append(big, leader_epoch=h.epoch)
    assert active.stat().st_size > size_before  # the torn half is still there
    _assert_log_is(log, h)
    fault.enabled = False
    ftruncate_fails = False
    rnd = random.Random(12)
    h.append([1], rnd, value_size=5)  # much shorter than the torn bytes
    _assert_log_is(log, h)
    h.append([2], rnd, value_size=5)
    _assert_log_is(log, h)
    h.reopen(clean=True)
    _assert_log_is(h.log, h)
    h.append([1], rnd, value_size=5)
    _assert_log_is(h.log, h)
    h.reopen(clean=False)
    _assert_log_is(h.log, h)


def test_torn_bytes_left_by_a_failed_undo_never_reach_a_clean_reopen(harness, monkeypatch):
    h = harness
    log = h.log
    DiskFull("partial-then-error").install(monkeypatch)

    def ftruncate(_fd, _length):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(segment_module.os, "ftruncate", ftruncate)
    big = b"".join(batch_of(3, value_size=100)[0] for _ in range(3))
    assert log.active_segment.size + len(big) < CONFIG.segment_bytes
    with pytest.raises(StorageError):
        log.append(big, leader_epoch=0)
    assert segment_logs(h.directory)[-1].stat().st_size > log.active_segment.size
    monkeypatch.undo()
    h.reopen(clean=True)
    _assert_log_is(h.log, h)
    assert segment_logs(h.directory)[-1].stat().st_size == h.log.active_segment.size


@pytest.mark.parametrize("suffix", [".log", ".index", ".timeindex"])
def test_disk_full_when_rolling_a_new_segment(harness, monkeypatch, suffix):
    """Creating the next segment's files fails: the append fails with
    KAFKA_STORAGE_ERROR, no stray files stay, and the log goes on."""
    h = harness
    log = h.log
    real_open = os.open

    def open_(path, flags, *args, **kwargs):
        if str(path).endswith(suffix) and flags & os.O_CREAT and not os.path.exists(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, flags, *args, **kwargs)

    names = sorted(os.listdir(h.directory))
    leo = log.log_end_offset
    monkeypatch.setattr(segment_module.os, "open", open_)
    blob = b"".join(batch_of(3, value_size=250, tag=t)[0] for t in range(3))
    assert log.active_segment.size + len(blob) > CONFIG.segment_bytes  # must roll
    for _attempt in range(2):
        with pytest.raises(StorageError) as info:
            log.append(blob, leader_epoch=h.epoch)
        assert info.value.details["errno"] == "ENOSPC"
        assert sorted(os.listdir(h.directory)) == names
        assert log.log_end_offset == leo
        _assert_log_is(log, h)
    monkeypatch.undo()
    rnd = random.Random(13)
    h.append([3, 3, 3], rnd, value_size=250)
    assert log.segment_count == len([n for n in names if n.endswith(".log")]) + 1
    _assert_log_is(log, h)
    h.reopen(clean=True)
    _assert_log_is(h.log, h)
    h.reopen(clean=False)
    _assert_log_is(h.log, h)


def test_crash_while_torn_bytes_could_not_be_cut(harness, monkeypatch):
    """The failed append's whole batches must not come back after a crash."""
    h = harness
    log = h.log
    DiskFull("partial-then-error").install(monkeypatch)

    def ftruncate(_fd, _length):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(segment_module.os, "ftruncate", ftruncate)
    big = b"".join(batch_of(3, value_size=100, tag=t)[0] for t in range(3))
    assert log.active_segment.size + len(big) < CONFIG.segment_bytes
    with pytest.raises(StorageError):
        log.append(big, leader_epoch=h.epoch)
    torn = segment_logs(h.directory)[-1].stat().st_size - log.active_segment.size
    assert torn > len(big) // 3  # at least one whole batch of the failed append is on disk
    monkeypatch.undo()
    log.close_unclean()
    reopened = Log(h.directory, h.config, pool=h.pool, clock=h.clock)
    assert reopened.recovery.bytes_dropped == torn
    _assert_log_is(reopened, h)


def test_epoch_checkpoint_that_cannot_be_written_fails_the_append_cleanly(harness, monkeypatch):
    """A new leader epoch is checkpointed before its batch is written (as
    Kafka does): if that fails, the append fails and nothing changes."""
    h = harness
    log = h.log
    before = snapshot_dir(h.directory)
    leo, epochs = log.log_end_offset, log.epochs.entries()

    def write_atomic(_path, _data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "write_atomic", write_atomic)
    with pytest.raises(StorageError) as info:
        log.append(batch_of(2)[0], leader_epoch=h.epoch + 1)
    assert info.value.details["errno"] == "ENOSPC"
    assert snapshot_dir(h.directory) == before
    assert (log.log_end_offset, log.epochs.entries()) == (leo, epochs)
    monkeypatch.undo()
    h.epoch += 1
    h.append([2], random.Random(3))
    assert log.epochs.entries() == h.expected_epoch_entries()
    h.reopen(clean=False)
    assert h.log.epochs.entries() == h.expected_epoch_entries()
    _assert_log_is(h.log, h)


def test_every_batch_fsync_failure_takes_the_append_back(harness, monkeypatch):
    """Under every_batch an append is acknowledged only once fsynced; one
    whose fsync failed must not stay in the log for a retry to duplicate."""
    h = harness
    h.log.close()
    h.config = msgspec.structs.replace(CONFIG, flush_policy=FlushPolicy.EVERY_BATCH)
    h.log = Log(h.directory, h.config, pool=h.pool, clock=h.clock)
    log = h.log
    leo, size, epochs = log.log_end_offset, log.size_bytes, log.epochs.entries()

    def fsync(_fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(segment_module.os, "fsync", fsync)
    with pytest.raises(StorageError):
        log.append(batch_of(3)[0], leader_epoch=h.epoch + 1)
    assert (log.log_end_offset, log.size_bytes, log.epochs.entries()) == (leo, size, epochs)
    assert segment_logs(h.directory)[-1].stat().st_size == log.active_segment.size
    _assert_log_is(log, h)
    monkeypatch.undo()
    h.epoch += 1
    h.append([3], random.Random(4))
    assert h.model.batches[-1].base_offset == leo
    h.reopen(clean=False)
    _assert_log_is(h.log, h)


def test_storage_error_on_fsync_is_typed(tmp_path, monkeypatch):
    log = Log(
        tmp_path / "p",
        LogConfig(flush_policy=FlushPolicy.INTERVAL_MS),
        pool=FilePool(8),
        clock=FakeClock(),
    )
    log.append(batch_of(2)[0], leader_epoch=0)

    def fsync(_fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(segment_module.os, "fsync", fsync)
    with pytest.raises(StorageError) as info:
        log.flush()
    assert info.value.code == "KAFKA_STORAGE_ERROR"
    assert log.recovery_point == 0
    monkeypatch.undo()
    log.flush()
    assert log.recovery_point == 2

"""Crash recovery: a torn tail at every byte, random bit flips, lost index
files, damage in a middle segment and corrupt checkpoint files. Reopening
keeps exactly the valid prefix, reports what it dropped, and the log goes on
with dense offsets."""

from __future__ import annotations

import logging
import os
import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lograft.protocol.batch import iter_batches
from lograft.protocol.compression import Compression
from lograft.storage import checkpoint
from lograft.storage.config import LogConfig
from lograft.storage.epoch_cache import FILE_NAME as EPOCH_FILE
from lograft.storage.handles import FilePool
from lograft.storage.log import LOG_START_FILE, RECOVERY_POINT_FILE, Log

from .storage_support import (
    FakeClock,
    LogHarness,
    ModelRecord,
    batch_bases,
    batch_of,
    example_dir,
    no_fsync,  # noqa: F401 (fixture)
    read_everything,
    segment_logs,
    snapshot_dir,
)

pytestmark = pytest.mark.usefixtures("no_fsync")

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=100, segment_index_bytes=4096)


def _open(directory: Path, config: LogConfig = SMALL) -> Log:
    return Log(directory, config, pool=FilePool(16), clock=FakeClock())


def _build(
    directory: Path,
    batches: int,
    *,
    seed: int = 1,
    config: LogConfig = SMALL,
    compression: Compression = Compression.NONE,
) -> LogHarness:
    rnd = random.Random(seed)
    h = LogHarness(directory, config)
    for i in range(batches):
        if i % 4 == 3:
            h.epoch += 1
        h.append([rnd.randrange(1, 5)], rnd, compression=compression, value_size=60)
    return h


def _file_batches(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch in a segment file."""
    data = path.read_bytes()
    return [(pos, h.base_offset, h.size) for pos, h in iter_batches(data)]


def _records_below(h: LogHarness, offset: int) -> list[ModelRecord]:
    return [r for r in h.model.records() if r.offset < offset]


# -- torn tail ---------------------------------------------------------------------


def _restore(directory: Path, snapshot: dict[str, bytes]) -> None:
    """Put the directory back as it was (rewriting files in place is much
    cheaper than copying directories)."""
    for name in os.listdir(directory):
        if name not in snapshot:
            (directory / name).unlink()
    for name, data in snapshot.items():
        path = directory / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
def test_torn_last_batch_at_every_byte(tmp_path, compression):
    directory = tmp_path / "p"
    h = _build(directory, 14, compression=compression)
    rnd = random.Random(5)
    h.append([2], rnd, compression=compression, value_size=30)
    assert h.log.segment_count >= 2
    h.log.close_unclean()
    snapshot = snapshot_dir(directory)
    last_log = segment_logs(directory)[-1]
    pos, base, size = _file_batches(last_log)[-1]
    assert base == h.model.batches[-1].base_offset
    want = _records_below(h, base)
    for cut in range(size):
        _restore(directory, snapshot)
        with open(last_log, "r+b") as f:
            f.truncate(pos + cut)
        log = _open(directory)
        assert not log.recovery.clean_shutdown
        assert log.log_end_offset == base, f"cut at byte {cut}"
        assert log.recovery.bytes_dropped == cut
        assert log.recovery.segments_deleted == 0
        assert last_log.stat().st_size == pos
        assert read_everything(log) == want
        if cut % 16 == 0:
            # Appending goes on at the start of the torn batch.
            assert log.append(batch_of(2)[0], leader_epoch=h.epoch).first_offset == base
        log.close_unclean()


def test_torn_tail_of_a_single_header(tmp_path):
    h = _build(tmp_path / "p", 1, config=LogConfig())
    h.log.close_unclean()
    path = segment_logs(tmp_path / "p")[0]
    for cut in (1, 11, 12, 60, 61):
        with open(path, "r+b") as f:
            f.truncate(cut)
        log = _open(tmp_path / "p", LogConfig())
        assert log.log_end_offset == 0
        assert log.recovery.bytes_dropped == cut
        assert path.stat().st_size == 0
        log.close_unclean()


# -- bit flips ---------------------------------------------------------------------


def _flip_is_detectable(
    path: Path, data: bytes, byte: int, bit: int, next_base: int | None, seg_base: int
) -> tuple[bool, int]:
    """Whether recovery can see the flip, and the index of the batch it hits.

    baseOffset and partitionLeaderEpoch lie outside the CRC (Kafka's format):
    a flip in the epoch is invisible and harmless to the records, and a flip
    that raises a baseOffset a little looks like a gap compaction leaves. A
    baseOffset that falls at or below the previous batch, past the segment's
    32-bit offset range or into the next segment is caught.
    """
    for i, (pos, h) in enumerate(iter_batches(data)):
        if pos <= byte < pos + h.size:
            rel = byte - pos
            if 12 <= rel < 16:
                return False, i
            if rel < 8:
                old = h.base_offset
                new = old ^ (1 << (8 * (7 - rel) + bit))
                new = new - (1 << 64) if new >= 1 << 63 else new
                last = new + h.last_offset_delta
                if (
                    new > old
                    and last - seg_base <= 0x7FFFFFFF
                    and (next_base is None or last < next_base)
                ):
                    return False, i
            return True, i
    raise AssertionError(f"byte {byte} is in no batch of {path}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32), clean_reopen_after=st.booleans())
def test_random_bit_flip_keeps_exactly_the_batches_before_it(
    tmp_path_factory, seed, clean_reopen_after
):
    rnd = random.Random(seed)
    with example_dir(tmp_path_factory) as tmp:
        directory = Path(tmp) / "p"
        codec = rnd.choice([Compression.NONE, Compression.GZIP])
        h = _build(directory, 12, seed=seed, compression=codec)
        h.log.close_unclean()
        logs = segment_logs(directory)
        victim = rnd.randrange(len(logs))
        path = logs[victim]
        data = bytearray(path.read_bytes())
        byte, bit = rnd.randrange(len(data)), rnd.randrange(8)
        seg_base = int(path.name[:20])
        next_base = int(logs[victim + 1].name[:20]) if victim + 1 < len(logs) else None
        detectable, hit = _flip_is_detectable(path, data, byte, bit, next_base, seg_base)
        assume(detectable)
        batches = _file_batches(path)
        hit_pos, hit_base, _size = batches[hit]
        data[byte] ^= 1 << bit
        path.write_bytes(data)

        later = logs[victim + 1 :]
        dropped = len(data) - hit_pos + sum(p.stat().st_size for p in later)
        log = _open(directory)
        assert log.log_end_offset == hit_base
        assert read_everything(log) == _records_below(h, hit_base)
        assert log.recovery.segments_deleted == len(later)
        assert log.recovery.bytes_dropped == dropped
        assert all(not p.exists() for p in later)
        assert log.epochs.entries() == [
            (e, o) for e, o in h.expected_epoch_entries() if o < hit_base
        ]
        # Dense offsets from here on, through another reopen.
        assert log.append(batch_of(3)[0], leader_epoch=h.epoch).first_offset == hit_base
        if clean_reopen_after:
            log.close()
        else:
            log.close_unclean()
        again = _open(directory)
        assert again.log_end_offset == hit_base + 3
        assert again.recovery.bytes_dropped == 0
        assert [r.offset for r in read_everything(again)] == list(range(hit_base + 3))
        again.close()


def test_flip_in_partition_leader_epoch_keeps_the_records(tmp_path):
    h = _build(tmp_path / "p", 3, config=LogConfig())
    h.log.close_unclean()
    path = segment_logs(tmp_path / "p")[0]
    data = bytearray(path.read_bytes())
    data[13] ^= 0x40
    path.write_bytes(data)
    log = _open(tmp_path / "p", LogConfig())
    assert log.recovery.bytes_dropped == 0
    assert read_everything(log) == h.model.records()


@pytest.mark.parametrize("bit", [63, 62, 40, 31])
def test_base_offset_flipped_out_of_the_segment_range_is_caught(tmp_path, bit):
    h = _build(tmp_path / "p", 3, config=LogConfig())
    h.log.close_unclean()
    path = segment_logs(tmp_path / "p")[0]
    data = bytearray(path.read_bytes())
    pos, base, _size = _file_batches(path)[1]
    flipped = base ^ (1 << bit)
    struct.pack_into(">q", data, pos, flipped - (1 << 64) if flipped >= 1 << 63 else flipped)
    path.write_bytes(data)
    log = _open(tmp_path / "p", LogConfig())
    assert log.log_end_offset == base
    assert log.recovery.bytes_dropped == len(data) - pos


def test_base_offset_flipped_into_the_next_segment_is_caught(tmp_path):
    directory = tmp_path / "p"
    h = _build(directory, 12)
    h.log.close_unclean()
    logs = segment_logs(directory)
    assert len(logs) >= 3
    path = logs[0]
    next_base = int(logs[1].name[:20])
    data = bytearray(path.read_bytes())
    pos, base, _size = _file_batches(path)[-1]
    struct.pack_into(">q", data, pos, next_base + 100)
    path.write_bytes(data)
    log = _open(directory)
    assert log.log_end_offset == base
    assert log.recovery.segments_deleted == len(logs) - 1
    assert read_everything(log) == _records_below(h, base)


# -- lost index files ----------------------------------------------------------------


def _timestamp_lookup_model(h: LogHarness, target: int):
    for r in h.model.records():
        if r.timestamp >= target:
            return r.offset, r.timestamp
    return None


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("which", ["sealed", "active", "all"])
@pytest.mark.parametrize("suffix", [".index", ".timeindex", "both"])
def test_deleted_index_is_rebuilt(tmp_path, clean, which, suffix):
    directory = tmp_path / "p"
    h = _build(directory, 16)
    logs = segment_logs(directory)
    assert len(logs) >= 3
    before = {p.name: p.read_bytes() for p in directory.glob("*.index")}
    if clean:
        h.log.close()
    else:
        h.log.close_unclean()
    chosen = {"sealed": [logs[1]], "active": [logs[-1]], "all": logs}[which]
    suffixes = [".index", ".timeindex"] if suffix == "both" else [suffix]
    for p in chosen:
        for s in suffixes:
            p.with_suffix(s).unlink()
    log = _open(directory)
    assert log.recovery.indexes_rebuilt >= len(chosen)
    assert log.recovery.bytes_dropped == 0
    assert log.log_end_offset == h.model.leo
    for p in logs:
        assert p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists()
    h.log = log
    for offset in range(h.model.leo):
        base, last, _size = batch_bases(log.read(offset, 1))[0]
        assert base <= offset <= last
    assert read_everything(log) == h.model.records()
    for target in range(-1, 10_001, 97):
        got = log.offset_for_timestamp(target)
        want = _timestamp_lookup_model(h, target)
        assert (None if got is None else (got.offset, got.timestamp)) == want
    log.close()
    # Sealed segments get their offset index back exactly.
    for p in logs[:-1]:
        name = p.with_suffix(".index").name
        assert (directory / name).read_bytes() == before[name]


# -- damage in a middle segment -------------------------------------------------------


def test_corrupt_middle_segment_drops_all_later_segments_and_says_so(tmp_path, caplog):
    directory = tmp_path / "p"
    h = _build(directory, 30)
    h.log.close_unclean()
    logs = segment_logs(directory)
    assert len(logs) >= 5
    victim = logs[2]
    pos, base, size = _file_batches(victim)[0]
    data = bytearray(victim.read_bytes())
    data[pos + size - 1] ^= 0xFF  # inside the CRC
    victim.write_bytes(data)
    dropped = len(data) - pos + sum(p.stat().st_size for p in logs[3:])
    with caplog.at_level(logging.WARNING, logger="lograft.storage.log"):
        log = _open(directory)
    report = log.recovery
    assert report.segments_deleted == len(logs) - 3
    assert report.bytes_dropped == dropped
    assert f"{dropped} bytes dropped" in report.summary()
    assert victim.name in caplog.text
    assert [p.name for p in segment_logs(directory)] == [p.name for p in logs[:3]]
    assert log.log_end_offset == base
    assert read_everything(log) == _records_below(h, base)
    # Offsets stay dense: the next append starts where the damage began.
    assert log.append(batch_of(2)[0], leader_epoch=h.epoch).first_offset == base
    log.close()
    again = _open(directory)
    assert again.log_end_offset == base + 2
    again.close()


# -- corrupt checkpoint files -----------------------------------------------------------

# Empty, binary, no count, unknown version, count mismatch, not a number.
GARBAGE = [b"", b"\x00\xff\xfe", b"0\n", b"1\n1\n5\n", b"0\n2\n5\n", b"0\n1\nfive\n"]


@pytest.mark.parametrize("content", [*GARBAGE, b"0\n1\n5 6\n", b"0\n1\n-3\n"])
@pytest.mark.parametrize("clean", [True, False])
def test_corrupt_recovery_point_checkpoint_means_recover_everything(tmp_path, content, clean):
    directory = tmp_path / "p"
    h = _build(directory, 12)
    h.log.flush()
    if clean:
        h.log.close()
    else:
        h.log.close_unclean()
    (directory / RECOVERY_POINT_FILE).write_bytes(content)
    log = _open(directory)
    assert any(RECOVERY_POINT_FILE in e for e in log.recovery.checkpoint_errors)
    if not clean:
        # Nothing is known to be flushed: every segment is re-validated.
        assert log.recovery.segments_recovered == h.log.segment_count
    assert log.log_end_offset == h.model.leo
    assert read_everything(log) == h.model.records()
    log.close()
    assert checkpoint.read_offset(directory / RECOVERY_POINT_FILE) == h.model.leo


@pytest.mark.parametrize("content", [*GARBAGE, b"0\n1\n5 6\n", b"0\n1\n-3\n"])
def test_corrupt_log_start_checkpoint_falls_back_to_the_first_segment(tmp_path, content):
    directory = tmp_path / "p"
    h = _build(directory, 12)
    h.log.advance_log_start_offset(3)
    h.log.close()
    (directory / LOG_START_FILE).write_bytes(content)
    log = _open(directory)
    assert any(LOG_START_FILE in e for e in log.recovery.checkpoint_errors)
    assert log.log_start_offset == 0
    assert log.log_end_offset == h.model.leo
    log.close()
    assert checkpoint.read_offset(directory / LOG_START_FILE) == 0


@pytest.mark.parametrize(
    "content",
    # ... plus one field per entry, epochs going back, offsets going back, negative.
    [*GARBAGE, b"0\n1\n5\n", b"0\n2\n3 0\n1 5\n", b"0\n2\n1 9\n2 5\n", b"0\n1\n-5 0\n"],
)
@pytest.mark.parametrize("clean", [True, False])
def test_corrupt_leader_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path, content, clean):
    directory = tmp_path / "p"
    h = _build(directory, 14)
    want = h.expected_epoch_entries()
    assert len(want) >= 3
    assert h.log.epochs.entries() == want
    if clean:
        h.log.close()
    else:
        h.log.close_unclean()
    (directory / EPOCH_FILE).write_bytes(content)
    log = _open(directory)
    assert any(EPOCH_FILE in e for e in log.recovery.checkpoint_errors)
    assert log.epochs.entries() == want
    log.close()
    assert [tuple(map(int, e)) for e in checkpoint.read_entries(directory / EPOCH_FILE, 2)] == want

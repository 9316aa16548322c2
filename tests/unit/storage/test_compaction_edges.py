"""Two things compaction must not change by accident.

- Header keys that are not valid UTF-8: a batch the cleaner rebuilds keeps
  every header key byte for byte (keys decode with surrogate escapes and
  encode back the same way).
- Time retention after compaction: a segment the cleaner emptied has no
  timestamp, and retention then goes by its file's mtime, as Kafka's does,
  which the cleaned file inherits from the files it replaced; the empty
  segment no longer holds back the deletion of later expired segments of a
  compact,delete topic.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from lograft.protocol.batch import (
    CRC_POS,
    RecordInput,
    build_batch,
    compute_crc,
    header_key_bytes,
    iter_batches,
    iter_records,
)
from lograft.storage.cleaner import clean_log
from lograft.storage.config import CleanupPolicy, LogConfig
from lograft.storage.dump import dump_file
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import FakeClock

NOW = 1_700_000_000_000
HOUR = 3_600_000
ODD_KEY = b"hdr-\xff\xfe\x80"  # not UTF-8
PLACEHOLDER = "hdr-###"  # as many bytes, replaced after encoding


def _with_odd_header_key(batch: bytes) -> bytes:
    """Swap the placeholder's bytes for ODD_KEY and fix the CRC, so the odd
    key is made without the encoder under test."""
    assert batch.count(PLACEHOLDER.encode()) == 1
    out = bytearray(batch.replace(PLACEHOLDER.encode(), ODD_KEY))
    struct.pack_into(">I", out, CRC_POS, compute_crc(out))
    return bytes(out)


def _open(path: Path, clock: FakeClock, **cfg: object) -> Log:
    config = LogConfig(
        segment_bytes=1024,
        index_interval_bytes=128,
        segment_index_bytes=64 * 1024,
        min_cleanable_dirty_ratio=0.0,
        **cfg,  # type: ignore[arg-type]
    )
    return Log(path, config, pool=FilePool(16), clock=clock)


def test_a_rebuilt_batch_keeps_header_keys_that_are_not_utf8(tmp_path):
    clock = FakeClock(NOW)
    log = _open(tmp_path / "p", clock, cleanup_policy=CleanupPolicy.COMPACT)
    first = build_batch(
        [
            RecordInput(b"kept", key=b"a", headers=[(PLACEHOLDER, b"v"), ("plain", None)]),
            RecordInput(b"old", key=b"b"),
        ],
        timestamp_ms=NOW,
    )
    log.append(_with_odd_header_key(first), leader_epoch=0)
    log.append(build_batch([RecordInput(b"new", key=b"b")], timestamp_ms=NOW + 1), leader_epoch=0)
    log.roll()
    result = clean_log(log, NOW + 10)
    assert result is not None and result.records_removed == 1  # the first batch was rebuilt
    data = log.read(0, 1 << 20)
    rebuilt = next(data[pos : pos + h.size] for pos, h in iter_batches(data) if h.base_offset == 0)
    assert ODD_KEY in rebuilt
    assert "\ufffd".encode() not in rebuilt
    kept = next(r for r in iter_records(data) if r.key == b"a")
    assert [header_key_bytes(k) for k, _v in kept.headers] == [ODD_KEY, b"plain"]
    assert kept.headers[1] == ("plain", None)
    # dump-log shows the key's bytes rather than failing to print it.
    lines = "\n".join(dump_file(log.segments()[0].log_path, records=True))
    lines.encode("utf-8")
    assert "headerKeys: [base64:aGRyLf/+gA==,plain]" in lines
    log.close()


def test_an_emptied_segment_does_not_hold_back_time_retention(tmp_path):
    clock = FakeClock(NOW)
    log = _open(
        tmp_path / "p",
        clock,
        cleanup_policy=CleanupPolicy.COMPACT_DELETE,
        retention_ms=HOUR,
        delete_retention_ms=0,
    )
    # Segments 0 and 2 hold a value each; segment 1 holds only a tombstone,
    # which the cleaner drops, leaving it empty. The values are too large
    # to share a cleaning run with it (runs fit segment_bytes). Segment 3 is
    # active.
    for i, value in enumerate([b"v" * 1000, None, b"v" * 1000]):
        batch = build_batch([RecordInput(value, key=b"k%d" % i)], timestamp_ms=NOW + i)
        log.append(batch, leader_epoch=0)
        log.roll()
    log.append(build_batch([RecordInput(b"v", key=b"x")], timestamp_ms=NOW + 5), leader_epoch=0)
    # File times on the fake clock's scale; the cleaner must carry them over.
    for seg in log.segments():
        os.utime(seg.log_path, ns=(NOW * 1_000_000, NOW * 1_000_000))
    clock.advance(10)
    result = clean_log(log, clock.now)
    assert result is not None and result.tombstones_removed == 1
    emptied = log.segments()[1]
    assert (emptied.base_offset, emptied.size, emptied.largest_timestamp) == (1, 0, -1)
    assert emptied.last_modified_ms() == NOW  # inherited, not the time of cleaning
    clock.advance(HOUR // 2)
    assert log.delete_old_segments() == 0  # nothing expired yet
    clock.advance(HOUR)
    # One pass takes all three: the empty segment is as old as its file.
    assert log.delete_old_segments() == 3
    assert log.segment_count == 1
    assert log.log_start_offset == 3
    log.close()

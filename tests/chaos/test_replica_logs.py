"""Reading a stopped replica from disk: every segment in offset order, a torn or
garbled tail ends the valid prefix (as `lograft dump-log` reports it)."""

from __future__ import annotations

import os
from pathlib import Path

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log
from tests.chaos.replica_logs import partition_dir, read_replica, segment_files

TOPIC = "t"


def _write(data_dir: Path, batches: list[list[str]], segment_bytes: int = 1 << 20) -> None:
    """Append one batch per inner list to partition 0, as a leader does."""
    log = Log(
        partition_dir(data_dir, TOPIC, 0),
        LogConfig(segment_bytes=segment_bytes),
        pool=FilePool(8),
    )
    try:
        for values in batches:
            records = [RecordInput(v.encode()) for v in values]
            log.append(build_batch(records, timestamp_ms=1_700_000_000_000), leader_epoch=0)
    finally:
        log.close()


def test_reads_every_record_of_every_segment_in_offset_order(tmp_path: Path) -> None:
    batches = [[f"w0-{i}", f"w1-{i}"] for i in range(40)]
    _write(tmp_path, batches, segment_bytes=1024)
    assert len(segment_files(partition_dir(tmp_path, TOPIC, 0))) > 1
    expected = {i: v for i, v in enumerate(v for b in batches for v in b)}
    assert read_replica(tmp_path, TOPIC, 0) == expected


def test_a_torn_or_garbled_tail_ends_the_valid_prefix(tmp_path: Path) -> None:
    _write(tmp_path, [["a", "b"], ["c"], ["d", "e"]])
    (segment,) = segment_files(partition_dir(tmp_path, TOPIC, 0))
    size = segment.stat().st_size
    os.truncate(segment, size - 3)
    assert read_replica(tmp_path, TOPIC, 0) == {0: "a", 1: "b", 2: "c"}
    with segment.open("r+b") as f:  # garble a byte inside the second batch's records
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert read_replica(tmp_path, TOPIC, 0) == {0: "a", 1: "b"}


def test_a_replica_without_a_directory_is_empty(tmp_path: Path) -> None:
    assert read_replica(tmp_path, TOPIC, 3) == {}

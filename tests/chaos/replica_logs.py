"""Read a stopped node's partition replicas straight from its segment files.

The per-replica comparison needs every replica's records, and a running
cluster only lets a client read the leader's copy: followers serve nothing,
and a replica that is still fetching or truncating would be compared
mid-change. So the workload stops every node once the cluster has converged
and reads `<data_dir>/logs/<topic>-<partition>/*.log` here, batch by batch in
base-offset order, exactly as `lograft dump-log --records` walks them
(lograft/storage/dump.py): the same header parsing and CRC-32C check, and a
torn or corrupt tail ends the segment. Nothing is opened through `Log`, whose
recovery would rewrite the files being judged.
"""

from __future__ import annotations

from pathlib import Path

from lograft.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    compute_crc,
    iter_batch_records,
    parse_header,
)
from lograft.storage.segment import LOG_SUFFIX, parse_base_offset


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / "logs" / f"{topic}-{partition}"


def segment_files(directory: Path) -> list[Path]:
    """The `.log` files of a partition directory, by base offset."""
    found = [
        (base, path)
        for path in directory.glob(f"*{LOG_SUFFIX}")
        if (base := parse_base_offset(path.name)) is not None
    ]
    return [path for _base, path in sorted(found)]


def read_segment(path: Path) -> dict[int, str]:
    """offset -> value (UTF-8) of every data record in the valid prefix of one segment."""
    data = path.read_bytes()
    out: dict[int, str] = {}
    position = 0
    while position + LOG_OVERHEAD <= len(data):
        length = int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
        total = length + LOG_OVERHEAD
        if total < HEADER_SIZE or position + total > len(data):
            break  # torn tail
        chunk = data[position : position + total]
        header = parse_header(chunk)
        if header.magic != 2 or compute_crc(chunk) != header.crc:
            break  # corrupt tail
        if not header.is_control:
            for record in iter_batch_records(chunk, 0, header):
                value = record.value
                out[record.offset] = "" if value is None else value.decode("utf-8", "replace")
        position += total
    return out


def read_replica(data_dir: Path, topic: str, partition: int) -> dict[int, str]:
    """offset -> value of one replica, over all its segments ({} if it has none)."""
    out: dict[int, str] = {}
    directory = partition_dir(data_dir, topic, partition)
    if directory.is_dir():
        for path in segment_files(directory):
            out.update(read_segment(path))
    return out

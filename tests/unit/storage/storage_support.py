"""Shared helpers for the storage tests: a fake clock, batch builders, a
reference model of a log, and snapshots of a directory's bytes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lograft.storage.batch import (
    RecordInput,
    build_batch,
    iter_batch_records,
    iter_batches,
    validate_batch,
)
from lograft.storage.compression import Compression
from lograft.storage.log import Log


class FakeClock:
    """A clock the test moves by hand (Log takes `clock=`)."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass(frozen=True)
class ModelRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int = -1


@dataclass
class ModelBatch:
    base_offset: int
    records: list[ModelRecord]
    size: int

    @property
    def last_offset(self) -> int:
        return self.records[-1].offset

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass
class LogModel:
    """What the log should hold: its batches in order, nothing else."""

    batches: list[ModelBatch] = field(default_factory=list)
    start: int = 0

    @property
    def leo(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.start

    def append(self, inputs: list[RecordInput], timestamp_ms: int, size: int) -> ModelBatch:
        base = self.leo
        recs = [
            ModelRecord(
                base + i,
                r.key,
                r.value,
                tuple(r.headers),
                timestamp_ms if r.timestamp is None else r.timestamp,
            )
            for i, r in enumerate(inputs)
        ]
        batch = ModelBatch(base, recs, size)
        self.batches.append(batch)
        return batch

    def truncate_to(self, offset: int) -> None:
        """A batch that holds `offset` goes whole, as Log.truncate_to does."""
        self.batches = [b for b in self.batches if b.last_offset < offset]
        if not self.batches:
            self.start = min(self.start, offset)

    def batch_index_for(self, offset: int) -> int:
        for i, b in enumerate(self.batches):
            if b.last_offset >= offset:
                return i
        raise KeyError(offset)

    def records(self) -> list[ModelRecord]:
        return [r for b in self.batches for r in b.records]


def batch_of(
    n: int,
    *,
    timestamp_ms: int = 1_000,
    value_size: int = 10,
    key: bytes | None = b"k",
    compression: Compression = Compression.NONE,
    tag: int = 0,
) -> tuple[bytes, list[RecordInput]]:
    inputs = [
        RecordInput(
            value=(f"{tag}:{i}:".encode() + b"v" * value_size)[: max(value_size, 1)],
            key=key,
            timestamp=timestamp_ms + i,
        )
        for i in range(n)
    ]
    return build_batch(inputs, timestamp_ms=timestamp_ms, compression=compression), inputs


def decode_all(data: bytes) -> list[ModelRecord]:
    """Validate and decode every batch of `data`, which must be whole batches."""
    out: list[ModelRecord] = []
    end = 0
    for pos, header in iter_batches(data):
        validate_batch(data, pos, available=header.size)
        for r in iter_batch_records(data, pos, header):
            out.append(ModelRecord(r.offset, r.key, r.value, r.headers, r.timestamp))
        end = pos + header.size
    assert end == len(data), f"{len(data) - end} bytes after the last whole batch"
    return out


def batch_bases(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, size) of each batch in `data`."""
    return [(h.base_offset, h.last_offset, h.size) for _pos, h in iter_batches(data)]


def read_everything(log: Log) -> list[ModelRecord]:
    """All records from the log start to the LEO, walking read() forward."""
    out: list[ModelRecord] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"read({offset}) returned nothing below the LEO {log.log_end_offset}"
        recs = [r for r in decode_all(data) if r.offset >= offset]
        out.extend(recs)
        offset = batch_bases(data)[-1][1] + 1
    return out


def snapshot_dir(directory: Path) -> dict[str, bytes]:
    """Every file's bytes (index files are mmapped shared, so this sees them)."""
    return {
        name: (directory / name).read_bytes()
        for name in sorted(os.listdir(directory))
        if (directory / name).is_file()
    }


def segment_logs(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))

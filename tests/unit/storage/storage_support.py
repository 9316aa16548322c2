"""Shared helpers for the storage tests: a fake clock, batch builders, a
reference model of a log, and snapshots of a directory's bytes."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lograft.protocol.batch import (
    RecordInput,
    build_batch,
    iter_batch_records,
    iter_batches,
    validate_batch,
)
from lograft.protocol.compression import Compression
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log


@pytest.fixture(scope="module")
def no_fsync() -> Iterator[None]:
    """fsync as a no-op, for modules that simulate crashes by dropping the
    Log object (the page cache survives, so fsync cannot change what a
    reopen sees) and would otherwise spend their time waiting on the disk.
    Tests of the flush policies do not use it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fsync", lambda _fd: None)
        yield


@contextmanager
def example_dir(factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh directory for one hypothesis example, under pytest's temporary
    directory (the function-scoped tmp_path is shared by all examples)."""
    path = factory.mktemp("example")
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


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


# -- a log driven next to its model ------------------------------------------------


class LogHarness:
    """A Log and the LogModel it must equal, driven by the same operations."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        pool: FilePool | None = None,
        clock: FakeClock | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        self.pool = pool or FilePool(64)
        self.clock = clock or FakeClock()
        self.log = Log(directory, config, pool=self.pool, clock=self.clock)
        self.model = LogModel()
        self.epoch = 0
        self.epochs: dict[int, int] = {}  # batch base offset -> leader epoch

    def append(
        self,
        counts: list[int],
        rnd: random.Random,
        *,
        compression: Compression = Compression.NONE,
        value_size: int = 20,
    ) -> None:
        blobs = []
        pending = []
        for n in counts:
            inputs = [random_record(rnd, value_size) for _ in range(n)]
            ts = rnd.randrange(0, 10_000)
            blob = build_batch(inputs, timestamp_ms=ts, compression=compression)
            blobs.append(blob)
            pending.append((inputs, ts, len(blob)))
        info = self.log.append(b"".join(blobs), leader_epoch=self.epoch)
        assert info.first_offset == self.model.leo
        for inputs, ts, size in pending:
            batch = self.model.append(inputs, ts, size)
            self.epochs[batch.base_offset] = self.epoch
        assert info.last_offset == self.model.leo - 1

    def truncate_to(self, offset: int) -> None:
        size_before = self.log.size_bytes
        removed = self.log.truncate_to(offset)
        assert removed == size_before - self.log.size_bytes
        if self.log.size_bytes == 0 and self.log.log_start_offset == self.log.log_end_offset:
            # Truncated through the log start: the log restarted empty.
            self.model.batches = []
            self.model.start = self.log.log_start_offset
        else:
            self.model.truncate_to(offset)

    def reopen(self, *, clean: bool) -> None:
        if clean:
            self.log.close()
        else:
            self.log.close_unclean()
        self.log = Log(self.directory, self.config, pool=self.pool, clock=self.clock)
        assert self.log.recovery.clean_shutdown == clean
        assert self.log.recovery.bytes_dropped == 0

    def expected_epoch_entries(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for b in self.model.batches:
            e = self.epochs[b.base_offset]
            if not out or e > out[-1][0]:
                out.append((e, b.base_offset))
        return out

    def check_basics(self) -> None:
        log, model = self.log, self.model
        assert log.log_end_offset == model.leo
        assert log.log_start_offset == model.start
        assert log.recovery_point <= log.log_end_offset
        assert log.epochs.entries() == self.expected_epoch_entries()
        assert log.size_bytes == sum(b.size for b in model.batches)
        assert log.read(model.leo, 1 << 20) == b""


def random_record(rnd: random.Random, value_size: int) -> RecordInput:
    key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(0, 8))
    value = None if rnd.random() < 0.1 else rnd.randbytes(rnd.randrange(0, value_size + 1))
    headers: list[tuple[str, bytes | None]] = []
    if rnd.random() < 0.3:
        headers = [("h", rnd.randbytes(3)), ("n", None)][: rnd.randrange(1, 3)]
    # Timestamps jump about, within and across batches.
    return RecordInput(value, key, headers, rnd.randrange(0, 10_000))

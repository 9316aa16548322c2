"""Log.read's limits at every batch boundary, against a model.

The model is the read contract as the former implementation kept it (it
walked every batch header in Python): from the first batch whose last
offset is >= the offset asked for, whole batches of that batch's segment, in
order, while their total fits max_bytes (with min_one, the first batch even
if it alone does not) and while they start below max_offset. The expected
bytes are cut from the segment files as they lie on disk, not read through
the code under test.

The logs mix batch sizes around the read path's chunk sizes (a few bytes
over and under the 8 KiB lookup chunk, batches far larger than it), hold
several segments, and, for the follower-built one, offset gaps such as
compaction leaves. Reads go to sealed and active segments alike.

Also pinned down: how much I/O one read costs (one descriptor borrow and,
beyond the lookup, one pread), since that is what made 64 KiB reads fast.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage import segment as segment_module
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import FakeClock

# Record value sizes: one-record batches from ~80 bytes to well over the
# 8 KiB chunk a lookup reads at a time, and some near its edge.
VALUE_SIZES = [10, 10, 10, 300, 2_000, 8_000, 8_130, 8_200, 20_000, 10, 10]
BOUNDARY_BATCHES = 5  # max_bytes and max_offset are tried at this many boundaries


@dataclass(frozen=True)
class Stored:
    base: int
    last: int
    size: int
    segment: int  # base offset of the segment holding the batch
    data: bytes  # the batch as it lies in the segment file


def _batch(rnd: random.Random, base_offset: int = 0) -> tuple[bytes, int]:
    """A batch of 1-3 records; returns it and its last offset delta."""
    count = rnd.randint(1, 3)
    size = rnd.choice(VALUE_SIZES)
    records = [RecordInput(rnd.randbytes(size), key=b"k%d" % i) for i in range(count)]
    return build_batch(records, timestamp_ms=1_000, base_offset=base_offset), count - 1


def _leader_log(directory: Path, config: LogConfig, rnd: random.Random) -> Log:
    log = Log(directory, config, pool=FilePool(8), clock=FakeClock())
    for _ in range(60):
        blobs = [_batch(rnd)[0] for _ in range(rnd.randint(1, 3))]
        log.append(b"".join(blobs), leader_epoch=rnd.randint(0, 2))
    return log


def _follower_log(directory: Path, config: LogConfig, rnd: random.Random) -> Log:
    """Batches keep the offsets they were given: gaps between them, as a
    compacted leader's log has."""
    log = Log(directory, config, pool=FilePool(8), clock=FakeClock())
    offset = 0
    for _ in range(60):
        offset += rnd.choice([0, 0, 1, 5])
        blob, last_delta = _batch(rnd, base_offset=offset)
        log.append_as_follower(blob)
        offset += last_delta + 1
    return log


def _stored(log: Log) -> list[Stored]:
    """Every batch, cut from the segment files by their length fields."""
    out: list[Stored] = []
    for seg in log.segments():
        raw = seg.log_path.read_bytes()[: seg.size]
        pos = 0
        while pos < len(raw):
            base = int.from_bytes(raw[pos : pos + 8], "big", signed=True)
            size = int.from_bytes(raw[pos + 8 : pos + 12], "big") + 12
            last = base + int.from_bytes(raw[pos + 23 : pos + 27], "big")
            out.append(Stored(base, last, size, seg.base_offset, raw[pos : pos + size]))
            pos += size
    return out


def _expected(
    stored: list[Stored], offset: int, max_bytes: int, max_offset: int | None, min_one: bool
) -> bytes:
    i = next(i for i, b in enumerate(stored) if b.last >= offset)
    out: list[Stored] = []
    total = 0
    for b in stored[i:]:
        if b.segment != stored[i].segment:
            break
        if max_offset is not None and b.base >= max_offset:
            break
        if total + b.size > max_bytes:
            if not out and min_one:
                out.append(b)
            break
        out.append(b)
        total += b.size
    return b"".join(b.data for b in out)


def _boundaries(stored: list[Stored], offset: int) -> Iterator[tuple[int, int]]:
    """(max_bytes, max_offset) at, just below and just above each of the
    next few batch boundaries: cumulative sizes and base offsets."""
    i = next(i for i, b in enumerate(stored) if b.last >= offset)
    total = 0
    for b in stored[i : i + BOUNDARY_BATCHES]:
        total += b.size
        for delta in (-1, 0, 1):
            yield max(total + delta, 0), b.base + delta


@pytest.mark.parametrize("build", [_leader_log, _follower_log], ids=["leader", "follower"])
@pytest.mark.parametrize("index_interval", [0, 100, 4096, 1 << 20])
def test_reads_at_every_batch_boundary_match_the_model(tmp_path, build, index_interval):
    rnd = random.Random(index_interval)
    config = LogConfig(
        segment_bytes=96 * 1024, index_interval_bytes=index_interval, segment_index_bytes=4096
    )
    log = build(tmp_path / "p", config, rnd)
    stored = _stored(log)
    assert len({b.segment for b in stored}) >= 3
    assert any(b.size > 16 * 1024 for b in stored)
    offsets = range(log.log_start_offset, log.log_end_offset)
    reads = 0
    for offset in offsets:
        for max_bytes, max_offset in _boundaries(stored, offset):
            for min_one in (True, False):
                got = log.read(offset, max_bytes, min_one=min_one)
                want = _expected(stored, offset, max_bytes, None, min_one)
                assert got == want, f"read({offset}, {max_bytes}, min_one={min_one})"
            got = log.read(offset, 1 << 20, max_offset=max_offset)
            assert got == _expected(stored, offset, 1 << 20, max_offset, True), (
                f"read({offset}, max_offset={max_offset})"
            )
            # Both limits at once, each at a boundary of its own.
            mixed = rnd.choice(list(_boundaries(stored, offset)))[0]
            got = log.read(offset, mixed, max_offset=max_offset, min_one=False)
            assert got == _expected(stored, offset, mixed, max_offset, False)
            reads += 4
    assert reads > 1000
    log.close()


def test_a_batch_larger_than_max_bytes_comes_whole_only_with_min_one(tmp_path):
    log = Log(tmp_path / "p", LogConfig(), pool=FilePool(8), clock=FakeClock())
    big = build_batch([RecordInput(b"x" * 50_000)], timestamp_ms=1)
    small = build_batch([RecordInput(b"y")], timestamp_ms=1)
    log.append(small + big + small, leader_epoch=0)
    stored = _stored(log)
    assert log.read(1, 100) == stored[1].data  # not followed by the small batch
    assert log.read(1, 100, min_one=False) == b""
    assert log.read(1, len(big)) == stored[1].data
    assert log.read(1, len(big) + len(small)) == stored[1].data + stored[2].data
    assert log.read(0, len(small) + len(big) - 1) == stored[0].data
    log.close()


# -- how much I/O one read costs ---------------------------------------------------------


class _Counter:
    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def _small_batches_log(directory: Path, pool: FilePool) -> Log:
    """~170-byte one-record batches in two segments (the first sealed)."""
    log = Log(directory, LogConfig(segment_bytes=1 << 20), pool=pool, clock=FakeClock())
    batch = build_batch([RecordInput(b"v" * 100)], timestamp_ms=1)
    for _ in range(2):
        log.append(batch * 2_000, leader_epoch=0)
        log.roll()
    log.append(batch * 2_000, leader_epoch=0)
    return log


@pytest.mark.parametrize("offset", [1_000, 4_500], ids=["sealed", "active"])
def test_a_64_kib_read_costs_one_borrow_and_two_preads(tmp_path, monkeypatch, offset):
    pool = FilePool(8)
    log = _small_batches_log(tmp_path / "p", pool)
    assert (log.segments()[0].active, log.segments()[-1].active) == (False, True)
    pread = _Counter(os.pread)
    borrow = _Counter(pool.borrow)
    monkeypatch.setattr(segment_module.os, "pread", pread)
    monkeypatch.setattr(pool, "borrow", borrow)
    data = log.read(offset, 64 * 1024)
    assert 64 * 1024 - 200 < len(data) <= 64 * 1024
    # The lookup's chunk, then the span max_bytes allows.
    assert pread.calls == 2
    assert borrow.calls == (1 if offset < 4_000 else 0)  # the active segment has its own
    pread.calls = 0
    assert len(log.read(offset, 1)) < 200  # one batch: it lies in the lookup's chunk
    assert pread.calls == 1
    log.close()

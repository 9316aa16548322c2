"""Reads at every offset agree with a model list after random appends (random
batch sizes), rolls, truncations and reopens (clean and unclean), and
`read` keeps its contract: whole batches starting with the one holding the
offset, max_bytes (min_one returns one whole batch even if larger), nothing
at or past max_offset."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.errors import OffsetOutOfRangeError
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.compression import Compression
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import (
    LogHarness,
    batch_bases,
    batch_of,
    decode_all,
    example_dir,
    read_everything,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
MAX_BYTES_CHOICES = [1, 80, 200, 450, 900]

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3),
            st.sampled_from(CODECS),
        ),
        st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("roll")),
        st.tuples(st.just("epoch")),
    ),
    min_size=1,
    max_size=18,
)


def _segment_of(h: LogHarness, offset: int) -> int:
    bases = [s.base_offset for s in h.log.segments()]
    return max(b for b in bases if b <= offset)


def check_reads(h: LogHarness, rnd: random.Random, *, thorough: bool) -> None:
    """read() at every offset in [start, LEO) against the model."""
    h.check_basics()
    log, model = h.log, h.model
    batches = model.batches
    for offset in range(model.start, model.leo):
        i = model.batch_index_for(offset)
        data = log.read(offset, 1 << 20)
        got = batch_bases(data)
        # Whole batches, starting with the one that holds the offset, in order.
        want = [(b.base_offset, b.last_offset, b.size) for b in batches[i : i + len(got)]]
        assert got == want, f"read({offset})"
        assert decode_all(data) == [r for b in batches[i : i + len(got)] for r in b.records]
        if not thorough:
            continue
        # max_bytes: as many whole batches as fit, but never an empty answer
        # with min_one; only the end of the segment stops it earlier.
        max_bytes = rnd.choice(MAX_BYTES_CHOICES)
        got = batch_bases(log.read(offset, max_bytes))
        assert got[0][0] == batches[i].base_offset
        total = sum(size for _b, _l, size in got)
        if len(got) > 1:
            assert total <= max_bytes
        j = i + len(got)
        if j < len(batches) and total + batches[j].size <= max_bytes:
            assert _segment_of(h, batches[j].base_offset) != _segment_of(
                h, batches[i].base_offset
            ), f"read({offset}, {max_bytes}) stopped early"
        # Without min_one a first batch larger than max_bytes gives nothing.
        got_strict = batch_bases(log.read(offset, max_bytes, min_one=False))
        if batches[i].size > max_bytes:
            assert got_strict == []
        else:
            assert got_strict == got
        # max_offset (a high watermark): nothing at or past it.
        hw = rnd.randrange(offset, model.leo + 1)
        got = batch_bases(log.read(offset, 1 << 20, max_offset=hw))
        assert all(base < hw for base, _l, _s in got)
        assert bool(got) == (batches[i].base_offset < hw)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(model.leo + 1, 100)
    if model.start > 0:
        with pytest.raises(OffsetOutOfRangeError):
            log.read(model.start - 1, 100)


@settings(max_examples=25, deadline=None)
@given(
    ops=ops,
    seed=st.integers(min_value=0, max_value=2**32),
    index_interval=st.sampled_from([0, 100, 4096]),
)
def test_reads_at_every_offset_match_the_model(tmp_path_factory, ops, seed, index_interval):
    rnd = random.Random(seed)
    config = LogConfig(
        segment_bytes=1024, index_interval_bytes=index_interval, segment_index_bytes=4096
    )
    with example_dir(tmp_path_factory) as tmp:
        h = LogHarness(Path(tmp) / "p", config)
        for op in ops:
            kind = op[0]
            if kind == "append":
                h.append(op[1], rnd, compression=op[2])
            elif kind == "truncate":
                h.truncate_to(int(op[1] * h.model.leo))
            elif kind == "reopen":
                h.reopen(clean=op[1])
            elif kind == "roll":
                h.log.roll()
            else:
                h.epoch += 1
            check_reads(h, rnd, thorough=kind != "append")
        check_reads(h, rnd, thorough=True)
        h.reopen(clean=False)
        check_reads(h, rnd, thorough=True)
        assert read_everything(h.log) == h.model.records()
        h.log.close()


def _log(tmp_path, **cfg) -> Log:
    return Log(tmp_path / "p", LogConfig(**cfg), pool=FilePool(16), clock=lambda: 1_000)


def test_min_one_false_does_not_skip_to_a_later_segment(tmp_path):
    log = _log(tmp_path)
    big, _ = batch_of(1, value_size=600)
    small, _ = batch_of(1, value_size=5)
    log.append(big, leader_epoch=0)
    log.roll()
    log.append(small, leader_epoch=0)
    assert log.read(0, 100, min_one=False) == b""
    assert batch_bases(log.read(0, 100)) == [(0, 0, len(big))]
    assert batch_bases(log.read(1, 100, min_one=False)) == [(1, 1, len(small))]


def test_read_starts_at_the_batch_holding_the_offset(tmp_path):
    log = _log(tmp_path)
    blobs = [batch_of(5, tag=i)[0] for i in range(3)]
    for blob in blobs:
        log.append(blob, leader_epoch=0)
    for offset in range(15):
        got = batch_bases(log.read(offset, 1 << 20))
        assert got[0][0] == offset - offset % 5
    assert batch_bases(log.read(7, len(blobs[1]))) == [(5, 9, len(blobs[1]))]
    assert batch_bases(log.read(7, len(blobs[1]) + len(blobs[2]) - 1)) == [(5, 9, len(blobs[1]))]
    assert len(batch_bases(log.read(7, len(blobs[1]) + len(blobs[2])))) == 2


def test_max_offset_below_the_batch_start_returns_nothing(tmp_path):
    log = _log(tmp_path)
    log.append(batch_of(5)[0], leader_epoch=0)
    log.append(batch_of(5)[0], leader_epoch=0)
    # The HW inside the second batch: the batch starts below it, so it is
    # returned whole (as Kafka does); a HW at its base hides it.
    assert batch_bases(log.read(5, 1 << 20, max_offset=6))[0][0] == 5
    assert log.read(5, 1 << 20, max_offset=5) == b""
    assert [b[0] for b in batch_bases(log.read(0, 1 << 20, max_offset=5))] == [0]


def test_reads_across_many_rolled_segments(tmp_path):
    log = _log(tmp_path, segment_bytes=1024, index_interval_bytes=0)
    for i in range(40):
        log.append(batch_of(3, value_size=100, tag=i)[0], leader_epoch=0)
    assert log.segment_count > 10
    records = read_everything(log)
    assert [r.offset for r in records] == list(range(120))
    assert [r.value[:4] for r in records[::3]] == [f"{i}:0:".encode()[:4] for i in range(40)]


def test_one_append_of_more_batches_than_the_index_has_room_for(tmp_path):
    # 4096-byte index files hold 512 offset / 341 time entries; with an entry
    # per batch, one append of 600 batches must not fail after writing.
    log = _log(tmp_path, segment_index_bytes=4096, index_interval_bytes=0)
    buf = b"".join(build_batch([RecordInput(b"v")], timestamp_ms=i) for i in range(600))
    info = log.append(buf, leader_epoch=0)
    assert (info.first_offset, info.last_offset) == (0, 599)
    assert log.log_end_offset == 600
    assert log.size_bytes == len(buf)
    log.append(buf, leader_epoch=0)
    assert [r.offset for r in read_everything(log)] == list(range(1200))
    for offset in (0, 345, 599, 600, 1199):
        assert decode_all(log.read(offset, 1))[0].offset == offset
    log.close()
    reopened = _log(tmp_path, segment_index_bytes=4096, index_interval_bytes=0)
    assert reopened.log_end_offset == 1200
    assert [r.offset for r in read_everything(reopened)] == list(range(1200))


def test_reads_after_close_are_refused(tmp_path):
    from lograft.errors import LogClosedError

    log = _log(tmp_path)
    log.append(batch_of(1)[0], leader_epoch=0)
    log.close()
    with pytest.raises(LogClosedError):
        log.read(0, 100)
    with pytest.raises(LogClosedError):
        log.append(batch_of(1)[0], leader_epoch=0)


def test_a_read_walks_its_bytes_without_holding_the_log(tmp_path: Path, monkeypatch) -> None:
    """Cutting a read back to whole batches (a walk of ~300 ms over 50 MiB of
    small batches, now in a worker thread) happens after the log's lock is
    released, so an append to the same log on the event loop never waits for
    it."""
    import threading

    from lograft.storage import segment

    log = Log(tmp_path / "p", LogConfig(), pool=FilePool(8))
    for i in range(20):
        log.append(build_batch([RecordInput(b"v%d" % i)], timestamp_ms=1), leader_epoch=0)
    free_while_cutting: list[bool] = []
    real_cut = segment.ReadSpan.cut

    def cut(span: segment.ReadSpan) -> bytes:
        def probe() -> None:
            got = log._lock.acquire(blocking=False)
            free_while_cutting.append(got)
            if got:
                log._lock.release()

        t = threading.Thread(target=probe)
        t.start()
        t.join()
        return real_cut(span)

    monkeypatch.setattr(segment.ReadSpan, "cut", cut)
    assert len(batch_bases(log.read(0, 100))) >= 1
    assert free_while_cutting == [True]
    log.close()

"""offset_for_timestamp agrees with a linear scan of the model (the first
record at or after the log start whose timestamp is >= the target), with
timestamps out of order within and across batches, after rolls,
truncations, reopens, lost time indexes and a moved log start."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import FakeClock, LogHarness, example_dir, no_fsync  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_fsync")


def linear(h: LogHarness, start: int, target: int):
    for r in h.model.records():
        if r.offset >= start and r.timestamp >= target:
            return r.offset, r.timestamp
    return None


def check_lookups(h: LogHarness, start: int) -> None:
    stamps = {r.timestamp for r in h.model.records()}
    targets = {-5, 0, 10_001} | stamps | {t + 1 for t in stamps} | {t - 1 for t in stamps}
    for target in sorted(targets):
        got = h.log.offset_for_timestamp(target)
        assert (None if got is None else (got.offset, got.timestamp)) == linear(h, start, target), (
            target
        )


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3),
        ),
        st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("start"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("drop-timeindex")),
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=30, deadline=None)
@given(ops=ops, seed=st.integers(min_value=0, max_value=2**32), interval=st.sampled_from([0, 300]))
def test_offset_for_timestamp_matches_a_linear_scan(tmp_path_factory, ops, seed, interval):
    rnd = random.Random(seed)
    config = LogConfig(segment_bytes=1024, segment_index_bytes=4096, index_interval_bytes=interval)
    with example_dir(tmp_path_factory) as tmp:
        h = LogHarness(Path(tmp) / "p", config)
        start = 0
        for op in ops:
            if op[0] == "append":
                h.append(op[1], rnd, value_size=30)
            elif op[0] == "truncate":
                offset = int(op[1] * h.model.leo)
                if offset > start:
                    h.truncate_to(offset)
                    # Truncating the batch that holds the log start restarts
                    # the log empty, at that batch's base (below `start`).
                    start = h.log.log_start_offset
            elif op[0] == "reopen":
                h.reopen(clean=op[1])
            elif op[0] == "start":
                new = int(op[1] * h.model.leo)
                if new > start:
                    h.log.advance_log_start_offset(new)
                    start = new
            else:
                h.log.close()
                for p in h.directory.glob("*.timeindex"):
                    p.unlink()
                h.log = Log(h.directory, h.config, pool=h.pool, clock=h.clock)
            check_lookups(h, start)
        h.log.close()


def _log(tmp_path) -> Log:
    return Log(
        tmp_path / "p",
        LogConfig(segment_bytes=1024, index_interval_bytes=0),
        pool=FilePool(8),
        clock=FakeClock(),
    )


def _batch(*stamps: int) -> bytes:
    return build_batch([RecordInput(b"v", timestamp=t) for t in stamps], timestamp_ms=0)


def test_out_of_order_within_and_across_batches(tmp_path):
    log = _log(tmp_path)
    log.append(_batch(100, 300, 200), leader_epoch=0)  # offsets 0-2
    log.append(_batch(150, 120), leader_epoch=0)  # 3-4
    log.append(_batch(400, 50), leader_epoch=0)  # 5-6
    expect = {
        0: (0, 100),
        100: (0, 100),
        101: (1, 300),
        250: (1, 300),
        300: (1, 300),
        301: (5, 400),
        400: (5, 400),
        401: None,
    }
    for target, want in expect.items():
        got = log.offset_for_timestamp(target)
        assert (None if got is None else (got.offset, got.timestamp)) == want, target


def test_a_match_below_the_log_start_does_not_hide_later_batches(tmp_path):
    log = _log(tmp_path)
    log.append(_batch(500, 100), leader_epoch=0)  # offsets 0-1
    log.append(_batch(300), leader_epoch=0)  # offset 2, same segment
    log.advance_log_start_offset(1)
    got = log.offset_for_timestamp(200)
    assert (got.offset, got.timestamp) == (2, 300)
    assert log.offset_for_timestamp(400) is None


def test_lookup_across_segments(tmp_path):
    log = _log(tmp_path)
    for i in range(12):
        log.append(
            build_batch(
                [RecordInput(b"x" * 300, timestamp=1000 * i + j) for j in range(2)], timestamp_ms=0
            ),
            leader_epoch=0,
        )
    assert log.segment_count > 4
    for i in range(12):
        got = log.offset_for_timestamp(1000 * i + 1)
        assert (got.offset, got.timestamp) == (2 * i + 1, 1000 * i + 1)
        got = log.offset_for_timestamp(1000 * i + 2)
        assert got is None or got.offset == 2 * i + 2

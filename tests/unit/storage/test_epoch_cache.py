"""Leader epoch cache: assign, end_offset_for and truncation behave as Kafka's
LeaderEpochFileCache (checked against a transcription of its Java), the
checkpoint survives reopening in Kafka's format, and a Log keeps the cache
consistent through appends, truncation, retention and reopening."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol.batch import RecordInput, build_batch
from lograft.storage.config import LogConfig
from lograft.storage.epoch_cache import FILE_NAME, LeaderEpochCache
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import (  # noqa: F401 (no_fsync is a fixture)
    FakeClock,
    LogHarness,
    batch_of,
    example_dir,
    no_fsync,
)

pytestmark = pytest.mark.usefixtures("no_fsync")

UNDEFINED = (-1, -1)


class KafkaEpochCache:
    """LeaderEpochFileCache's logic, line by line, over a sorted dict."""

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}  # epoch -> start offset (TreeMap)

    def _sorted(self) -> list[tuple[int, int]]:
        return sorted(self.epochs.items())

    def assign(self, epoch: int, start: int) -> None:
        entries = self._sorted()
        latest = entries[-1] if entries else None
        # isUpdateNeeded
        if latest is not None and not (epoch != latest[0] or start < latest[1]):
            return
        # maybeTruncateNonMonotonicEntries: removeFromEnd
        while entries and (entries[-1][0] >= epoch or entries[-1][1] >= start):
            del self.epochs[entries.pop()[0]]
        self.epochs[epoch] = start

    def end_offset_for(self, requested: int, leo: int) -> tuple[int, int]:
        entries = self._sorted()
        if requested == -1:
            return UNDEFINED
        if entries and entries[-1][0] == requested:
            return requested, leo
        higher = [e for e in entries if e[0] > requested]
        if not higher:
            return UNDEFINED
        floor = [e for e in entries if e[0] <= requested]
        if not floor:
            return requested, higher[0][1]
        return floor[-1][0], higher[0][1]

    def truncate_from_end(self, end: int) -> None:
        entries = self._sorted()
        if end >= 0 and entries and entries[-1][1] >= end:
            for e, s in entries:
                if s >= end:
                    del self.epochs[e]

    def truncate_from_start(self, start: int) -> None:
        removed = [(e, s) for e, s in self._sorted() if s <= start]
        for e, _s in removed:
            del self.epochs[e]
        if removed:
            self.epochs[removed[-1][0]] = start


cache_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("assign"),
            st.integers(min_value=0, max_value=12),
            st.integers(min_value=0, max_value=100),
        ),
        st.tuples(st.just("end"), st.integers(min_value=0, max_value=110)),
        st.tuples(st.just("start"), st.integers(min_value=0, max_value=110)),
        st.tuples(st.just("reopen")),
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(ops=cache_ops, probes=st.lists(st.integers(min_value=-1, max_value=14), max_size=8))
def test_cache_matches_kafkas_logic(tmp_path_factory, ops, probes):
    with example_dir(tmp_path_factory) as tmp:
        ours = LeaderEpochCache(Path(tmp))
        kafka = KafkaEpochCache()
        for op in ops:
            if op[0] == "assign":
                ours.assign(op[1], op[2])
                kafka.assign(op[1], op[2])
            elif op[0] == "end":
                ours.truncate_from_end(op[1])
                kafka.truncate_from_end(op[1])
            elif op[0] == "start":
                ours.truncate_from_start(op[1])
                kafka.truncate_from_start(op[1])
            else:
                ours = LeaderEpochCache(Path(tmp))
            assert ours.entries() == kafka._sorted(), op
            leo = 1 + max((s for _e, s in kafka._sorted()), default=0)
            for requested in probes:
                assert ours.end_offset_for(requested, leo) == kafka.end_offset_for(
                    requested, leo
                ), (requested, ours.entries())


@pytest.fixture
def cache(tmp_path):
    c = LeaderEpochCache(tmp_path)
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        c.assign(epoch, start)
    return c


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (5, (5, 30)),  # the latest epoch: it ends at the LEO
        (4, (3, 20)),  # between epochs: the floor epoch, ending where the next starts
        (3, (3, 20)),
        (2, (1, 10)),
        (1, (1, 10)),
        (0, (0, 0)),  # smaller than all: the requested epoch, ending at the first start
        (6, UNDEFINED),  # larger than all
        (-1, UNDEFINED),  # undefined
    ],
)
def test_end_offset_for(cache, requested, expected):
    assert cache.end_offset_for(requested, 30) == expected


def test_end_offset_for_on_an_empty_cache(tmp_path):
    assert LeaderEpochCache(tmp_path).end_offset_for(0, 10) == UNDEFINED
    assert LeaderEpochCache(tmp_path).end_offset_for(-1, 10) == UNDEFINED


def test_assign(cache):
    cache.assign(5, 25)  # same epoch, later offset: no change
    cache.assign(-1, 40)  # no epoch (a batch from an old producer path): ignored
    assert cache.entries() == [(1, 0), (3, 10), (5, 20)]
    cache.assign(7, 30)
    assert cache.entries() == [(1, 0), (3, 10), (5, 20), (7, 30)]
    cache.assign(8, 15)  # newer epoch below the latest starts: the stale tail goes
    assert cache.entries() == [(1, 0), (3, 10), (8, 15)]
    cache.assign(8, 12)  # same epoch, earlier start: moves back (Kafka)
    assert cache.entries() == [(1, 0), (3, 10), (8, 12)]
    cache.assign(9, 12)  # same start as the latest: replaces it (Kafka)
    assert cache.entries() == [(1, 0), (3, 10), (9, 12)]
    assert cache.latest_epoch == 9


def test_truncate_from_end_and_start(cache):
    cache.truncate_from_end(21)
    assert cache.entries() == [(1, 0), (3, 10), (5, 20)]
    cache.truncate_from_end(20)
    assert cache.entries() == [(1, 0), (3, 10)]
    cache.truncate_from_start(4)
    assert cache.entries() == [(1, 4), (3, 10)]
    cache.truncate_from_start(10)
    assert cache.entries() == [(3, 10)]
    cache.truncate_from_start(12)
    assert cache.entries() == [(3, 12)]


def test_epoch_for_offset(cache):
    assert [cache.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 99)] == [1, 1, 3, 3, 5, 5]
    cache.truncate_from_start(5)
    assert cache.epoch_for_offset(4) == -1


def test_persisted_in_kafkas_format_and_reloaded(cache, tmp_path):
    assert (tmp_path / FILE_NAME).read_text() == "0\n3\n1 0\n3 10\n5 20\n"
    assert LeaderEpochCache(tmp_path).entries() == [(1, 0), (3, 10), (5, 20)]
    cache.truncate_from_end(10)
    assert LeaderEpochCache(tmp_path).entries() == [(1, 0)]
    cache.clear()
    assert (tmp_path / FILE_NAME).read_text() == "0\n0\n"
    assert LeaderEpochCache(tmp_path).entries() == []


def test_not_persisted_when_asked(tmp_path):
    c = LeaderEpochCache(tmp_path, persist=False)
    c.assign(1, 0)
    assert not (tmp_path / FILE_NAME).exists()


# -- through a Log -------------------------------------------------------------------

log_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=4)),
        st.tuples(st.just("epoch"), st.integers(min_value=1, max_value=3)),
        st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("start"), st.floats(min_value=0, max_value=1)),
    ),
    max_size=25,
)


@settings(max_examples=30, deadline=None)
@given(ops=log_ops, seed=st.integers(min_value=0, max_value=2**32))
def test_log_keeps_the_cache_consistent(tmp_path_factory, ops, seed):
    """After any sequence, the cache is exactly the first batch of each epoch
    on the log, clipped to the log start, and answers like Kafka's."""
    rnd = random.Random(seed)
    config = LogConfig(segment_bytes=1024, segment_index_bytes=4096)
    with example_dir(tmp_path_factory) as tmp:
        h = LogHarness(Path(tmp) / "p", config)
        start = 0
        # Kafka truncates the cache from the LEO on open and on truncation: an
        # entry the log start moved up to an empty log's end does not survive
        # either.
        collapsed = False
        for op in ops:
            if op[0] == "append":
                h.append([op[1]], rnd, value_size=40)
                collapsed = False
            elif op[0] == "epoch":
                h.epoch += op[1]
            elif op[0] == "truncate":
                offset = int(op[1] * h.model.leo)
                if offset > start:
                    h.truncate_to(offset)
                    if h.log.log_start_offset < start:
                        # Through the batch holding the log start: the log
                        # restarted empty, its cache cleared.
                        assert h.log.log_start_offset == h.log.log_end_offset
                        start = h.log.log_start_offset
                        collapsed = True
                    collapsed = collapsed or start == h.model.leo
            elif op[0] == "reopen":
                h.reopen(clean=op[1])
                collapsed = collapsed or start == h.model.leo
            else:
                new_start = int(op[1] * h.model.leo)
                if new_start > start:
                    h.log.advance_log_start_offset(new_start)
                    start = new_start
            expected = [(e, max(o, start)) for e, o in h.expected_epoch_entries()]
            # Entries wholly before the log start collapse into the one covering it.
            while len(expected) > 1 and expected[1][1] <= start:
                expected.pop(0)
            if collapsed:
                expected = []
            assert h.log.epochs.entries() == expected, op
            kafka = KafkaEpochCache()
            for e, o in expected:
                kafka.assign(e, o)
            for requested in range(-1, h.epoch + 2):
                assert h.log.epochs.end_offset_for(requested, h.log.log_end_offset) == (
                    kafka.end_offset_for(requested, h.log.log_end_offset)
                )
        h.log.close()


def _log(directory, clock=None) -> Log:
    return Log(directory, LogConfig(), pool=FilePool(8), clock=clock or FakeClock())


def test_truncate_to_inside_an_epoch_keeps_it_and_drops_later_ones(tmp_path):
    log = _log(tmp_path / "p")
    for epoch in (0, 0, 2, 2, 5):
        log.append(batch_of(3)[0], leader_epoch=epoch)
    assert log.epochs.entries() == [(0, 0), (2, 6), (5, 12)]
    log.truncate_to(8)
    assert log.log_end_offset == 6
    assert log.epochs.entries() == [(0, 0)]
    assert log.epochs.end_offset_for(2, log.log_end_offset) == UNDEFINED
    log.append(batch_of(1)[0], leader_epoch=6)
    assert log.epochs.entries() == [(0, 0), (6, 6)]
    assert log.epochs.end_offset_for(2, log.log_end_offset) == (0, 6)
    log.close()
    assert _log(tmp_path / "p").epochs.entries() == [(0, 0), (6, 6)]


def test_follower_append_assigns_each_batchs_epoch(tmp_path):
    log = _log(tmp_path / "p")
    buf = b"".join(
        build_batch(
            [RecordInput(b"x"), RecordInput(b"y")],
            timestamp_ms=1,
            base_offset=base,
            partition_leader_epoch=epoch,
        )
        for base, epoch in [(0, 1), (2, 1), (4, 3), (6, 4)]
    )
    log.append_as_follower(buf)
    assert log.epochs.entries() == [(1, 0), (3, 4), (4, 6)]


def test_retention_and_full_truncation_move_the_cache(tmp_path):
    clock = FakeClock()
    log = Log(
        tmp_path / "p",
        LogConfig(segment_bytes=1024, retention_ms=1000),
        pool=FilePool(8),
        clock=clock,
    )
    for epoch in range(6):
        log.append(batch_of(4, value_size=150, timestamp_ms=clock.now)[0], leader_epoch=epoch)
    assert log.segment_count > 2
    clock.advance(5000)
    log.append(batch_of(1, timestamp_ms=clock.now)[0], leader_epoch=6)
    log.delete_old_segments()
    start = log.log_start_offset
    assert start > 0
    assert log.epochs.entries()[0][1] == start
    log.truncate_fully_and_start_at(100)
    assert log.epochs.entries() == []
    log.append(batch_of(1)[0], leader_epoch=9)
    assert log.epochs.entries() == [(9, 100)]

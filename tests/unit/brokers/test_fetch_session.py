"""Replica fetch decisions: epoch fencing, divergence, offset range and their
order on the leader; the follower's truncation point (KIP-101/279); and a
model of three replicas with random appends, unclean leader changes and
partial fetches in which followers that truncate where told and copy what
they get end identical to the leader, never truncating below the common
prefix, with epoch caches that describe their logs."""

from __future__ import annotations

import bisect
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.brokers.fetch_session import (
    FetchOutcome,
    decide_fetch,
    last_fetched_epoch,
    truncation_offset,
)
from lograft.errors import FencedLeaderEpochError, OffsetOutOfRangeError, UnknownLeaderEpochError
from lograft.protocol.fetch_wire import UNDEFINED_EPOCH, EpochEndOffset, PartitionFetch
from lograft.storage.epoch_cache import LeaderEpochCache

Outcome = FetchOutcome


def cache_answer(table: dict[int, tuple[int, int]]):
    return lambda epoch: table.get(epoch, (-1, -1))


def decide(req: PartitionFetch, answers=None, *, epoch=5, start=0, leo=100):
    return decide_fetch(
        req,
        leader_epoch=epoch,
        log_start_offset=start,
        log_end_offset=leo,
        end_offset_for=cache_answer(answers or {}),
    )


# --- leader side -----------------------------------------------------------------


def test_fenced_and_unknown_leader_epoch() -> None:
    d = decide(PartitionFetch(10, 4, current_leader_epoch=4))
    assert d.outcome is Outcome.FENCED_LEADER_EPOCH
    assert isinstance(d.error(), FencedLeaderEpochError)
    d = decide(PartitionFetch(10, 4, current_leader_epoch=6))
    assert d.outcome is Outcome.UNKNOWN_LEADER_EPOCH
    assert isinstance(d.error(), UnknownLeaderEpochError)


def test_epoch_check_comes_before_divergence_and_range() -> None:
    # Would diverge and is out of range, but the stale epoch is answered first.
    d = decide(PartitionFetch(500, 3, current_leader_epoch=4), {3: (2, 40)})
    assert d.outcome is Outcome.FENCED_LEADER_EPOCH


def test_no_current_epoch_skips_fencing() -> None:
    assert decide(PartitionFetch(10, current_leader_epoch=-1)).outcome is Outcome.OK


def test_diverging_when_leader_epoch_ended_before_fetch_offset() -> None:
    d = decide(PartitionFetch(60, 3, 5), {3: (3, 50)})
    assert d.outcome is Outcome.DIVERGING_EPOCH
    assert d.diverging == EpochEndOffset(3, 50)
    assert d.error() is None


def test_diverging_when_leader_never_had_the_epoch() -> None:
    # Leader answers a lower epoch, even though its end is past the offset.
    d = decide(PartitionFetch(60, 4, 5), {4: (3, 70)})
    assert d.outcome is Outcome.DIVERGING_EPOCH
    assert d.diverging == EpochEndOffset(3, 70)


def test_same_epoch_ending_at_or_after_fetch_offset_is_ok() -> None:
    assert decide(PartitionFetch(50, 3, 5), {3: (3, 50)}).outcome is Outcome.OK
    assert decide(PartitionFetch(50, 5, 5), {5: (5, 100)}).outcome is Outcome.OK


def test_undefined_epoch_answer_is_out_of_range() -> None:
    d = decide(PartitionFetch(50, 9, 5), {})
    assert d.outcome is Outcome.OFFSET_OUT_OF_RANGE


def test_divergence_is_checked_before_range() -> None:
    # Kafka returns the diverging epoch even when the offset is past the LEO.
    d = decide(PartitionFetch(150, 3, 5), {3: (3, 80)})
    assert d.outcome is Outcome.DIVERGING_EPOCH


@pytest.mark.parametrize(("offset", "ok"), [(9, False), (10, True), (100, True), (101, False)])
def test_offset_range_is_log_start_to_leo_inclusive(offset: int, ok: bool) -> None:
    d = decide(PartitionFetch(offset, current_leader_epoch=5), start=10, leo=100)
    assert (d.outcome is Outcome.OK) == ok
    if not ok:
        err = d.error()
        assert isinstance(err, OffsetOutOfRangeError)
        assert err.details == {"log_start_offset": 10, "log_end_offset": 100}


def test_first_fetch_without_last_epoch_is_not_checked_for_divergence() -> None:
    assert decide(PartitionFetch(0, UNDEFINED_EPOCH, 5), {}).outcome is Outcome.OK


# --- follower side ----------------------------------------------------------------


def test_truncate_to_smaller_end_when_epochs_match() -> None:
    # Follower's epoch 3 ended at 60, leader's at 50.
    assert truncation_offset(80, EpochEndOffset(3, 50), cache_answer({3: (3, 60)})) == 50
    # Leader's epoch 3 went further than the follower's: keep ours (KIP-279).
    assert truncation_offset(80, EpochEndOffset(3, 70), cache_answer({3: (3, 60)})) == 60


def test_intermediate_truncation_when_follower_lacks_the_epoch() -> None:
    # Leader says epoch 3 ends at 50; follower has only 2 (ending at 40) below 3.
    assert truncation_offset(80, EpochEndOffset(3, 50), cache_answer({3: (2, 40)})) == 40


def test_never_above_local_leo_and_unknown_cases() -> None:
    assert truncation_offset(30, EpochEndOffset(3, 50), cache_answer({3: (3, 60)})) == 30
    assert truncation_offset(30, EpochEndOffset(3, 20), cache_answer({})) == 20
    assert truncation_offset(30, EpochEndOffset(UNDEFINED_EPOCH, 20), cache_answer({})) == 20
    with pytest.raises(ValueError):
        truncation_offset(30, EpochEndOffset(3, -1), cache_answer({}))


# --- the model ----------------------------------------------------------------------


class KafkaEpochCache:
    """Kafka's LeaderEpochFileCache semantics (assign removes entries whose
    epoch or start offset is >= the new one's)."""

    def __init__(self) -> None:
        self.e: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int:
        return self.e[-1][0] if self.e else UNDEFINED_EPOCH

    def assign(self, epoch: int, start: int) -> None:
        if self.e and epoch == self.e[-1][0] and start >= self.e[-1][1]:
            return
        while self.e and (self.e[-1][0] >= epoch or self.e[-1][1] >= start):
            self.e.pop()
        self.e.append((epoch, start))

    def truncate_from_end(self, end: int) -> None:
        while self.e and self.e[-1][1] >= end:
            self.e.pop()

    def end_offset_for(self, epoch: int, leo: int) -> tuple[int, int]:
        if epoch == UNDEFINED_EPOCH or not self.e:
            return (-1, -1)
        if epoch == self.e[-1][0]:
            return (epoch, leo)
        epochs = [x for x, _ in self.e]
        hi = bisect.bisect_right(epochs, epoch)
        if hi == len(epochs):
            return (-1, -1)
        if hi == 0:
            return (epoch, self.e[0][1])
        return (epochs[hi - 1], self.e[hi][1])

    def epoch_for_offset(self, offset: int) -> int:
        starts = [s for _, s in self.e]
        i = bisect.bisect_right(starts, offset) - 1
        return self.e[i][0] if i >= 0 else UNDEFINED_EPOCH


def storage_cache() -> LeaderEpochCache:
    return LeaderEpochCache(Path("/nonexistent-lograft-test"), persist=False)


class Replica:
    def __init__(self, cache_kind: str) -> None:
        self.log: list[int] = []  # the leader epoch of each offset
        self.cache = storage_cache() if cache_kind == "storage" else KafkaEpochCache()

    @property
    def leo(self) -> int:
        return len(self.log)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for(epoch, self.leo)

    def append(self, epochs: list[int]) -> None:
        for e in epochs:
            self.cache.assign(e, self.leo)
            self.log.append(e)

    def truncate(self, offset: int) -> None:
        del self.log[offset:]
        self.cache.truncate_from_end(offset)

    def cache_state(self) -> tuple:
        return (self.leo, self.cache.latest_epoch, self.cache.end_offset_for(10**6, self.leo))


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def fetch_once(
    f: Replica, leader: Replica, epoch: int, max_records: int, strategy: str
) -> FetchOutcome:
    if strategy == "cache":
        last = last_fetched_epoch(f.cache.latest_epoch)
    else:
        last = f.log[-1] if f.log else UNDEFINED_EPOCH
    req = PartitionFetch(f.leo, last, epoch)
    d = decide_fetch(
        req,
        leader_epoch=epoch,
        log_start_offset=0,
        log_end_offset=leader.leo,
        end_offset_for=leader.end_offset_for,
    )
    if d.outcome is Outcome.DIVERGING_EPOCH:
        assert d.diverging is not None
        before = f.cache_state()
        lcp = common_prefix(f.log, leader.log)
        t = truncation_offset(f.leo, d.diverging, f.end_offset_for)
        assert t >= lcp, "truncated records the leader has"
        f.truncate(t)
        assert f.cache_state() != before, "a diverging answer must make progress"
    else:
        assert d.outcome is Outcome.OK, d
        f.append(leader.log[f.leo : f.leo + max_records])
        assert f.log == leader.log[: f.leo], "copied onto a log that is not a prefix"
    return d.outcome


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(1, 6)),
        st.tuples(st.just("elect"), st.integers(0, 2), st.just(0)),
    ),
    max_size=50,
)


def run_model(ops, cache_kind: str, strategy: str) -> tuple[list[Replica], int]:
    replicas = [Replica(cache_kind) for _ in range(3)]
    leader_id, epoch = 0, 0
    replicas[0].cache.assign(0, 0)
    for op, arg, n in ((o[0], o[1], o[2] if len(o) > 2 else 0) for o in ops):
        leader = replicas[leader_id]
        if op == "append":
            leader.append([epoch] * arg)
        elif op == "fetch" and arg != leader_id:
            fetch_once(replicas[arg], leader, epoch, n, strategy)
        elif op == "elect":
            # Any replica may win (unclean elections included): that is what
            # makes logs diverge.
            epoch += 1
            leader_id = arg
            replicas[arg].cache.assign(epoch, replicas[arg].leo)
    # Catch every follower up; each round makes progress, so this ends.
    leader = replicas[leader_id]
    for r, f in enumerate(replicas):
        if r == leader_id:
            continue
        for _ in range(4 * (len(f.log) + leader.leo + epoch + 2)):
            outcome = fetch_once(f, leader, epoch, 7, strategy)
            if outcome is Outcome.OK and f.leo == leader.leo:
                break
        assert f.log == leader.log
    return replicas, leader_id


@settings(max_examples=500, deadline=None)
@given(OPS, st.sampled_from(["kafka", "storage"]))
def test_followers_converge_to_the_leader(ops, cache_kind) -> None:
    replicas, _ = run_model(ops, cache_kind, "cache")
    for r in replicas:
        # Every replica's epoch cache describes its log.
        assert [r.cache.epoch_for_offset(o) for o in range(r.leo)] == r.log


@pytest.mark.parametrize("cache_kind", ["kafka", "storage"])
def test_last_fetched_epoch_from_cache_drops_an_empty_led_epoch(cache_kind) -> None:
    # r1 led epoch 1 without writing; the leader (epoch 2) has epoch-0 records
    # beyond r1's end. Sending the last record's epoch (0) would be answered
    # OK and r1 would copy epoch-0 records behind its stale (1, 3) entry;
    # sending the cache's epoch (1) makes the leader report divergence first.
    def setup() -> tuple[Replica, Replica]:
        r0, r1 = Replica(cache_kind), Replica(cache_kind)
        r0.cache.assign(0, 0)
        r0.append([0] * 5)
        r1.append(r0.log[:3])
        r1.cache.assign(1, 3)  # r1 led epoch 1
        r0.cache.assign(2, 5)  # r0 leads epoch 2
        return r0, r1

    r0, r1 = setup()
    assert fetch_once(r1, r0, 2, 10, "cache") is Outcome.DIVERGING_EPOCH
    assert r1.cache.latest_epoch == 0
    assert fetch_once(r1, r0, 2, 10, "cache") is Outcome.OK
    assert r1.log == r0.log
    assert [r1.cache.epoch_for_offset(o) for o in range(r1.leo)] == r1.log

    r0, r1 = setup()
    assert fetch_once(r1, r0, 2, 10, "record") is Outcome.OK
    assert r1.log == r0.log
    assert [r1.cache.epoch_for_offset(o) for o in range(r1.leo)] != r1.log

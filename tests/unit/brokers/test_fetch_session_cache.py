"""Incremental replica fetch sessions (KIP-227): the leader's cache, its
bounds, and the protocol between a follower and a leader."""

from __future__ import annotations

import asyncio

import pytest

from lograft.brokers.fetch_session_cache import FetchSessionCache
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from lograft.protocol.fetch_wire import (
    INITIAL_SESSION_EPOCH,
    FetchPartitionRequest,
    PartitionFetch,
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
    decode_answer,
    encode_answer,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.brokers.test_replica_manager import TP, Cluster, _batch

A, B, C = (TopicPartition("t", p) for p in range(3))


def _fetches(*tps: TopicPartition, offset: int = 0) -> dict[TopicPartition, PartitionFetch]:
    return {tp: PartitionFetch(offset) for tp in tps}


def test_epochs_advance_and_a_wrong_epoch_or_id_is_refused() -> None:
    cache = FetchSessionCache(sessions_max=4, partitions_max=100)
    s = cache.create(2, _fetches(A, B), now_ms=0)
    assert s is not None and s.id != 0 and cache.partitions_cached == 2
    assert cache.lookup(s.id, 1, 2, now_ms=1) is s
    assert cache.lookup(s.id, 2, 2, now_ms=2) is s
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.lookup(s.id, 3, replica_id=3, now_ms=3)  # another replica's id
    with pytest.raises(InvalidFetchSessionEpochError):
        cache.lookup(s.id, 2, 2, now_ms=3)  # a replayed epoch
    # The session out of step is dropped: the follower starts a new one.
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.lookup(s.id, 3, 2, now_ms=4)
    assert len(cache) == 0 and cache.partitions_cached == 0


def test_add_remove_and_dirty_marks() -> None:
    cache = FetchSessionCache(sessions_max=4, partitions_max=100)
    s = cache.create(2, _fetches(A, B), now_ms=0)
    other = cache.create(3, _fetches(B), now_ms=0)
    assert s is not None and other is not None
    cache.update(s, _fetches(C, offset=5), forgotten=[A])
    assert set(s.partitions) == {B, C} and s.partitions[C].fetch.fetch_offset == 5
    cache.mark(A)  # left the session: nobody marked
    cache.mark(B, skip=other)
    cache.mark(C)
    assert sorted(s.take_dirty()) == [B, C] and other.take_dirty() == []
    assert cache.partitions_cached == 3


def test_sessions_and_partitions_are_bounded() -> None:
    cache = FetchSessionCache(sessions_max=2, partitions_max=5)
    first = cache.create(1, _fetches(A), now_ms=0)
    second = cache.create(2, _fetches(A), now_ms=0)
    assert first is not None and second is not None
    cache.lookup(first.id, 1, 1, now_ms=1)  # first is now the most recently used
    third = cache.create(3, _fetches(A), now_ms=2)
    assert third is not None and cache.evictions == 1
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.lookup(second.id, 1, 2, now_ms=3)
    # Too many partitions for the cache: served without a session.
    wide = {TopicPartition("w", p): PartitionFetch(0) for p in range(6)}
    assert cache.create(4, wide, now_ms=3) is None
    # A session growing past the room the others leave is dropped, and
    # the others stay.
    assert len(cache) == 2 and cache.partitions_cached == 2
    more = {TopicPartition("w", p): PartitionFetch(0) for p in range(4)}
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.update(third, more, forgotten=[])
    assert len(cache) == 1 and cache.partitions_cached == 1
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.lookup(third.id, 1, 3, now_ms=3)
    cache.lookup(first.id, 2, 1, now_ms=3)
    # A replica's new session replaces its older one.
    again = cache.create(1, _fetches(B), now_ms=4)
    assert again is not None and len(cache) == 1 and cache.partitions_cached == 1


def _request(
    fetches: dict[TopicPartition, PartitionFetch],
    *,
    session_id: int = 0,
    epoch: int = INITIAL_SESSION_EPOCH,
    forgotten: tuple[TopicPartition, ...] = (),
    wait_ms: int = 30,
    replica: int = 2,
) -> ReplicaFetchRequest:
    return ReplicaFetchRequest(
        replica,
        wait_ms,
        1,
        1 << 20,
        1 << 20,
        [FetchPartitionRequest(tp.topic, tp.partition, f) for tp, f in fetches.items()],
        session_id,
        epoch,
        tuple((tp.topic, tp.partition) for tp in forgotten),
    )


async def _ask(leader: ReplicaManager, req: ReplicaFetchRequest) -> ReplicaFetchAnswer:
    """Through the wire format both ways, as a follower sees it."""
    req = ReplicaFetchRequest.from_json(req.to_json())
    return decode_answer(encode_answer(await leader.replica_fetch(req)))


async def test_full_then_incremental_answers_only_news(tmp_path):
    """Hand-driven follower 2 (its fetcher stopped) against leader 1; follower
    3 replicates as usual and moves the HW."""
    c = Cluster(tmp_path)
    await c.start()
    try:
        leader = c.brokers[1]
        await c.brokers[2].fetcher.stop()
        full = await _ask(leader, _request({TP: PartitionFetch(0, -1, 1)}))
        assert full.error is None and full.session_id != 0
        assert [p.partition for p in full.partitions] == [0]
        sid = full.session_id
        # Nothing changed: the long-poll waits and answers nothing.
        idle = await _ask(leader, _request({}, session_id=sid, epoch=1))
        assert idle.error is None and idle.partitions == []
        # Data is news: the leader answers it although the fetch named nothing.
        await leader.produce(TP, _batch("a"), Acks.LEADER)
        got = await _ask(leader, _request({}, session_id=sid, epoch=2, wait_ms=2_000))
        [part] = got.partitions
        assert part.data and part.log_end_offset == 5
        # Follower 3's fetch moves the HW to 5 (2 has not fetched past 0, but
        # min ISR is 2); the HW change reaches 2 although its position did not
        # change.
        hw = 5

        async def high_watermark_moved() -> None:
            while leader.partitions[TP].high_watermark != hw:
                await asyncio.sleep(0.01)  # polling a condition; bounded by wait_for

        await asyncio.wait_for(high_watermark_moved(), 5)
        if part.high_watermark != hw:
            moved = await _ask(leader, _request({}, session_id=sid, epoch=3))
            assert [p.high_watermark for p in moved.partitions] == [hw]
            epoch = 4
        else:
            epoch = 3
        # A replayed epoch gets the session error, then a full fetch works.
        stale = await _ask(leader, _request({}, session_id=sid, epoch=epoch - 1))
        assert isinstance(stale.error, InvalidFetchSessionEpochError)
        assert stale.partitions == []
        gone = await _ask(leader, _request({}, session_id=sid, epoch=epoch))
        assert isinstance(gone.error, FetchSessionIdNotFoundError)
        again = await _ask(leader, _request({TP: PartitionFetch(5, 1, 1)}))
        assert again.session_id not in (0, sid) and again.partitions[0].high_watermark == hw
        # A forgotten partition is no longer answered.
        await _ask(leader, _request({}, session_id=again.session_id, epoch=1, forgotten=(TP,)))
        await leader.produce(TP, _batch("b"), Acks.LEADER)
        left = await _ask(leader, _request({}, session_id=again.session_id, epoch=2))
        assert left.partitions == []
    finally:
        await c.stop()


async def _in_sync_at_log_end(c: Cluster) -> None:
    leader = c.brokers[1].partitions[TP]
    while True:
        leo = leader.log.log_end_offset
        if (
            c.assignment is not None
            and c.assignment.isr == (1, 2, 3)
            and leader.isr_in_flight is None
            and leader.high_watermark == leo  # the leader saw each at the log end
            and all(c.brokers[b].partitions[TP].log.log_end_offset == leo for b in (2, 3))
        ):
            return
        await asyncio.sleep(0.01)  # polling a condition; bounded by wait_for


async def test_idle_sessions_keep_followers_in_the_isr(tmp_path):
    """Incremental fetches that name nothing still count as fetches at the
    cached position: no ISR shrink over many lag times (200 ms in FAST)."""
    c = Cluster(tmp_path)
    await c.start()
    try:
        await c.brokers[1].produce(TP, _batch("a"), Acks.ALL)
        # While they fetch that batch the followers are behind, and a stall
        # of a loaded machine past the 200 ms lag time may take them out;
        # from the moment all are in the ISR at the log end, idling must
        # change nothing (a follower at the log end never lags).
        await asyncio.wait_for(_in_sync_at_log_end(c), 10)
        c.isr_changes.clear()
        await asyncio.sleep(1.0)  # five lag times of idle replication
        assert c.isr_changes == []
        assert all(len(s.partitions) == 1 for s in c.brokers[1].fetch_sessions.sessions())
        # Evicting the sessions makes the followers fall back to full fetches.
        for s in c.brokers[1].fetch_sessions.sessions():
            c.brokers[1].fetch_sessions._remove(s)
        res = await c.brokers[1].produce(TP, _batch("b"), Acks.ALL)
        assert res.last_offset == 9 and len(c.brokers[1].fetch_sessions) == 2
        assert c.isr_changes == []
    finally:
        await c.stop()


async def _hand_driven_followers(tmp_path) -> Cluster:
    """A started cluster whose followers 2 and 3 fetch only when a test asks
    (their fetchers stopped); the caller stops it."""
    c = Cluster(
        tmp_path, BrokerSettings(replica_fetch_wait_max_ms=50, replica_lag_time_max_ms=60_000)
    )
    await c.start()
    try:
        await c.brokers[2].fetcher.stop()
        await c.brokers[3].fetcher.stop()
    except BaseException:
        await c.stop()
        raise
    return c


async def test_a_high_watermark_move_alone_does_not_wake_a_session_but_is_answered(tmp_path):
    """Another follower's fetch that moves the HW marks a waiting session
    without waking it (only data can end its long-poll); its answer at the
    deadline still carries the new HW. Followers 2 and 3 hand-driven."""
    c = await _hand_driven_followers(tmp_path)
    try:
        leader = c.brokers[1]
        await leader.produce(TP, _batch("a"), Acks.LEADER)
        await leader.produce(TP, _batch("b"), Acks.LEADER)
        full = await _ask(leader, _request({TP: PartitionFetch(0, -1, 1)}))
        sid = full.session_id
        assert sid != 0 and full.partitions[0].log_end_offset == 10
        rounds = 0
        session_round = leader._session_round

        async def counted(*args):
            nonlocal rounds
            rounds += 1
            return await session_round(*args)

        leader._session_round = counted  # type: ignore[method-assign]
        # Follower 2 at the log end long-polls; follower 3 (sessionless)
        # catches up in two fetches, each moving the HW (0 -> 5 -> 10).
        poll = asyncio.create_task(
            _ask(
                leader,
                _request({TP: PartitionFetch(10, 1, 1)}, session_id=sid, epoch=1, wait_ms=800),
            )
        )
        while rounds < 1:
            await asyncio.sleep(0.005)  # polling a condition (the poll's first round)
        for offset, hw in ((5, 5), (10, 10)):
            await _ask(leader, _request({TP: PartitionFetch(offset, 1, 1)}, epoch=-1, replica=3))
            assert leader.partitions[TP].high_watermark == hw
        await asyncio.sleep(0.05)
        assert not poll.done() and rounds == 1  # not woken by either move
        answer = await poll
        assert [(p.high_watermark, p.data) for p in answer.partitions] == [(10, b"")]
        assert rounds == 2  # the deadline's round over what was marked
    finally:
        await c.stop()


async def test_a_high_watermark_move_for_a_follower_at_the_log_end_skips_the_full_serve(tmp_path):
    """The HW news of a partition whose follower is at the log end and whose
    leader state did not otherwise move is worked out without the full
    per-partition serve (fetch decision, read); anything else that moved is
    served in full. Followers 2 and 3 hand-driven."""
    c = await _hand_driven_followers(tmp_path)
    try:
        leader = c.brokers[1]
        await leader.produce(TP, _batch("a"), Acks.LEADER)
        full = await _ask(leader, _request({TP: PartitionFetch(5, 1, 1)}, wait_ms=0))
        sid = full.session_id
        assert sid != 0 and [p.log_end_offset for p in full.partitions] == [5]
        part = leader.partitions[TP]
        served: list[int] = []
        serve = part.serve_follower_fetch

        def counted(follower: int, request: PartitionFetch, now_ms: int) -> object:
            served.append(follower)
            return serve(follower, request, now_ms)

        part.serve_follower_fetch = counted  # type: ignore[method-assign]
        # Follower 3 reaches the log end: the HW moves to 5.
        await _ask(leader, _request({TP: PartitionFetch(5, 1, 1)}, epoch=-1, replica=3, wait_ms=0))
        assert part.high_watermark == 5 and served == [3]
        moved = await _ask(leader, _request({}, session_id=sid, epoch=1, wait_ms=0))
        assert [(p.high_watermark, p.log_end_offset, p.data) for p in moved.partitions] == [
            (5, 5, b"")
        ]
        assert served == [3]  # follower 2's HW news without a serve
        assert part.tracker.state(2).leo == 5
        # An append moved the log end: served in full, with the data.
        await leader.produce(TP, _batch("b"), Acks.LEADER)
        got = await _ask(leader, _request({}, session_id=sid, epoch=2, wait_ms=0))
        assert [(p.log_end_offset, len(p.data) > 0) for p in got.partitions] == [(10, True)]
        assert served == [3, 2]
        # A new fetch state named by the follower is served in full too.
        await _ask(leader, _request({TP: PartitionFetch(10, 1, 1)}, session_id=sid, epoch=3))
        assert served == [3, 2, 2]
    finally:
        await c.stop()

"""The edges of a follower's split fetches (`_FollowerSession`): a session
partition left for a later fetch is not served from the leader's older
state, one left over waits behind none that keep moving, a sessionless
follower asks for a session again, a partition backing off turns nothing
into a busy loop, and a partition moved to another leader takes nothing
from the old one. (Found by a review of the first version: each of these
failed on it.)"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from types import SimpleNamespace

import msgspec
import pytest

from lograft.brokers.fetch_session_cache import FetchSessionCache
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_fetcher import FetcherSettings, ReplicaFetcher, _FollowerSession
from lograft.brokers.replica_manager import PartitionMeta
from lograft.errors import FetchSessionIdNotFoundError
from lograft.protocol.fetch_wire import (
    INITIAL_SESSION_EPOCH,
    NO_SESSION_ID,
    SESSIONLESS_EPOCH,
    PartitionFetch,
    ReplicaFetchRequest,
)
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.brokers.fetch_split_pair import LIMIT, SETTINGS, Fake, Pair, settled, until


def _epoch_sent(session: _FollowerSession) -> int:
    fake = SimpleNamespace(broker_id=2, settings=FetcherSettings())
    req = ReplicaFetcher._request(fake, {}, (), session, 0)  # type: ignore[arg-type]
    return req.session_epoch


def evict_before(pair: Pair, when: Callable[[ReplicaFetchRequest], bool]) -> None:
    """The leader loses the follower's session (evicted by another's, or a
    restart) just before serving an incremental fetch `when` picks."""
    send = pair._send

    async def evicting(leader: int, body: bytes, timeout: float) -> bytes:
        req = ReplicaFetchRequest.from_json(body)
        if req.session_id != NO_SESSION_ID and when(req):
            cache = pair.leader.fetch_sessions
            cache._remove(cache._sessions[req.session_id])
        return await send(leader, body, timeout)

    pair.follower.fetcher._transport = evicting


# -- a partition of the session left for a later fetch --------------------------------------


def test_a_session_partition_left_for_later_is_stale_until_named_and_forgotten_at_once():
    """A partition left out of a fetch while the leader holds an older
    state of it takes no answer until a fetch names it, and that fetch
    forgets it too, so the leader starts it afresh (and answers its high
    watermark again)."""
    by_tp = {TopicPartition("t", p): Fake() for p in range(3)}
    s = _FollowerSession()
    named, gone = s.build(by_tp, by_tp, 0, 10_000, 2)
    s.answered(7, named, gone)
    named, gone = s.build(by_tp, by_tp, 1, 10_000, 2)
    s.answered(7, named, gone)
    assert s.sent.keys() == by_tp.keys() and not s.pending
    # One answer moved all three (data for each).
    for p in by_tp.values():
        p.offset = 5
    s.changed.update(by_tp)
    named, gone = s.build(by_tp, by_tp, 2, 10_000, 2)
    s.answered(7, named, gone)
    (left,) = s.pending
    assert s.stale == {left} and not s.takes_answer(left)
    assert all(s.takes_answer(tp) for tp in named)
    named, gone = s.build(by_tp, by_tp, 3, 10_000, 2)
    assert list(named) == [left] and gone == (left,)
    s.answered(7, named, gone)
    assert s.takes_answer(left) and not s.stale and not s.pending
    assert s.sent[left] == PartitionFetch(5)


# -- sessionless for a while, then asking again ----------------------------------------------


def test_after_a_sessionless_answer_the_rescan_asks_for_a_session_with_epoch_0():
    by_tp = {TopicPartition("t", p): Fake() for p in range(12)}
    s = _FollowerSession()
    named, gone = s.build(by_tp, by_tp, 0, 10_000, 5)
    assert _epoch_sent(s) == INITIAL_SESSION_EPOCH
    s.answered(NO_SESSION_ID, named, gone)  # no session: refused
    named, gone = s.build(by_tp, by_tp, 100, 10_000, 5)
    assert _epoch_sent(s) == SESSIONLESS_EPOCH
    s.answered(NO_SESSION_ID, named, gone)
    # 10 s later, or with another followed set: ask again.
    again = dict(by_tp)
    named, gone = s.build(again, again, 20_000, 10_000, 5)
    assert s.wants_session
    assert _epoch_sent(s) == INITIAL_SESSION_EPOCH  # is 1: the leader serves it sessionless


async def test_a_partition_cut_into_pending_is_served_from_its_stale_state(tmp_path, caplog):
    """3 partitions, limit 2: one answer moves all three, the next fetch
    names two; the third stays in the leader's session at its old offset,
    and new data makes the leader serve it from there: that answer is not
    applied (it would fail as below the follower's log end)."""
    parts = [TopicPartition("w", p) for p in range(3)]
    settings = msgspec.structs.replace(SETTINGS, replica_fetch_request_partitions_max=2)
    pair = Pair(tmp_path, settings, parts)
    pair.follower.fetcher.settings = dataclasses.replace(
        pair.follower.fetcher.settings, request_partitions_max=2
    )
    await pair.start()
    caplog.set_level(logging.WARNING, logger="lograft.brokers.replica_fetcher")
    try:
        await settled(pair)
        pair.hold = True
        await pair.produce(parts, "a")  # answers the long-poll in flight (some of them)
        for _ in range(3):
            await pair.produce(parts, "b")  # new data for every partition, all dirty
            await pair.release_next()
        pair.hold = False
        await pair.release_next()

        def caught_up() -> bool:
            return all(
                pair.follower.partitions[tp].log.log_end_offset
                == pair.leader.partitions[tp].log.log_end_offset
                for tp in parts
            )

        await until(caught_up, "the follower at the leader's log end")
        bad = [r.getMessage() for r in caplog.records if "could not apply" in r.getMessage()]
        assert not bad, bad
    finally:
        await pair.stop()


# -- a partition backing off while sessionless ------------------------------------------------


async def test_a_backing_off_partition_does_not_turn_sessionless_into_a_busy_loop(tmp_path):
    parts = [TopicPartition("w", p) for p in range(12)]
    small_cache = msgspec.structs.replace(SETTINGS, replica_fetch_session_partitions_max=7)
    pair = Pair(tmp_path, small_cache, parts)
    await pair.start()
    try:
        for _ in range(300):
            if any(r.session_epoch == SESSIONLESS_EPOCH for r in pair.requests):
                break
            await asyncio.sleep(0.01)
        fetcher = pair.follower.fetcher
        # One partition backing off (an error answer; a persistently
        # failing one is backing off almost all the time).
        fetcher._retry_at[parts[11]] = fetcher._lag_clock() + 60_000
        await asyncio.sleep(0.2)  # the fetch in flight ends
        n = len(pair.requests)
        await asyncio.sleep(1.0)  # a window to count fetches in, not a sync point
        per_s = len(pair.requests) - n
        created = sum(1 for r in pair.requests[n:] if r.session_epoch == INITIAL_SESSION_EPOCH)
        # Sessionless: 11 partitions in slices of 5, each long-polling 200*5//11 ms.
        assert per_s < 40 and created == 0, (per_s, created)
    finally:
        await pair.stop()


# -- partitions moved to another leader, more than one fetch forgets -------------------------


async def test_a_leaving_partition_is_not_applied_from_its_old_leader(tmp_path):
    parts = [TopicPartition("w", p) for p in range(12)]
    pair = Pair(tmp_path, SETTINGS, parts)
    await pair.start()
    try:
        await settled(pair)
        pair.hold = True
        await pair.produce(parts[:1], "x")  # ends the long-poll in flight
        await pair.release_next()  # R1 (names w-0), answered
        moved = parts[5:]  # 7 > LIMIT partitions move to leader 3
        a = Assignment((3, 2), (3, 2), 3, 2, 1)
        same = Assignment((1, 2), (1, 2), 1, 1, 0)
        metas = {tp: PartitionMeta("topic-id-wide", same) for tp in parts[:5]}
        metas.update({tp: PartitionMeta("topic-id-wide", a) for tp in moved})
        pair.follower.apply_metadata(metas)
        for _ in range(100):
            if pair.held:
                break
            await asyncio.sleep(0.01)
        # R2, held: forgets LIMIT of the 7, the other 2 `leaving`.
        assert [len(pair.requests[-1].forgotten), len(pair.held)] == [LIMIT, 1]
        # The old leader (not told yet) takes writes to the moved partitions.
        await pair.produce(moved, "zombie")
        await pair.release_next()
        pair.hold = False
        await pair.release_next()
        # Two more fetches: the answer to the held one was applied (or not).
        sent = len(pair.requests)
        await until(lambda: len(pair.requests) >= sent + 2, "two more fetches")
        ends = {tp.partition: pair.follower.partitions[tp].log.log_end_offset for tp in moved}
        assert set(ends.values()) == {0}, ends
    finally:
        await pair.stop()


# -- a partition left over, behind partitions that move with every answer -------------------


def _starved(c: TopicPartition) -> bool:
    s = _FollowerSession()
    by_tp = {TopicPartition("t", p): Fake() for p in range(2)}
    a, b = list(by_tp)
    named, gone = s.build(by_tp, by_tp, 0, 10_000, 2)
    s.answered(7, named, gone)  # the session holds a and b
    by_tp[c] = Fake()  # c joins as an answer moves a and b
    by_tp[a].offset = by_tp[b].offset = 1
    m = dict(by_tp)
    named, gone = s.build(m, m, 1, 10_000, 2)
    s.answered(7, named, gone)
    assert set(s.pending) == {c}
    for i in range(50):  # a and b get data with every answer
        by_tp[a].offset = by_tp[b].offset = i + 2
        s.changed.update({a, b})
        named, gone = s.build(m, m, 2, 10_000, 2)
        s.answered(7, named, gone)
        if c in named:
            return False
    return True


def test_a_pending_partition_is_named_within_a_few_fetches_while_others_keep_moving():
    """Limit 2, a and b change with every answer, c joined and is pending:
    c is named next, whatever the order a set walks the three in."""
    starved = [n for n in range(20) if _starved(TopicPartition("u", n))]
    assert not starved, f"never named in 50 fetches (each answered at once): u-{starved}"


# -- a session lost once while growing ---------------------------------------------------------


async def test_a_session_evicted_while_growing_is_asked_for_again_after_the_rescan(tmp_path):
    """The leader's cache could hold the session; it was evicted once (LRU:
    another follower's session, or a restarted leader) during growth."""
    parts = [TopicPartition("w", p) for p in range(12)]
    pair = Pair(tmp_path, SETTINGS, parts)
    fetcher = pair.follower.fetcher
    fetcher.settings = dataclasses.replace(fetcher.settings, session_rescan_ms=300)
    evict_before(pair, lambda req: len(pair.requests) == 1)
    await pair.start()
    try:

        def asked_again() -> bool:
            epochs = [r.session_epoch for r in pair.requests]
            if SESSIONLESS_EPOCH not in epochs:  # sessionless first, as designed
                return False
            return INITIAL_SESSION_EPOCH in epochs[epochs.index(SESSIONLESS_EPOCH) :]

        # A rescan is due every 300 ms.
        await until(asked_again, "a full fetch asking for a session after the rescan")
    finally:
        await pair.stop()


# -- a partition named again whatever its state (a diverging answer), cut ------------------


def _leader_round(cache, session, s, named, gone):
    """The leader's side of one fetch (lookup + update), then the follower's answered."""
    if s.session_id == NO_SESSION_ID:
        ls = cache.create(2, named, 0)
        s.answered(ls.id, named, gone)
        return ls
    cache.lookup(s.session_id, s.next_epoch, 2, 0)
    cache.update(session, named, gone)
    s.answered(s.session_id, named, gone)
    return session


def _diverged_and_cut():
    """3 partitions in the session; one answer diverges for all three (each
    refetched and truncated); limit 2: the next fetch names two, c is cut."""
    by_tp = {TopicPartition("t", p): Fake(10) for p in range(3)}
    cache = FetchSessionCache(64, 1000)
    s = _FollowerSession()
    named, gone = s.build(by_tp, by_tp, 0, 10_000, 3)
    ls = _leader_round(cache, None, s, named, gone)
    for tp, p in by_tp.items():  # diverging answers: refetch, then truncation
        s.refetch(tp)
        p.offset = 5
        s.changed.add(tp)
    named, gone = s.build(by_tp, by_tp, 1, 10_000, 2)
    (c,) = set(by_tp) - set(named)
    # Cut: the leader still holds c at offset 10, so c is stale.
    assert c in s.pending and c in s.stale and not s.takes_answer(c)
    _leader_round(cache, ls, s, named, gone)
    return by_tp, c, cache, ls, s


def test_a_refetched_partition_cut_then_moved_away_is_forgotten_by_the_leader():
    by_tp, c, cache, ls, s = _diverged_and_cut()
    # c moves to another leader before a fetch named it.
    rest = {tp: p for tp, p in by_tp.items() if tp != c}
    for i in range(5):
        named, gone = s.build(rest, rest, 2 + i, 10_000, 2)
        _leader_round(cache, ls, s, named, gone)
    leaked = set(ls.partitions) - set(rest)
    assert not leaked, f"the leader's session still holds {leaked}"


def test_a_refetched_partition_cut_from_a_fetch_is_forgotten_when_named():
    """While cut, the leader holds (and may serve) c's older state, whose
    answers the follower drops; the fetch that names c starts it afresh at
    the leader, or the high watermark it answered then would be lost."""
    by_tp, c, cache, ls, s = _diverged_and_cut()
    ls.partitions[c].high_watermark = 42  # served while cut; the follower dropped it
    named, gone = s.build(by_tp, by_tp, 2, 10_000, 2)
    assert c in named
    _leader_round(cache, ls, s, named, gone)
    assert ls.partitions[c].high_watermark == -1, (named, gone)


# -- losing a small session, and sessionless asks ------------------------------------------


async def test_small_session_lost_while_a_partition_joins_asks_for_a_session_again(tmp_path):
    """3 partitions, limit 5 (the ordinary case): the leader loses the session
    (evicted by another follower's, LRU) just as a partition comes back from a
    back-off. Before the split the follower started a new session at once."""
    parts = [TopicPartition("w", p) for p in range(3)]
    pair = Pair(tmp_path, SETTINGS, parts)
    fetcher = pair.follower.fetcher
    joined = parts[2]
    state = {"evicted": False}

    def joining(req: ReplicaFetchRequest) -> bool:
        names = {(p.topic, p.partition) for p in req.partitions}
        if state["evicted"] or (joined.topic, joined.partition) not in names:
            return False
        if len(pair.requests) <= 1:
            return False
        state["evicted"] = True
        state["at"] = len(pair.requests) + 1  # this one is recorded next
        return True

    evict_before(pair, joining)
    await pair.start()
    try:
        await settled(pair)
        fetcher._retry_at[joined] = fetcher._lag_clock() + 300  # an error's back-off
        await until(lambda: state["evicted"], "the partition named again", 5)
        n = state["at"]
        await until(lambda: len(pair.requests) >= n + 3, "three more fetches", 5)
        epochs = [r.session_epoch for r in pair.requests[n : n + 3]]
        assert epochs[0] == INITIAL_SESSION_EPOCH and SESSIONLESS_EPOCH not in epochs, epochs
    finally:
        await pair.stop()


async def test_a_follower_the_leader_cannot_hold_evicts_no_session_as_it_grows(tmp_path):
    """12 partitions, limit 5, the leader caches 7 over all sessions; another
    follower (broker 3) holds a session of 3. The big follower's session is
    dropped when it grows past the room left, evicting nobody; only its asks
    (a new session, which evicts the least recently used as any full fetch
    does) may, and they come ever less often: after 300, 600, 1,200 ms..."""
    parts = [TopicPartition("w", p) for p in range(12)]
    small_cache = msgspec.structs.replace(SETTINGS, replica_fetch_session_partitions_max=7)
    pair = Pair(tmp_path, small_cache, parts)
    fetcher = pair.follower.fetcher
    fetcher.settings = dataclasses.replace(fetcher.settings, session_rescan_ms=300)
    cache = pair.leader.fetch_sessions
    grown_evictions: list[int] = []
    update = cache.update

    def watched(session, changed, forgotten):  # type: ignore[no-untyped-def]
        before = cache.evictions
        try:
            update(session, changed, forgotten)
        finally:
            grown_evictions.append(cache.evictions - before)

    cache.update = watched  # type: ignore[method-assign]
    await pair.start()
    try:
        cache.create(3, {tp: PartitionFetch(0) for tp in parts[:3]}, 0)

        def asks() -> list[ReplicaFetchRequest]:
            return [r for r in pair.requests if r.session_epoch == INITIAL_SESSION_EPOCH]

        await until(lambda: len(asks()) >= 3, "three asks for a session", 10)
        assert sum(grown_evictions) == 0
        assert fetcher._fetch_sessions[1].refusals >= 3
    finally:
        await pair.stop()


async def test_a_sessionless_follower_does_not_ask_again_for_another_leaders_change(tmp_path):
    """Sessionless for the same followed set until rescan_ms (10 s): a leader
    change of a partition followed from another broker (a `touch`, which bumps
    the fetcher's generation) leaves the set followed from broker 1 as it was."""
    import msgspec

    parts = [TopicPartition("w", p) for p in range(12)]
    small_cache = msgspec.structs.replace(SETTINGS, replica_fetch_session_partitions_max=7)
    pair = Pair(tmp_path, small_cache, parts)
    fetcher = pair.follower.fetcher
    await pair.start()
    try:
        await until(
            lambda: any(r.session_epoch == SESSIONLESS_EPOCH for r in pair.requests),
            "sessionless fetches",
        )
        n = len(pair.requests)
        for _ in range(20):  # elsewhere in the cluster: leader epochs move
            fetcher.touch(TopicPartition("elsewhere", 0))
            await asyncio.sleep(0.05)
        asks = [r for r in pair.requests[n:] if r.session_epoch == INITIAL_SESSION_EPOCH]
        assert not asks, (
            f"{len(asks)} new sessions asked for in 1 s (of {len(pair.requests) - n} fetches)"
        )
    finally:
        await pair.stop()


# -- an idle session left in the leader's cache ---------------------------------------------


async def test_a_session_left_idle_makes_room_for_a_growing_one(tmp_path):
    """A replica that stopped fetching from this leader left a session of 5
    in a cache of 14: the follower of 12 fits once that one is evicted, which
    its growth does (a minute idle), rather than being dropped for good."""
    parts = [TopicPartition("w", p) for p in range(12)]
    cache_of_14 = msgspec.structs.replace(SETTINGS, replica_fetch_session_partitions_max=14)
    pair = Pair(tmp_path, cache_of_14, parts)
    await pair.start()
    cache = pair.leader.fetch_sessions
    idle = {TopicPartition("gone", p): PartitionFetch(0) for p in range(5)}
    assert cache.create(3, idle, pair.leader.lag_clock() - cache.idle_evict_ms) is not None
    try:

        def whole() -> bool:
            mine = [s for s in cache.sessions() if s.replica_id == 2]
            return bool(mine) and len(mine[0].partitions) == 12

        await until(whole, "the follower's session holding all 12 partitions")
        assert [s.replica_id for s in cache.sessions()] == [2]
        assert not any(r.session_epoch == SESSIONLESS_EPOCH for r in pair.requests)
    finally:
        await pair.stop()


def test_a_session_fetched_within_the_minute_is_not_evicted_for_a_growing_one():
    cache = FetchSessionCache(sessions_max=8, partitions_max=6)
    busy = cache.create(3, {TopicPartition("b", p): PartitionFetch(0) for p in range(3)}, 0)
    grow = cache.create(2, {TopicPartition("g", 0): PartitionFetch(0)}, 0)
    assert busy is not None and grow is not None
    cache.lookup(grow.id, 1, 2, now_ms=cache.idle_evict_ms - 1)
    more = {TopicPartition("g", p): PartitionFetch(0) for p in range(1, 4)}
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.update(grow, more, forgotten=[])
    assert [s.replica_id for s in cache.sessions()] == [3]


def test_a_follower_refused_while_large_asks_again_once_it_fits_one_fetch():
    big = {TopicPartition("t", p): Fake() for p in range(12)}
    s = _FollowerSession()
    now = 0
    for _ in range(6):  # refused at each ask: sessionless ever longer
        named, gone = s.build(big, big, now, 10_000, 5)
        s.answered(NO_SESSION_ID, named, gone)
        asked, now = now, s.sessionless_until_ms
    # 10, 20, 40, 80, 160, then 320 s (at most 32 times the rescan).
    assert s.refusals == 6 and now - asked == 320_000
    s.build(big, big, now - 1, 10_000, 5)
    assert not s.wants_session
    small = dict(list(big.items())[:3])
    s.build(small, small, now - 1, 10_000, 5)
    assert s.wants_session and _epoch_sent(s) == INITIAL_SESSION_EPOCH

"""A follower that follows more partitions of one leader than one fetch
names (`replica_fetch_request_partitions_max`) splits its fetches: a session
grows over several fetches, and a leader whose session cache cannot hold them
all is fetched without a session, the partitions in turns. Two replica
managers in one event loop, wired by an in-process transport
(`fetch_split_pair.py`)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from lograft.brokers.replica_fetcher import _FollowerSession
from lograft.brokers.replica_manager import BrokerSettings
from lograft.errors import InvalidConfigError
from lograft.protocol.fetch_wire import (
    INITIAL_SESSION_EPOCH,
    NO_SESSION_ID,
    SESSIONLESS_EPOCH,
    PartitionFetch,
    ReplicaFetchRequest,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.typed import build
from tests.unit.brokers.fetch_split_pair import LIMIT, PARTITIONS, SETTINGS, Pair


async def replicated_twice(pair: Pair) -> list[ReplicaFetchRequest]:
    """Two acks=all produces to every partition, all at once: each answered
    only once the follower fetched it (min ISR 2); the fetches it took, each
    of at most LIMIT partitions."""
    for tag in ("a", "b"):
        await asyncio.wait_for(
            asyncio.gather(*(pair.produce([tp], tag, Acks.ALL) for tp in PARTITIONS)), 10
        )
    ends = {pair.follower.partitions[tp].log.log_end_offset for tp in PARTITIONS}
    assert ends == {2}
    assert max(len(r.partitions) + len(r.forgotten) for r in pair.requests) == LIMIT
    return pair.requests


async def test_a_session_over_the_limit_grows_over_several_fetches(tmp_path):
    pair = Pair(tmp_path, SETTINGS)
    await pair.start()
    try:
        await replicated_twice(pair)
        first = pair.requests[0]
        assert (first.session_id, first.session_epoch) == (NO_SESSION_ID, INITIAL_SESSION_EPOCH)
        # The session's next fetches name the other 7 partitions (with any
        # whose state an answer moved). Each fetch that leaves some for
        # later is answered at once, not held as a long-poll: the first
        # long-poll comes once all 12 were named, after 3 fetches or more.
        polls = [i for i, r in enumerate(pair.requests) if r.max_wait_ms > 0]
        assert polls and polls[0] >= 2
        assert all(r.max_wait_ms == 0 for r in pair.requests[: polls[0]])
        named = {p.partition for r in pair.requests[: polls[0] + 1] for p in r.partitions}
        assert named == set(range(12))
        # One session throughout.
        assert len({r.session_id for r in pair.requests[1:]}) == 1
        assert pair.requests[1].session_id != NO_SESSION_ID
        assert pair.requests[-1].max_wait_ms == SETTINGS.replica_fetch_wait_max_ms
    finally:
        await pair.stop()


async def test_a_leader_that_cannot_cache_them_all_is_fetched_without_a_session_in_turns(
    tmp_path,
):
    small_cache = msgspec.structs.replace(SETTINGS, replica_fetch_session_partitions_max=7)
    pair = Pair(tmp_path, small_cache)
    await pair.start()
    try:
        await replicated_twice(pair)
        sessionless = [r for r in pair.requests if r.session_epoch == SESSIONLESS_EPOCH]
        # The session of 5 took 5 more and passed the cache's 7: dropped, so
        # the follower stopped asking for one, and its full fetches take
        # the 12 partitions in turns, each long-polling for a share of the
        # wait (every partition fetched once per replica_fetch_wait_max_ms).
        assert sessionless, [(r.session_id, r.session_epoch) for r in pair.requests]
        start = pair.requests.index(sessionless[0])
        assert all(r.session_epoch == SESSIONLESS_EPOCH for r in pair.requests[start:])
        assert {r.max_wait_ms for r in sessionless} == {200 * LIMIT // len(PARTITIONS)}
        turns = [frozenset(p.partition for p in r.partitions) for r in sessionless[:3]]
        assert frozenset().union(*turns) == frozenset(range(12))
    finally:
        await pair.stop()


def test_forgotten_partitions_go_first_and_the_rest_wait_their_turn():
    """Cut to the limit, a fetch forgets before it names (forgetting frees
    the leader's cache); what is left over goes out with the next fetch."""
    session = _FollowerSession()
    session.session_id, session.next_epoch = 9, 1
    named = {TopicPartition("t", p): PartitionFetch(0) for p in range(4)}
    gone = [TopicPartition("old", p) for p in range(3)]
    kept, forgotten = session._within(dict(named), gone, 2)
    assert (kept, forgotten) == ({}, tuple(gone[:2]))
    assert session.leaving == {gone[2]} and set(session.pending) == set(named)
    assert session.wait_ms(500, 10, 2) == 0  # more to tell: answered at once
    kept, forgotten = session._within(dict(named), [gone[2]], 2)
    assert forgotten == (gone[2],) and list(kept) == [TopicPartition("t", 0)]
    assert session.leaving == set() and len(session.pending) == 3
    kept, forgotten = session._within(dict(named), [], 10)
    assert kept == named and forgotten == ()
    assert not session.pending and session.leaving == set()
    assert session.wait_ms(500, 10, 2) == 500


@pytest.mark.parametrize("followed", [3, 7])
def test_a_full_fetch_takes_its_slice_from_the_cursor(followed):
    session = _FollowerSession()
    parts = {TopicPartition("t", p): None for p in range(followed)}
    seen: list[int] = []
    for _ in range(3):
        chosen = session._slice(parts, 3)
        assert len(chosen) == min(3, followed)
        assert set(session.pending) == set(parts) - set(chosen)
        seen += [tp.partition for tp in chosen]
    if followed == 3:
        assert seen == [0, 1, 2] * 3
    else:
        assert seen == [0, 1, 2, 3, 4, 5, 6, 0, 1]


def test_a_config_naming_more_per_fetch_than_leaders_take_is_refused():
    body = {"replica_fetch_partitions_max": 1_000, "replica_fetch_request_partitions_max": 1_001}
    with pytest.raises(InvalidConfigError, match="replica_fetch_request_partitions_max"):
        build(body, BrokerSettings, error=InvalidConfigError)
    ok = {**body, "replica_fetch_request_partitions_max": 1_000}
    assert build(ok, BrokerSettings, error=InvalidConfigError).replica_fetch_partitions_max == 1_000

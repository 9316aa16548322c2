"""The follower side on its own (`ReplicaFetcher`), over replicas and a
transport of the test's making: one session per leader, started and ended by
`sync`; fetched data applied; a failing partition sits out of its session for
the back-off instead of making every long-poll return at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lograft.brokers.log_work import LogWork
from lograft.brokers.partition import Assignment, Partition, PartitionSettings
from lograft.brokers.replica_fetcher import FetcherSettings, ReplicaFetcher, _FollowerSession
from lograft.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import (
    FetchPartitionResponse,
    PartitionFetch,
    ReplicaFetchRequest,
    encode_response,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.config import LogConfig
from lograft.storage.log import Log

ME = 1
SETTINGS = FetcherSettings(wait_max_ms=50, backoff_ms=200)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def follower(tmp_path: Path, tp: TopicPartition, leader: int, epoch: int = 0) -> Partition:
    part = Partition(tp, Log(tmp_path / str(tp), LogConfig()), ME, PartitionSettings())
    part.become_follower(Assignment((leader, ME), (leader, ME), leader, epoch, epoch))
    return part


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[dict[TopicPartition, Partition]]:
    parts: dict[TopicPartition, Partition] = {}
    yield parts
    for p in parts.values():
        p.log.close()


# Each test's storage threads, stopped after it (a follower's first batch
# of a leader epoch is applied in one).
_WORKS: list[LogWork] = []


@pytest.fixture(autouse=True)
def _close_works() -> Iterator[None]:
    yield
    while _WORKS:
        _WORKS.pop().close()


def fetcher_over(
    replicas: dict[TopicPartition, Partition],
    transport: Callable[[int, bytes, float], object] | None,
    clock: FakeClock | None = None,
) -> tuple[ReplicaFetcher, list[TopicPartition]]:
    applied: list[TopicPartition] = []
    _WORKS.append(LogWork(1))
    fetcher = ReplicaFetcher(
        ME,
        SETTINGS,
        replicas,
        transport,  # type: ignore[arg-type]
        work=_WORKS[-1],
        on_applied=applied.append,
        lag_clock=clock or FakeClock(),
    )
    return fetcher, applied


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_one_session_per_leader_started_and_ended_by_sync(tmp_path, replicas):
    asked: list[tuple[int, list[str]]] = []

    async def long_poll(leader: int, body: bytes, timeout_s: float) -> bytes:
        req = ReplicaFetchRequest.from_json(body)
        asked.append((leader, sorted(f"{p.topic}-{p.partition}" for p in req.partitions)))
        await asyncio.Event().wait()  # a long-poll that never answers
        return b""

    for p, leader in enumerate([2, 3, 2]):
        tp = TopicPartition("t", p)
        replicas[tp] = follower(tmp_path, tp, leader)
    fetcher, _applied = fetcher_over(replicas, long_poll)
    fetcher.sync()
    assert fetcher.leaders == frozenset()  # not started: no session
    fetcher.start()
    try:
        fetcher.sync()
        assert fetcher.leaders == {2, 3}
        await wait_until(lambda: len(asked) == 2)
        assert sorted(asked) == [(2, ["t-0", "t-2"]), (3, ["t-1"])]
        # t-1 now follows broker 2 as well: broker 3's session ends.
        replicas[TopicPartition("t", 1)].become_follower(Assignment((2, ME), (2, ME), 2, 1, 1))
        fetcher.sync()
        assert fetcher.leaders == {2}
        assert not fetcher.needs_sync
    finally:
        await fetcher.stop()
    assert fetcher.leaders == frozenset()


async def test_a_partition_joining_a_session_does_not_wait_out_its_long_poll(tmp_path, replicas):
    """After a failover the new leader may be one this broker already
    follows: the moved partition is fetched at once, not when the poll in
    flight (which does not name it, and here never answers) ends."""
    asked: list[tuple[int, list[str]]] = []

    async def long_poll(leader: int, body: bytes, timeout_s: float) -> bytes:
        req = ReplicaFetchRequest.from_json(body)
        asked.append((leader, sorted(f"{p.topic}-{p.partition}" for p in req.partitions)))
        await asyncio.Event().wait()  # a long-poll that never answers
        return b""

    for p, leader in enumerate([2, 3]):
        tp = TopicPartition("t", p)
        replicas[tp] = follower(tmp_path, tp, leader)
    fetcher, _applied = fetcher_over(replicas, long_poll)
    fetcher.start()
    try:
        fetcher.sync()
        await wait_until(lambda: len(asked) == 2)
        # Broker 3 died: t-1's new leader is broker 2, polled already.
        replicas[TopicPartition("t", 1)].become_follower(Assignment((2, ME), (2, ME), 2, 1, 1))
        fetcher.sync()
        await wait_until(lambda: (2, ["t-0", "t-1"]) in asked)
        assert fetcher.leaders == {2}
        # An unchanged membership interrupts nothing.
        fetcher.sync()
        assert fetcher._sessions[2].cancelling() == 0
    finally:
        await fetcher.stop()
    assert fetcher.leaders == frozenset()


async def test_an_interrupt_after_the_answer_is_in_spares_its_apply_and_the_session(
    tmp_path, replicas
):
    """A partition joins while the leader's answer is already in (here: the
    join comes from inside the transport, which then returns at once). The
    interrupt cancels the fetch alone, never the session's task: a cancel of
    the task landed at its next await instead, inside the storage job that
    applies the answer (a first batch of a leader epoch: a thread), and the
    session died with that job still running."""
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    replicas[t0] = follower(tmp_path, t0, 2)
    replicas[t1] = follower(tmp_path, t1, 3)
    batch = build_batch([RecordInput(b"k", b"v")] * 3, timestamp_ms=1, partition_leader_epoch=0)
    asked: list[tuple[int, list[str]]] = []
    fetcher: ReplicaFetcher

    async def leader(leader_id: int, body: bytes, timeout_s: float) -> bytes:
        req = ReplicaFetchRequest.from_json(body)
        named = sorted(f"{p.topic}-{p.partition}" for p in req.partitions)
        asked.append((leader_id, named))
        if leader_id == 3 or len(asked) > 3 or req.partitions[0].fetch.fetch_offset > 0:
            await asyncio.Event().wait()  # caught up, or not this test's leader
        if leader_id == 2 and named == ["t-0"]:
            # t-1's leader moved to 2 while this answer is on its way.
            replicas[t1].become_follower(Assignment((2, ME), (2, ME), 2, 1, 1))
            fetcher.sync()
        return encode_response([FetchPartitionResponse("t", 0, 3, 0, 3, batch)])

    fetcher, applied = fetcher_over(replicas, leader)
    fetcher.start()
    try:
        fetcher.sync()
        await wait_until(lambda: (2, ["t-0", "t-1"]) in asked)
        await wait_until(lambda: t0 in applied)
        assert not fetcher._sessions[2].done(), "the session goes on"
        assert replicas[t0].log.log_end_offset == 3
    finally:
        await fetcher.stop()


async def test_a_partition_whose_leader_is_not_leader_yet_is_fetched_again_at_once(
    tmp_path, replicas
):
    """After a failover the new leader may answer this follower's first
    fetch of a moved partition before it applied its leadership: the
    partition sits out only `not_leader_backoff_ms` and then interrupts the
    poll in flight (which never answers here, and the lag clock stands
    still, so only the end of that short back-off fetches it again)."""
    asked: list[list[str]] = []
    moved = TopicPartition("t", 1)

    async def new_leader(leader: int, body: bytes, timeout_s: float) -> bytes:
        req = ReplicaFetchRequest.from_json(body)
        asked.append(sorted(f"{p.topic}-{p.partition}" for p in req.partitions))
        if len(asked) == 1:
            not_yet = NotLeaderOrFollowerError("not the leader yet")
            return encode_response([FetchPartitionResponse("t", 1, -1, -1, -1, error=not_yet)])
        await asyncio.Event().wait()  # a long-poll that never answers
        return b""

    for p in range(2):
        tp = TopicPartition("t", p)
        replicas[tp] = follower(tmp_path, tp, 2)
    fetcher, _applied = fetcher_over(replicas, new_leader)
    fetcher.start()
    try:
        fetcher.sync()
        await wait_until(lambda: len(asked) == 3)
        assert asked == [["t-0", "t-1"], ["t-0"], ["t-0", "t-1"]]
        assert moved not in fetcher._retry_at
    finally:
        await fetcher.stop()


async def test_not_leader_answers_in_a_row_back_off_longer_up_to_backoff_ms(tmp_path, replicas):
    """A leader that never takes over costs a few quick retries, then the
    ordinary back-off: the short one doubles with each such answer in a row,
    until a leader change."""
    clock = FakeClock()
    tp = TopicPartition("t", 0)
    replicas[tp] = follower(tmp_path, tp, 2)
    fetcher, _applied = fetcher_over(replicas, None, clock)
    pauses = []
    for error in [NotLeaderOrFollowerError("x")] * 3 + [UnknownLeaderEpochError("x")] * 3:
        fetcher._sit_out(tp, error)
        pauses.append(fetcher._retry_at[tp] - clock.now)
    assert pauses == [10, 20, 40, 80, 160, SETTINGS.backoff_ms]
    # A leader change: its new leader gets the short back-off again.
    fetcher.touch(tp)
    fetcher._sit_out(tp, NotLeaderOrFollowerError("x"))
    assert fetcher._retry_at[tp] - clock.now == 10
    await fetcher.stop()
    assert fetcher._retry_timers == {}


async def test_a_session_applies_what_the_leader_sends_and_survives_a_failed_fetch(
    tmp_path, replicas
):
    tp = TopicPartition("t", 0)
    replicas[tp] = follower(tmp_path, tp, 2)
    batch = build_batch([RecordInput(b"k", b"v")] * 3, timestamp_ms=1, partition_leader_epoch=0)
    calls = 0

    async def leader(leader_id: int, body: bytes, timeout_s: float) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise BrokerNotAvailableError("not yet")
        req = ReplicaFetchRequest.from_json(body)
        offset = req.partitions[0].fetch.fetch_offset
        if offset > 0:
            await asyncio.Event().wait()  # caught up: the long-poll waits
        return encode_response([FetchPartitionResponse("t", 0, 3, 0, 3, batch)])

    fetcher, applied = fetcher_over(replicas, leader)
    fetcher.start()
    try:
        fetcher.sync()
        await wait_until(lambda: applied == [tp])
        assert replicas[tp].log.log_end_offset == 3
        assert replicas[tp].high_watermark == 3
    finally:
        await fetcher.stop()


@pytest.mark.parametrize("failure", ["error answer", "bad data"])
async def test_a_failing_follower_partition_sits_out_for_the_backoff(tmp_path, replicas, failure):
    clock = FakeClock()
    bad, good = TopicPartition("t", 0), TopicPartition("t", 1)
    for tp in (bad, good):
        replicas[tp] = follower(tmp_path, tp, 2)
    fetcher, applied = fetcher_over(replicas, None, clock)
    following = fetcher._following(2)
    assert set(fetcher._fetchable(2, following)) == {bad, good}
    if failure == "error answer":
        broken = FetchPartitionResponse(
            bad.topic, bad.partition, -1, -1, -1, error=FencedLeaderEpochError("x")
        )
    else:
        broken = FetchPartitionResponse(bad.topic, bad.partition, 0, 0, 0, data=b"\x00" * 70)
    fine = FetchPartitionResponse(good.topic, good.partition, 0, 0, 0)
    assert await fetcher._apply_responses([broken, fine], 2) is True
    assert applied == [good]
    assert list(fetcher._fetchable(2, following)) == [good]
    clock.now += SETTINGS.backoff_ms
    assert set(fetcher._fetchable(2, following)) == {bad, good}


def test_a_session_fetch_compares_only_what_moved(tmp_path, replicas, monkeypatch):
    """Between full comparisons (a new set of followed partitions, or every
    `session_rescan_ms`) a fetch looks only at partitions an answer or a
    leader change touched; the followed set is reused while no role, leader
    or replica changed."""
    for n in range(20):
        tp = TopicPartition("t", n)
        replicas[tp] = follower(tmp_path, tp, 2)
    fetcher, _applied = fetcher_over(replicas, None)
    following = fetcher._following(2)
    assert len(following) == 20 and fetcher._following(2) is following
    asked: list[TopicPartition] = []
    real = Partition.follower_fetch_request

    def counting(self: Partition) -> PartitionFetch:
        asked.append(self.tp)
        return real(self)

    monkeypatch.setattr(Partition, "follower_fetch_request", counting)
    session = _FollowerSession()
    named, forgotten = session.build(
        following, following, 0, SETTINGS.session_rescan_ms, SETTINGS.request_partitions_max
    )
    assert len(named) == 20 and forgotten == ()
    session.answered(7, named, forgotten)
    asked.clear()
    # Idle: nothing touched, nothing compared, nothing named.
    later = SETTINGS.session_rescan_ms - 1
    assert session.build(
        following, following, later, SETTINGS.session_rescan_ms, SETTINGS.request_partitions_max
    ) == ({}, ())
    assert asked == []
    # An answer applied to one partition: only it is compared.
    moved = TopicPartition("t", 3)
    replicas[moved].log.append_as_follower(
        build_batch([RecordInput(b"k", b"v")], timestamp_ms=1, partition_leader_epoch=0)
    )
    session.changed.add(moved)
    named, forgotten = session.build(
        following, following, later, SETTINGS.session_rescan_ms, SETTINGS.request_partitions_max
    )
    assert asked == [moved] and list(named) == [moved] and forgotten == ()
    session.answered(7, named, forgotten)
    # A role change elsewhere makes a new followed set: all compared once.
    fetcher.touch(moved)
    again = fetcher._following(2)
    assert again is not following and again == following
    asked.clear()
    assert session.build(
        again, again, later, SETTINGS.session_rescan_ms, SETTINGS.request_partitions_max
    ) == ({}, ())
    assert len(asked) == 20


async def test_a_partition_that_stopped_following_unnoticed_leaves_the_followed_set(
    tmp_path, replicas
):
    """A role that changed without `touch` (an apply that failed midway) is
    noticed by the next answer for it."""
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)
    for p in (tp, other):
        replicas[p] = follower(tmp_path, p, 2)
    fetcher, _applied = fetcher_over(replicas, None)
    assert set(fetcher._following(2)) == {tp, other}
    replicas[tp].become_leader(Assignment((2, ME), (2, ME), ME, 1, 1), 0)
    assert set(fetcher._following(2)) == {tp, other}  # not touched: not seen yet
    answer = FetchPartitionResponse(
        tp.topic, tp.partition, -1, -1, -1, error=FencedLeaderEpochError("x")
    )
    assert await fetcher._apply_responses([answer], 2) is False
    assert set(fetcher._following(2)) == {other}

"""What an idle broker costs: replica fetch long-polls really wait, and one fetch
session per leader broker carries all the partitions followed from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lograft.brokers.partition import Assignment, IsrProposal
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import ReplicaFetchRequest, encode_answer
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition

WAIT_MS = 200
SETTINGS = BrokerSettings(
    replica_fetch_wait_max_ms=WAIT_MS,
    replica_fetch_backoff_ms=10,
    isr_check_interval_ms=50,
    produce_timeout_ms=5_000,
)


def _managers(tmp_path: Path, calls: list[tuple[int, int, int]]) -> dict[int, ReplicaManager]:
    """Three brokers in one loop; `calls` records (follower, leader, partitions) per fetch."""
    brokers: dict[int, ReplicaManager] = {}

    def transport(me: int):
        async def send(leader: int, body: bytes, timeout: float) -> bytes:
            req = ReplicaFetchRequest.from_json(body)
            calls.append((me, leader, len(req.partitions)))
            return encode_answer(await brokers[leader].replica_fetch(req))

        return send

    async def alter(tp: TopicPartition, proposal: IsrProposal) -> Assignment | None:
        return None

    for b in (1, 2, 3):
        brokers[b] = ReplicaManager(
            b,
            tmp_path / f"broker-{b}",
            SETTINGS,
            fetch_transport=transport(b),
            alter_partition=alter,
        )
    return brokers


def _publish(brokers: dict[int, ReplicaManager], leaders: dict[TopicPartition, int]) -> None:
    wanted = {
        tp: PartitionMeta("topic-id", Assignment((1, 2, 3), (1, 2, 3), leader, 1, 0))
        for tp, leader in leaders.items()
    }
    for rm in brokers.values():
        rm.apply_metadata(wanted)


async def test_idle_follower_long_polls_do_not_wake_each_other(tmp_path):
    """Two followers long-polling one idle leader: each fetch waits its max_wait_ms.

    Each served fetch used to wake every long-poll on its partitions, so the two
    followers' fetches woke each other in a loop: thousands of passes a second
    over every partition on a cluster doing nothing.
    """
    calls: list[tuple[int, int, int]] = []
    brokers = _managers(tmp_path, calls)
    tps = [TopicPartition("t", p) for p in range(20)]
    for rm in brokers.values():
        await rm.start()
    try:
        _publish(brokers, dict.fromkeys(tps, 1))
        leader = brokers[1]
        batch = build_batch([RecordInput(b"v")], timestamp_ms=1)
        for tp in tps:  # data everywhere, then nothing more
            await leader.produce(tp, batch, Acks.ALL)
        await asyncio.sleep(3 * WAIT_MS / 1000)  # followers learn the final HW

        passes = 0
        serve = leader._serve_fetches

        def counted(*args):  # type: ignore[no-untyped-def]
            nonlocal passes
            passes += 1
            return serve(*args)

        leader._serve_fetches = counted  # type: ignore[method-assign]
        idle_s = 1.0
        calls.clear()
        await asyncio.sleep(idle_s)
        # Two followers, one request per WAIT_MS each: about 10 in a second,
        # and one pass over the partitions per request (on arrival: a deadline
        # reached with nothing changed answers what that pass found).
        assert len(calls) <= 2 * idle_s * 1000 / WAIT_MS + 4
        assert passes <= len(calls) + 2, f"{passes} fetch passes for {len(calls)} requests"
        # Incremental sessions: an idle fetch names no partition (at most a
        # few straddle the window's start).
        assert sum(n > 0 for _, _, n in calls) <= 2, calls
        # Every partition still has its HW on the followers.
        for b in (2, 3):
            assert all(brokers[b].partitions[tp].high_watermark == 1 for tp in tps)
    finally:
        for rm in brokers.values():
            await rm.stop()


async def test_a_high_watermark_move_still_wakes_a_consumer_long_poll(tmp_path):
    calls: list[tuple[int, int, int]] = []
    brokers = _managers(tmp_path, calls)
    tp = TopicPartition("t", 0)
    for rm in brokers.values():
        await rm.start()
    try:
        _publish(brokers, {tp: 1})
        leader = brokers[1]
        waiting = asyncio.create_task(leader.fetch(tp, 0, max_bytes=1 << 20, max_wait_ms=10_000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        # acks=1: only a follower fetch moves the HW, and that must wake the consumer.
        await leader.produce(tp, build_batch([RecordInput(b"v")], timestamp_ms=1), Acks.LEADER)
        got = await asyncio.wait_for(waiting, 5)
        assert got.data and got.high_watermark == 1
    finally:
        for rm in brokers.values():
            await rm.stop()


async def test_one_fetch_session_per_leader_broker_carries_all_its_partitions(tmp_path):
    """Broker 1 follows 60 partitions led by brokers 2 and 3: two fetchers, two sessions."""
    calls: list[tuple[int, int, int]] = []
    brokers = _managers(tmp_path, calls)
    tps = [TopicPartition("wide", p) for p in range(60)]
    for rm in brokers.values():
        await rm.start()
    try:
        _publish(brokers, {tp: 2 + tp.partition % 2 for tp in tps})
        await asyncio.sleep(2 * WAIT_MS / 1000)
        follower = brokers[1]
        assert sorted(follower.fetcher.leaders) == [2, 3]
        fetchers = [t for t in asyncio.all_tasks() if t.get_name().startswith("replica-fetcher-")]
        # 1 follows 2 and 3; 2 follows 3 and 3 follows 2 (1 leads nothing).
        assert len(fetchers) == 4
        from_1 = [(leader, n) for me, leader, n in calls if me == 1]
        assert {leader for leader, _ in from_1} == {2, 3}
        # Each session's first fetch names all 30; the incremental ones that
        # follow name only what changed, never more.
        for leader in (2, 3):
            named = [n for b, n in from_1 if b == leader]
            assert named[0] == 30 and all(n <= 30 for n in named[1:])
            assert len(named) > 1 and min(named[1:]) == 0
    finally:
        for rm in brokers.values():
            await rm.stop()

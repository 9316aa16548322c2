"""`flush_policy = group_commit` in the brokers: the high watermark (hence
acks=all) moves only to the smallest durable offset of the ISR, the leader's
included; followers report what they fsynced; commits run off the loop and
one covers the appends of many concurrent producers."""

from __future__ import annotations

import asyncio
import os
import threading

from lograft.brokers.group_commit import GroupCommitter
from lograft.brokers.log_work import THREAD_NAME_PREFIX, LogWork
from lograft.brokers.partition import Assignment, Partition, PartitionSettings
from lograft.brokers.replica_manager import PartitionMeta
from lograft.brokers.replica_state import FollowerStateTracker
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import (
    FetchPartitionRequest,
    PartitionFetch,
    ReplicaFetchRequest,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.config import FlushPolicy, LogConfig
from lograft.storage.log import Log

from .test_replica_manager import TP, Cluster

GROUP_COMMIT = {"flush_policy": "group_commit"}
PART = TopicPartition("t", 0)


def _batch(tag: str = "v", n: int = 3) -> bytes:
    return build_batch([RecordInput(f"{tag}{i}".encode(), b"k") for i in range(n)], timestamp_ms=1)


def _replica(tmp_path, broker: int) -> Partition:
    log = Log(tmp_path / f"b{broker}" / "t-0", LogConfig(flush_policy=FlushPolicy.GROUP_COMMIT))
    return Partition(PART, log, broker, PartitionSettings())


def _replicate(leader: Partition, follower: Partition) -> None:
    res = leader.on_follower_fetch(
        follower.broker_id, follower.follower_fetch_request(), 1 << 20, 0
    )
    follower.apply_fetch_response(
        res.data,
        leader_high_watermark=res.high_watermark,
        leader_log_start_offset=res.log_start_offset,
        diverging=res.diverging,
    )


def test_the_high_watermark_waits_for_every_isr_member_to_fsync(tmp_path):
    leader, f2, f3 = (_replica(tmp_path, b) for b in (1, 2, 3))
    a = Assignment((1, 2, 3), (1, 2, 3), 1, 1, 0)
    leader.become_leader(a, now_ms=0)
    f2.become_follower(a)
    f3.become_follower(a)
    leader.append_records(_batch(), Acks.ALL)
    for f in (f2, f3):
        _replicate(leader, f)  # copies the batch (page cache only)
        _replicate(leader, f)  # reports LEO 3, durable 0
    assert leader.high_watermark == 0, "under none this would be 3: every LEO is"
    f2.log.commit()
    f3.log.commit()
    for f in (f2, f3):
        _replicate(leader, f)
    assert leader.high_watermark == 0, "the leader itself has not fsynced"
    leader.log.commit()
    assert leader.maybe_advance_high_watermark()
    assert leader.high_watermark == 3


def test_a_followers_durable_offset_is_held_to_what_it_fetched():
    tracker = FollowerStateTracker(1)
    tracker.become_leader((1, 2), (1, 2), 0)
    assert tracker.on_fetch(2, 5, 10, 0, durable_offset=99).durable == 5, "no more than held"
    assert tracker.on_fetch(2, 6, 10, 0, durable_offset=-7).durable == -1, "unknown"
    assert tracker.on_fetch(2, 6, 10, 0).durable == -1, "a follower that does not report"


def test_the_durable_offset_travels_in_the_replica_fetch_request():
    req = ReplicaFetchRequest(
        2, 500, 1, 1 << 20, 1 << 20, [FetchPartitionRequest("t", 0, PartitionFetch(7, 1, 1, 5))]
    )
    back = ReplicaFetchRequest.from_json(req.to_json())
    assert back.partitions[0].fetch.durable_offset == 5
    old = b'{"replica_id": 2, "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 7}]}'
    assert ReplicaFetchRequest.from_json(old).partitions[0].fetch.durable_offset == -1


async def test_one_commit_covers_the_appends_made_while_another_ran(tmp_path, monkeypatch):
    log = Log(tmp_path / "p", LogConfig(flush_policy=FlushPolicy.GROUP_COMMIT))
    work = LogWork(2)
    threads: list[str] = []
    gate = threading.Event()
    real = os.fdatasync

    def gated_fdatasync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        assert gate.wait(5)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", gated_fdatasync)
    durable: list[int] = []
    committer = GroupCommitter(log, work, durable.append)
    try:
        log.append(_batch(), leader_epoch=0)
        committer.kick()  # the first commit takes offsets 0..2 and blocks in its fsync
        while not threads:
            await asyncio.sleep(0.001)  # until the commit is in its fsync
        for i in range(20):  # twenty producers append while it runs
            log.append(_batch(f"p{i}"), leader_epoch=0)
            committer.kick()
        gate.set()
        assert await committer.sync() == log.log_end_offset == 63
        assert committer.commits == 2, "the 20 appends shared the second commit"
        assert durable == [3, 63]
        assert all(t.startswith(THREAD_NAME_PREFIX) for t in threads), "never on the loop"
    finally:
        gate.set()
        await committer.close()
        work.close()
        log.close()


async def test_acks_all_under_group_commit_returns_once_the_isr_fsynced(tmp_path):
    c = Cluster(tmp_path)
    await c.start()
    try:
        assert c.assignment is not None
        for rm in c.brokers.values():
            rm.apply_metadata({TP: PartitionMeta("topic-id-1", c.assignment, GROUP_COMMIT)})
        results = await asyncio.gather(
            *(c.brokers[1].produce(TP, _batch(f"p{i}"), Acks.ALL) for i in range(10))
        )
        end = max(r.last_offset for r in results) + 1
        leader = c.brokers[1].partitions[TP]
        assert leader.high_watermark >= end
        assert leader.log.durable_offset >= end
        # Each follower had fsynced the batches before the fetch that moved the HW.
        for b in (2, 3):
            assert c.brokers[b].partitions[TP].log.durable_offset >= end
        committer = leader.committer
        # How many commits the ten appends shared depends on how the storage
        # thread's fsyncs interleave with them (on a loaded machine each can
        # finish before the next append): sharing is pinned down by the
        # deterministic test above; here it is enough that commits ran.
        assert committer is not None and committer.commits >= 1, committer.commits
    finally:
        await c.stop()


async def test_a_failing_commit_holds_the_durable_offset_without_stalling_its_caller(
    tmp_path, monkeypatch
):
    from lograft.errors import StorageError

    log = Log(tmp_path / "p", LogConfig(flush_policy=FlushPolicy.GROUP_COMMIT))
    work = LogWork(1)

    def broken() -> int:
        raise StorageError("disk gone")

    monkeypatch.setattr(log, "commit", broken)
    committer = GroupCommitter(log, work, lambda _d: None)
    try:
        log.append(_batch(), leader_epoch=0)
        assert await asyncio.wait_for(committer.sync(), 5) == 0
        assert committer.failures == 1 and committer.commits == 0
    finally:
        await committer.close()
        work.close()
        log.close()

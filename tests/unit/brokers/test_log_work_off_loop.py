"""Blocking log work on the produce and fetch paths runs where log_work.py
says: an fsync, and appends and reads of more than INLINE_BYTES_MAX bytes, in
a storage thread (never on the event loop); small work inline. Moving it
keeps the semantics: one partition's appends stay in arrival order (the
producer state sees each before the next), a role change waits for a write
under way, and a write that finds the leadership moved is decided again.

Before the change every one of these ran on the loop: the fsync test then
stalls the loop in the gated fsync and fails, and the thread-name tests see
MainThread."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lograft.brokers.log_work import INLINE_BYTES_MAX, THREAD_NAME_PREFIX
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import (
    BrokerSettings,
    ConsumerRead,
    PartitionMeta,
    ReplicaManager,
)
from lograft.errors import NotLeaderOrFollowerError
from lograft.protocol.batch import RecordInput, build_batch, iter_batches
from lograft.protocol.fetch_wire import (
    FetchPartitionRequest,
    FetchPartitionResponse,
    PartitionFetch,
    ReplicaFetchRequest,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
BIG = {"max_message_bytes": str(8 * 1024 * 1024)}
FSYNC = {"flush_policy": "every_batch"}


def batch(nbytes: int, **kw: Any) -> bytes:
    """One batch of 1 KiB records, about `nbytes` long."""
    count = max(1, nbytes // 1024)
    return build_batch(
        [RecordInput(None, b"v" * 1000)] * count, timestamp_ms=time.time_ns() // 10**6, **kw
    )


def meta(leader: int = 1, epoch: int = 0, replicas: tuple[int, ...] = (1,), **config: str):
    return PartitionMeta("id-t", Assignment(replicas, replicas, leader, epoch, epoch), config)


@pytest.fixture
def rm(tmp_path: Path) -> ReplicaManager:
    """A broker of its own (each test stops it: that needs the test's loop)."""
    # Follower reads up to 4 MiB: a leader serves at most its own fetch sizes.
    settings = BrokerSettings(
        storage_threads_max=2,
        replica_fetch_max_bytes=16 << 20,
        replica_fetch_partition_max_bytes=16 << 20,
    )
    return ReplicaManager(1, tmp_path / "b1", settings)


def record_threads(target: object, name: str) -> list[str]:
    """Wrap `target.name` to note the thread each call runs on."""
    seen: list[str] = []
    real = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    setattr(target, name, wrapper)
    return seen


def on_storage_thread(names: list[str]) -> bool:
    return bool(names) and all(n.startswith(THREAD_NAME_PREFIX) for n in names)


class GatedFsync:
    """os.fsync that, once armed, holds its first caller until released: on
    a storage thread the loop goes on and releases it; on the loop nothing
    can, so the call fails after `timeout_s` (and the test with it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, timeout_s: float = 5.0) -> None:
        self.real = os.fsync
        self.timeout_s = timeout_s
        self.entered = threading.Event()
        self.release = threading.Event()
        self.thread = ""
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        if not self.entered.is_set():
            self.thread = threading.current_thread().name
            self.entered.set()
            if not self.release.wait(self.timeout_s):
                raise OSError(5, "fsync held: it ran on the event loop")
        self.real(fd)


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_an_fsynced_append_runs_off_the_loop(rm, monkeypatch):
    rm.apply_metadata({TP: meta(**FSYNC)})
    try:
        gate = GatedFsync(monkeypatch)
        produce = asyncio.create_task(rm.produce(TP, batch(1024), Acks.ALL))
        await wait_until(gate.entered.is_set)
        # The loop runs while the fsync is held: this coroutine got here.
        assert gate.thread.startswith(THREAD_NAME_PREFIX)
        gate.release.set()
        result = await produce
        assert (result.first_offset, rm.partitions[TP].high_watermark) == (0, 1)
    finally:
        await rm.stop()


async def test_appends_over_the_inline_limit_run_off_the_loop_small_ones_inline(rm):
    rm.apply_metadata({TP: meta(**BIG)})
    try:
        threads = record_threads(rm.partitions[TP].log, "append")
        await rm.produce(TP, batch(64 * 1024), Acks.LEADER)
        assert threads == ["MainThread"]  # a hop would cost more than the append
        threads.clear()
        await rm.produce(TP, batch(INLINE_BYTES_MAX + 64 * 1024), Acks.LEADER)
        assert on_storage_thread(threads)
    finally:
        await rm.stop()


async def test_reads_over_the_inline_limit_run_off_the_loop_small_ones_inline(rm):
    replicas = (1, 2)
    rm.apply_metadata({TP: meta(replicas=replicas, **BIG)})
    try:
        part = rm.partitions[TP]
        for _ in range(4):
            await rm.produce(TP, batch(512 * 1024), Acks.LEADER)
        part.high_watermark = part.log.log_end_offset  # as if follower 2 had copied it all
        threads = record_threads(part.log, "read")
        big, small = 4 * INLINE_BYTES_MAX, 64 * 1024

        await rm.fetch(TP, 0, max_bytes=small, max_wait_ms=0)
        assert threads == ["MainThread"]
        threads.clear()
        got = await rm.fetch(TP, 0, max_bytes=big, max_wait_ms=0)
        assert on_storage_thread(threads) and len(got.data) > INLINE_BYTES_MAX
        threads.clear()

        reads = [ConsumerRead(TP, 0, big)]
        [answer] = await rm.consumer_fetch(reads, max_wait_ms=0, max_bytes=big)
        assert on_storage_thread(threads) and len(answer.data) > INLINE_BYTES_MAX
        threads.clear()

        def follower_fetch(partition_max_bytes: int) -> ReplicaFetchRequest:
            fetch = PartitionFetch(fetch_offset=0, current_leader_epoch=0)
            return ReplicaFetchRequest(
                2, 0, 1, big, partition_max_bytes, [FetchPartitionRequest("t", 0, fetch)]
            )

        [answer] = (await rm.replica_fetch(follower_fetch(small))).partitions
        assert threads == ["MainThread"] and answer.error is None
        threads.clear()
        [answer] = (await rm.replica_fetch(follower_fetch(big))).partitions
        assert on_storage_thread(threads) and len(answer.data) > INLINE_BYTES_MAX
    finally:
        await rm.stop()


async def test_a_large_follower_append_runs_off_the_loop(rm):
    rm.apply_metadata({TP: meta(leader=2, replicas=(1, 2), **BIG)})
    try:
        part = rm.partitions[TP]
        threads = record_threads(part.log, "append_as_follower")
        # The first batch of a leader epoch writes the epoch checkpoint
        # first (two fsyncs): in a thread, however small.
        first = batch(1024, partition_leader_epoch=0)
        answer = FetchPartitionResponse("t", 0, 1, 0, 1, first)
        assert await rm.fetcher._apply_responses([answer], 2)
        assert on_storage_thread(threads)
        assert part.log.epochs.entries() == [(0, 0)]
        threads.clear()
        small = batch(1024, base_offset=1, partition_leader_epoch=0)
        answer = FetchPartitionResponse("t", 0, 2, 0, 2, small)
        assert await rm.fetcher._apply_responses([answer], 2)
        assert threads == ["MainThread"]
        threads.clear()
        large = batch(INLINE_BYTES_MAX + 64 * 1024, base_offset=2, partition_leader_epoch=0)
        leo = 2 + sum(h.last_offset_delta + 1 for _pos, h in iter_batches(large))
        answer = FetchPartitionResponse("t", 0, leo, 0, leo, large)
        assert await rm.fetcher._apply_responses([answer], 2)
        assert on_storage_thread(threads)
        assert (part.log.log_end_offset, part.high_watermark) == (leo, leo)
    finally:
        await rm.stop()


async def test_first_batches_of_a_new_epoch_on_several_partitions_are_applied_side_by_side(rm):
    """Each writes its partition's epoch checkpoint (two fsyncs): one job per
    partition, so they run on the storage threads together, not one after
    another in one job (before: the barrier below broke after its timeout
    and both applies failed)."""
    other = TopicPartition("t", 1)
    rm.apply_metadata(
        {tp: meta(leader=2, replicas=(1, 2)) for tp in (TP, other)},
    )
    try:
        both = threading.Barrier(2, timeout=5)
        threads: list[str] = []
        for tp in (TP, other):
            part_log = rm.partitions[tp].log
            real = part_log.append_as_follower

            def meet(data: bytes, _real: Callable[[bytes], Any] = real) -> Any:
                threads.append(threading.current_thread().name)
                both.wait()  # both partitions' appends under way at once
                return _real(data)

            part_log.append_as_follower = meet  # type: ignore[method-assign]
        answers = [
            FetchPartitionResponse("t", n, 1, 0, 1, batch(1024, partition_leader_epoch=0))
            for n in (0, 1)
        ]
        assert await rm.fetcher._apply_responses(answers, 2)
        assert on_storage_thread(threads) and len(set(threads)) == 2
        for tp in (TP, other):
            part = rm.partitions[tp]
            assert part.log.epochs.entries() == [(0, 0)]
            assert (part.log.log_end_offset, part.high_watermark) == (1, 1)
    finally:
        await rm.stop()


async def test_offloaded_appends_of_one_partition_keep_their_order(rm):
    """Ten idempotent batches of one producer, produced at once, each write
    in a thread (fsync): each must find the one before it in the producer
    state (else OUT_OF_ORDER_SEQUENCE), and the offsets follow the order."""
    rm.apply_metadata({TP: meta(**FSYNC)})
    try:
        threads = record_threads(rm.partitions[TP].log, "append")
        batches = [batch(1024, producer_id=7, producer_epoch=0, base_sequence=i) for i in range(10)]
        results = await asyncio.gather(*(rm.produce(TP, b, Acks.LEADER) for b in batches))
        assert [r.first_offset for r in results] == list(range(10))
        assert on_storage_thread(threads) and len(threads) == 10
    finally:
        await rm.stop()


async def test_a_role_change_waits_for_the_write_under_way(rm, monkeypatch):
    rm.apply_metadata({TP: meta(**FSYNC)})
    try:
        gate = GatedFsync(monkeypatch)
        produce = asyncio.create_task(rm.produce(TP, batch(1024), Acks.ALL))
        await wait_until(gate.entered.is_set)
        # Released from another thread: the loop is about to wait for the
        # replica's role lock, which the write holds.
        threading.Timer(0.2, gate.release.set).start()
        rm.apply_metadata({TP: meta(leader=2, epoch=1, replicas=(1, 2))})
        part = rm.partitions[TP]
        # The write finished before the replica became a follower ...
        assert part.role.value == "follower" and part.log.log_end_offset == 1
        # ... and the acks=all produce is told what a waiter is told then.
        with pytest.raises(NotLeaderOrFollowerError):
            await produce
    finally:
        await rm.stop()


async def test_a_write_that_finds_a_new_leader_epoch_is_decided_again(tmp_path, monkeypatch):
    """The only storage thread is busy, so the append waits for it; meanwhile
    this broker is elected leader again in epoch 1. The write must not land
    as epoch 0 after epoch 1 began: it is prepared again and written in 1."""
    rm = ReplicaManager(1, tmp_path / "b1", BrokerSettings(storage_threads_max=1))
    other = TopicPartition("t", 1)
    rm.apply_metadata({TP: meta(**FSYNC), other: meta(**FSYNC)})
    try:
        gate = GatedFsync(monkeypatch)
        busy = asyncio.create_task(rm.produce(other, batch(1024), Acks.LEADER))
        await wait_until(gate.entered.is_set)
        produce = asyncio.create_task(rm.produce(TP, batch(1024), Acks.LEADER))
        await wait_until(lambda: rm.partitions[TP].append_lane.locked())
        rm.apply_metadata({TP: meta(epoch=1, **FSYNC), other: meta(**FSYNC)})
        gate.release.set()
        await busy
        result = await produce
        part = rm.partitions[TP]
        assert result.first_offset == 0
        assert [h.partition_leader_epoch for _p, h in iter_batches(part.log.read(0, 1 << 20))] == [
            1
        ]
        assert part.log.epochs.entries() == [(1, 0)]
    finally:
        await rm.stop()

"""Three replica managers in one event loop, wired by an in-process transport."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import msgspec
import pytest

from lograft.brokers import replica_manager
from lograft.brokers.partition import Assignment, IsrProposal
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import (
    BrokerNotAvailableError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.batch import RecordInput, build_batch, iter_records
from lograft.protocol.fetch_wire import ReplicaFetchRequest, encode_answer
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)
FAST = BrokerSettings(
    replica_fetch_wait_max_ms=50,
    replica_fetch_backoff_ms=10,
    isr_check_interval_ms=20,
    replica_lag_time_max_ms=200,
    produce_timeout_ms=5_000,
)


class Cluster:
    def __init__(self, tmp_path, settings: BrokerSettings = FAST) -> None:
        self.cut: set[int] = set()
        self.isr_changes: list[tuple[TopicPartition, IsrProposal]] = []
        self.brokers = {
            b: ReplicaManager(
                b,
                tmp_path / f"broker-{b}",
                settings,
                fetch_transport=self._transport(b),
                alter_partition=self._alter,
            )
            for b in (1, 2, 3)
        }
        self.assignment: Assignment | None = None

    def _transport(self, me: int):
        async def send(leader: int, body: bytes, timeout: float) -> bytes:
            if me in self.cut or leader in self.cut:
                await asyncio.sleep(0.01)
                raise BrokerNotAvailableError("cut")
            req = ReplicaFetchRequest.from_json(body)
            return encode_answer(await self.brokers[leader].replica_fetch(req))

        return send

    async def _alter(self, tp: TopicPartition, proposal: IsrProposal) -> Assignment:
        self.isr_changes.append((tp, proposal))
        assert self.assignment is not None
        a = self.assignment
        self.assignment = Assignment(
            a.replicas, proposal.isr, a.leader, a.leader_epoch, a.partition_epoch + 1
        )
        self.publish()
        return self.assignment

    def publish(self) -> None:
        assert self.assignment is not None
        for rm in self.brokers.values():
            rm.apply_metadata({TP: PartitionMeta("topic-id-1", self.assignment)})

    async def start(self, leader: int = 1) -> None:
        for rm in self.brokers.values():
            await rm.start()
        self.assignment = Assignment((1, 2, 3), (1, 2, 3), leader, 1, 0)
        self.publish()

    async def stop(self) -> None:
        for rm in self.brokers.values():
            await rm.stop()


def _batch(tag: str, n: int = 5) -> bytes:
    return build_batch([RecordInput(f"{tag}-{i}".encode(), b"k") for i in range(n)], timestamp_ms=1)


def _values(rm: ReplicaManager) -> list[bytes]:
    part = rm.partitions[TP]
    return [r.value for r in iter_records(part.log.read(0, 1 << 30))]


async def test_acks_all_returns_once_replicated_everywhere(tmp_path):
    c = Cluster(tmp_path)
    await c.start()
    try:
        res = await c.brokers[1].produce(TP, _batch("a"), Acks.ALL)
        assert (res.first_offset, res.last_offset) == (0, 4)
        assert c.brokers[1].partitions[TP].high_watermark >= 5
        for b in (2, 3):
            assert _values(c.brokers[b])[:5] == [f"a-{i}".encode() for i in range(5)]
    finally:
        await c.stop()


async def test_acks_all_times_out_when_the_isr_does_not_confirm(tmp_path):
    # Followers cut but still in the ISR (a lag allowance far longer than the test).
    slow_isr = msgspec.structs.replace(FAST, replica_lag_time_max_ms=600_000)
    c = Cluster(tmp_path, slow_isr)
    await c.start()
    try:
        leader = c.brokers[1]
        await leader.produce(TP, _batch("a"), Acks.ALL)
        c.cut.update({2, 3})
        with pytest.raises(RequestTimedOutError) as caught:
            await leader.produce(TP, _batch("b"), Acks.ALL, timeout_ms=50)
        assert (caught.value.details["first_offset"], caught.value.details["last_offset"]) == (5, 9)
        # The expired waiter is done, so the partition skips it when the HW moves.
        assert all(w.future.done() for w in leader.partitions[TP]._waiters)
    finally:
        await c.stop()


async def test_acks_all_with_an_isr_of_one_arms_no_deadline(tmp_path, monkeypatch):
    def no_wait(*_args: object) -> None:
        raise AssertionError("a produce whose HW is already there waited")

    monkeypatch.setattr(replica_manager, "wait_future", no_wait)
    rm = ReplicaManager(1, tmp_path / "alone", FAST)
    await rm.start()
    try:
        meta = PartitionMeta("topic-id-1", Assignment((1,), (1,), 1, 1, 0))
        rm.apply_metadata({TP: meta})
        res = await rm.produce(TP, _batch("a"), Acks.ALL)
        assert (res.first_offset, rm.partitions[TP].high_watermark) == (0, 5)
    finally:
        await rm.stop()


async def test_consumer_fetch_long_polls_until_data_is_committed(tmp_path):
    c = Cluster(tmp_path)
    await c.start()
    try:
        leader = c.brokers[1]
        waiting = asyncio.create_task(leader.fetch(TP, 0, max_bytes=1 << 20, max_wait_ms=5000))
        await asyncio.sleep(0)
        assert not waiting.done()
        await leader.produce(TP, _batch("x"), Acks.ALL)
        got = await asyncio.wait_for(waiting, 5)
        assert next(r.value for r in iter_records(got.data)) == b"x-0"
        empty = await leader.fetch(TP, got.high_watermark, max_bytes=1 << 20, max_wait_ms=30)
        assert empty.data == b""
    finally:
        await c.stop()


async def test_a_cut_follower_leaves_the_isr_and_rejoins(tmp_path):
    c = Cluster(tmp_path)
    await c.start()
    try:
        await c.brokers[1].produce(TP, _batch("a"), Acks.ALL)
        c.cut.add(3)
        await c.brokers[1].produce(TP, _batch("b"), Acks.LEADER)

        async def isr_is(expected: tuple[int, ...]) -> None:
            while c.assignment is None or c.assignment.isr != expected:
                await asyncio.sleep(0.01)  # polling a condition; bounded by wait_for

        await asyncio.wait_for(isr_is((1, 2)), 5)
        # With 3 cut, acks=all still works with min ISR 2.
        await c.brokers[1].produce(TP, _batch("c"), Acks.ALL)
        c.cut.clear()
        await asyncio.wait_for(isr_is((1, 2, 3)), 5)
        assert _values(c.brokers[3]) == _values(c.brokers[1])
    finally:
        await c.stop()


async def test_leader_change_truncates_the_old_leaders_unreplicated_tail(tmp_path):
    c = Cluster(tmp_path)
    await c.start()
    try:
        await c.brokers[1].produce(TP, _batch("kept"), Acks.ALL)
        c.cut.add(1)
        await c.brokers[1].produce(TP, _batch("lost"), Acks.LEADER)  # only on 1
        # The controller elects 2 (epoch 2) while 1 is cut off.
        c.assignment = Assignment((1, 2, 3), (2, 3), 2, 2, 5)
        c.publish()
        await c.brokers[2].produce(TP, _batch("new"), Acks.ALL)
        c.cut.clear()

        async def converged() -> None:
            while _values(c.brokers[1]) != _values(c.brokers[2]):
                await asyncio.sleep(0.01)  # polling a condition; bounded by wait_for

        await asyncio.wait_for(converged(), 5)
        values = _values(c.brokers[1])
        assert not any(v.startswith(b"lost") for v in values)
        assert values[-1] == b"new-4"
    finally:
        await c.stop()


async def test_unassigned_replicas_are_deleted(tmp_path):
    c = Cluster(tmp_path)
    await c.start()
    try:
        await c.brokers[1].produce(TP, _batch("a"), Acks.ALL)
        directory = c.brokers[3].partitions[TP].log.directory
        for rm in c.brokers.values():
            rm.apply_metadata({})
        assert not directory.exists()
        with pytest.raises(UnknownTopicOrPartitionError):
            await c.brokers[1].produce(TP, _batch("a"), Acks.LEADER)
    finally:
        await c.stop()


async def test_open_logs_opens_off_the_loop_and_apply_takes_them(tmp_path, monkeypatch):
    import threading

    import lograft.brokers.replica_manager as rm_module

    loop_thread = threading.get_ident()
    opened_in: list[int] = []
    real_log = rm_module.Log

    def spy_log(*args, **kwargs):
        opened_in.append(threading.get_ident())
        return real_log(*args, **kwargs)

    monkeypatch.setattr(rm_module, "Log", spy_log)
    rm = ReplicaManager(1, tmp_path, FAST)
    await rm.start()
    try:
        other = TopicPartition("orders", 1)
        not_mine = TopicPartition("orders", 2)
        wanted = {
            TP: PartitionMeta("topic-id-1", Assignment((1, 2), (1, 2), 1, 1, 0)),
            other: PartitionMeta("topic-id-1", Assignment((2, 1), (2, 1), 2, 1, 0)),
            not_mine: PartitionMeta("topic-id-1", Assignment((2, 3), (2, 3), 2, 1, 0)),
        }
        await rm.open_logs(wanted)
        assert len(opened_in) == 2 and loop_thread not in opened_in
        rm.apply_metadata(wanted)
        assert len(opened_in) == 2, "apply_metadata opened a log again"
        assert set(rm.partitions) == {TP, other}
        assert rm.partitions[TP].is_leader
        await rm.open_logs(wanted)  # nothing new to open
        assert len(opened_in) == 2

        # A log opened for a view that is never applied is closed by the next
        # apply that does not want it.
        extra = TopicPartition("orders", 3)
        more = {**wanted, extra: PartitionMeta("topic-id-1", Assignment((1,), (1,), 1, 1, 0))}
        await rm.open_logs(more)
        leftover = rm._opened[extra]
        rm.apply_metadata(wanted)
        assert extra not in rm._opened and extra not in rm.partitions
        assert leftover._closed
    finally:
        await rm.stop()


async def test_the_default_min_isr_is_capped_at_the_replication_factor(tmp_path):
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=2))
    await rm.start()
    try:
        single = Assignment((1,), (1,), 1, 1, 0)
        rm.apply_metadata({TP: PartitionMeta("id", single)})
        res = await rm.produce(TP, _batch("solo"), Acks.ALL)
        assert res.last_offset == 4
        assert rm.partitions[TP].high_watermark == 5, "acks=all records become visible"
        explicit = TopicPartition("strict", 0)
        rm.apply_metadata(
            {
                TP: PartitionMeta("id", single),
                explicit: PartitionMeta("id2", single, {"min_insync_replicas": "2"}),
            }
        )
        with pytest.raises(NotEnoughReplicasError):
            await rm.produce(explicit, _batch("x"), Acks.ALL)
    finally:
        await rm.stop()


async def test_changed_topic_configs_reach_the_live_replica(tmp_path):
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    try:
        single = Assignment((1,), (1,), 1, 1, 0)
        rm.apply_metadata({TP: PartitionMeta("id", single)})
        part = rm.partitions[TP]
        assert part.log.config.retention_ms == 7 * 24 * 3600 * 1000
        rm.apply_metadata(
            {TP: PartitionMeta("id", single, {"retention_ms": "1000", "min_insync_replicas": "2"})}
        )
        assert rm.partitions[TP] is part, "the same replica, reconfigured"
        assert part.log.config.retention_ms == 1000
        assert part.log.segments()[0].config.retention_ms == 1000
        with pytest.raises(NotEnoughReplicasError):
            await rm.produce(TP, _batch("x"), Acks.ALL)
    finally:
        await rm.stop()


async def test_metadata_that_arrives_once_stop_has_begun_is_not_applied(tmp_path):
    """A controller's update reaching a stopping broker (here: after its
    stop) creates no replica: opening its log would clear the checkpoint
    .tmp files of the logs being closed (a test of the whole cluster
    failed on that), and nothing would close it."""
    c = Cluster(tmp_path)
    await c.start()
    await c.stop()
    late = TopicPartition("late", 0)
    c.brokers[1].apply_metadata(
        {late: PartitionMeta("topic-id-2", Assignment((1, 2, 3), (1, 2, 3), 1, 1, 0))}
    )
    await c.brokers[1].open_logs(
        {late: PartitionMeta("topic-id-2", Assignment((1, 2, 3), (1, 2, 3), 1, 1, 0))}
    )
    assert late not in c.brokers[1].partitions
    assert not (tmp_path / "broker-1" / "logs" / "late-0").exists()


async def test_logs_opened_while_stop_begins_are_closed_not_kept(tmp_path):
    """`open_logs` whose thread is still opening when `stop` begins: stop
    closes the logs it holds, so these are closed by open_logs itself."""
    c = Cluster(tmp_path)
    rm = c.brokers[1]
    await rm.start()
    late = TopicPartition("late", 0)
    gate = threading.Event()
    opened: list[Any] = []
    real = rm._open_logs

    def held_open(new: Any) -> Any:
        gate.wait(10)
        got = real(new)
        opened.extend(got.values())
        return got

    rm._open_logs = held_open  # type: ignore[method-assign]
    meta = PartitionMeta("topic-id-2", Assignment((1, 2, 3), (1, 2, 3), 1, 1, 0))
    opening = asyncio.create_task(rm.open_logs({late: meta}))
    stopping = asyncio.create_task(rm.stop())
    while not rm._stopping:
        await asyncio.sleep(0.001)  # polling a condition, not a sync point
    gate.set()
    await opening
    await stopping
    assert late not in rm._opened
    assert len(opened) == 1 and opened[0].closed
    for b in (2, 3):
        await c.brokers[b].stop()

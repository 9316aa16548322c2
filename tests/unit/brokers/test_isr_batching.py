"""The leader sends the ISR changes one check finds as one batched
AlterPartition (split at ALTER_PARTITION_BATCH_MAX), and applies each
partition's answer on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lograft.brokers import replica_manager as rm_module
from lograft.brokers.partition import Assignment, IsrProposal
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import FencedLeaderEpochError, LograftError, NotLeaderOrFollowerError
from lograft.protocol.topic_partition import TopicPartition

LAG_MS = 100
SETTINGS = BrokerSettings(replica_lag_time_max_ms=LAG_MS, replica_fetch_backoff_ms=200)
TPS = [TopicPartition("t", p) for p in range(5)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


Changes = Sequence[tuple[TopicPartition, IsrProposal]]


class Controller:
    """Accepts every change but one partition's, which it refuses as fenced."""

    def __init__(self, refuse: TopicPartition) -> None:
        self.refuse = refuse
        self.calls: list[list[TopicPartition]] = []

    async def alter(self, changes: Changes) -> Mapping[TopicPartition, Assignment | LograftError]:
        self.calls.append([tp for tp, _p in changes])
        out: dict[TopicPartition, Assignment | LograftError] = {}
        for tp, proposal in changes:
            if tp == self.refuse:
                out[tp] = FencedLeaderEpochError("stale")
            else:
                out[tp] = Assignment(
                    (1, 2, 3), proposal.isr, 1, proposal.leader_epoch, proposal.partition_epoch + 1
                )
        return out


def leader_of_all(tmp_path: Path, clock: FakeClock, controller: Controller) -> ReplicaManager:
    rm = ReplicaManager(
        1, tmp_path / "b1", SETTINGS, alter_partitions=controller.alter, lag_clock=clock
    )
    rm.apply_metadata(
        {tp: PartitionMeta("id", Assignment((1, 2, 3), (1, 2, 3), 1, 0, 0)) for tp in TPS}
    )
    return rm


async def test_one_check_sends_every_change_in_one_request(tmp_path):
    clock, controller = FakeClock(), Controller(refuse=TPS[3])
    rm = leader_of_all(tmp_path, clock, controller)
    try:
        assert rm.check_isr() == []  # followers still within their grace period
        clock.now += LAG_MS + 1  # nobody fetched: every follower is out of sync
        tasks = rm.check_isr()
        assert len(tasks) == 1
        await tasks[0]
        assert controller.calls == [TPS]
        for tp in TPS:
            part = rm.partitions[tp]
            assert part.isr_in_flight is None
            if tp == TPS[3]:
                assert (part.isr, part.partition_epoch) == ((1, 2, 3), 0)
            else:
                assert (part.isr, part.partition_epoch) == ((1,), 1)
        # Only the refused partition proposes again.
        tasks = rm.check_isr()
        await tasks[0]
        assert controller.calls[-1] == [TPS[3]]
    finally:
        await rm.stop()


async def test_changes_beyond_the_batch_limit_go_as_several_requests(tmp_path, monkeypatch):
    monkeypatch.setattr(rm_module, "ALTER_PARTITION_BATCH_MAX", 2)
    clock, controller = FakeClock(), Controller(refuse=TopicPartition("none", 0))
    rm = leader_of_all(tmp_path, clock, controller)
    try:
        clock.now += LAG_MS + 1
        tasks = rm.check_isr()
        for task in tasks:
            await task
        assert sorted(len(c) for c in controller.calls) == [1, 2, 2]
        assert [tp for call in controller.calls for tp in call] == TPS
    finally:
        await rm.stop()


async def test_a_failed_request_ends_every_in_flight_change(tmp_path):
    clock = FakeClock()

    async def unreachable(changes: Changes) -> Mapping[TopicPartition, Assignment | LograftError]:
        raise NotLeaderOrFollowerError("no controller")

    rm = ReplicaManager(1, tmp_path / "b1", SETTINGS, alter_partitions=unreachable, lag_clock=clock)
    rm.apply_metadata(
        {tp: PartitionMeta("id", Assignment((1, 2, 3), (1, 2, 3), 1, 0, 0)) for tp in TPS}
    )
    try:
        clock.now += LAG_MS + 1
        for task in rm.check_isr():
            await task
        assert all(rm.partitions[tp].isr_in_flight is None for tp in TPS)
        assert all(rm.partitions[tp].isr == (1, 2, 3) for tp in TPS)
    finally:
        await rm.stop()


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll `condition` on the loop (the ISR task runs between polls)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_fenced_brokers_are_not_proposed_for_the_isr(tmp_path):
    """The ISR loop leaves out brokers the metadata says are not usable: the
    controller refuses them, and every check would send the refusal again."""
    ineligible = {3}
    asked: list[frozenset[int]] = []

    def not_usable() -> frozenset[int]:
        asked.append(frozenset(ineligible))
        return frozenset(ineligible)

    controller = Controller(refuse=TopicPartition("none", 0))
    settings = BrokerSettings(isr_check_interval_ms=10, replica_lag_time_max_ms=60_000)
    rm = ReplicaManager(
        1,
        tmp_path / "b1",
        settings,
        alter_partitions=controller.alter,
        ineligible_replicas=not_usable,
    )
    await rm.start()
    try:
        rm.apply_metadata({TPS[0]: PartitionMeta("id", Assignment((1, 2, 3), (1, 2), 1, 0, 0))})
        part = rm.partitions[TPS[0]]
        for follower in (2, 3):  # both caught up with the (empty) log
            part.on_follower_fetch(follower, part.follower_fetch_request(), 1024, 0)
        await wait_until(lambda: len(asked) >= 3)
        assert controller.calls == []
        ineligible.clear()
        await wait_until(lambda: bool(controller.calls))
        assert controller.calls[0] == [TPS[0]]
        assert part.isr == (1, 2, 3)
    finally:
        await rm.stop()

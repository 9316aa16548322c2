"""A leader's periodic work costs in proportion to what changed, not to the
partitions it leads: the ISR check looks only at partitions whose ISR inputs
moved, idle followers' fetch sessions vouch for them when an append comes,
and the high-watermark checkpoint is written only when a high watermark
moved. Stuck followers still leave the ISR within `replica_lag_time_max_ms`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from lograft.brokers import replica_manager as rm_module
from lograft.brokers.partition import Assignment, IsrProposal, Partition
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import InvalidFetchSessionEpochError, LograftError
from lograft.protocol.fetch_wire import (
    INITIAL_SESSION_EPOCH,
    FetchPartitionRequest,
    PartitionFetch,
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage import checkpoint
from tests.unit.brokers.test_replica_manager import _batch

LAG_MS = 100
SETTINGS = BrokerSettings(replica_lag_time_max_ms=LAG_MS)
TPS = [TopicPartition("t", p) for p in range(20)]
HOT = TPS[7]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class Controller:
    """Accepts every ISR change."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[TopicPartition, tuple[int, ...]]]] = []

    async def alter(
        self, changes: Sequence[tuple[TopicPartition, IsrProposal]]
    ) -> Mapping[TopicPartition, Assignment | LograftError]:
        self.calls.append([(tp, p.isr) for tp, p in changes])
        return {
            tp: Assignment((1, 2, 3), p.isr, 1, p.leader_epoch, p.partition_epoch + 1)
            for tp, p in changes
        }


@pytest.fixture
def looked_at(monkeypatch: pytest.MonkeyPatch) -> list[TopicPartition]:
    """The partitions each ISR check asked for a change."""
    seen: list[TopicPartition] = []
    original = Partition.isr_change

    def counting(self: Partition, now_ms: int, ineligible: frozenset[int] = frozenset()):
        seen.append(self.tp)
        return original(self, now_ms, ineligible)

    monkeypatch.setattr(Partition, "isr_change", counting)
    return seen


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def controller() -> Controller:
    return Controller()


@pytest.fixture
def leader(tmp_path: Path, clock: FakeClock, controller: Controller) -> Iterator[ReplicaManager]:
    rm = ReplicaManager(
        1, tmp_path / "b1", SETTINGS, alter_partitions=controller.alter, lag_clock=clock
    )
    rm.apply_metadata(
        {tp: PartitionMeta("id", Assignment((1, 2, 3), (1, 2, 3), 1, 0, 0)) for tp in TPS}
    )
    yield rm
    rm.work.close()
    for part in rm.partitions.values():
        part.log.close()


def fetch(
    replica: int,
    fetches: dict[TopicPartition, PartitionFetch],
    *,
    session_id: int = 0,
    epoch: int = INITIAL_SESSION_EPOCH,
) -> ReplicaFetchRequest:
    """A fetch that waits for nothing (the leader answers at once)."""
    return ReplicaFetchRequest(
        replica,
        0,
        1,
        1 << 20,
        1 << 20,
        [FetchPartitionRequest(tp.topic, tp.partition, f) for tp, f in fetches.items()],
        session_id,
        epoch,
    )


async def full_fetches(leader: ReplicaManager) -> dict[int, ReplicaFetchAnswer]:
    """Followers 2 and 3 each start a session at offset 0 of every partition."""
    out = {}
    for replica in (2, 3):
        answer = await leader.replica_fetch(
            fetch(replica, {tp: PartitionFetch(0, -1, 0) for tp in TPS})
        )
        assert answer.error is None and answer.session_id != 0
        out[replica] = answer
    return out


async def test_an_isr_check_looks_only_at_partitions_whose_inputs_moved(
    leader: ReplicaManager, clock: FakeClock, controller: Controller, looked_at: list
):
    await full_fetches(leader)
    assert leader.check_isr() == []  # new leaderships: every partition looked at once
    assert sorted(looked_at) == TPS
    looked_at.clear()
    # Every follower at the log end with a full ISR: nothing to look at.
    for _ in range(3):
        clock.now += LAG_MS // 4
        assert leader.check_isr() == []
    assert looked_at == []
    # An append leaves the followers behind on that partition only.
    clock.now += 10
    await leader.produce(HOT, _batch("a"), Acks.LEADER)
    assert leader.check_isr() == []  # within the lag time
    assert looked_at == [HOT]
    # A follower that never fetches the new data leaves the ISR once the lag
    # time has passed since it was last caught up (its session's last fetch).
    clock.now += LAG_MS + 1
    [task] = leader.check_isr()
    await task
    assert controller.calls == [[(HOT, (1,))]]
    assert leader.partitions[HOT].isr == (1,)


async def test_a_caught_up_follower_fetch_settles_the_partition(
    leader: ReplicaManager, clock: FakeClock, looked_at: list
):
    sessions = await full_fetches(leader)
    leader.check_isr()
    await leader.produce(HOT, _batch("a"), Acks.LEADER)
    for replica in (2, 3):
        answer = await leader.replica_fetch(
            fetch(
                replica,
                {HOT: PartitionFetch(5, 0, 0)},
                session_id=sessions[replica].session_id,
                epoch=1,
            )
        )
        assert answer.error is None
    looked_at.clear()
    assert leader.check_isr() == []
    assert looked_at == [HOT]  # found settled, and dropped from the watch
    looked_at.clear()
    clock.now += 10 * LAG_MS
    assert leader.check_isr() == []
    assert looked_at == []


async def test_idle_sessions_vouch_for_their_followers_when_an_append_comes(
    leader: ReplicaManager, clock: FakeClock, controller: Controller
):
    """Followers whose sessions fetched lately, naming nothing, are caught up
    as of that fetch when the next append moves the log end, also when the
    session was dropped in between."""
    sessions = await full_fetches(leader)
    leader.check_isr()
    clock.now += 5 * LAG_MS  # long after the fetches that named the partitions
    for replica in (2, 3):
        idle = await leader.replica_fetch(
            fetch(replica, {}, session_id=sessions[replica].session_id, epoch=1)
        )
        assert idle.error is None and idle.partitions == []
    # Follower 3's session goes (an out-of-step epoch drops it).
    stale = await leader.replica_fetch(fetch(3, {}, session_id=sessions[3].session_id, epoch=9))
    assert isinstance(stale.error, InvalidFetchSessionEpochError)
    assert len(leader.fetch_sessions) == 1
    clock.now += LAG_MS // 2
    await leader.produce(HOT, _batch("a"), Acks.LEADER)
    assert leader.check_isr() == []
    assert controller.calls == []
    # Neither fetches the new data: both leave once the lag time has passed
    # since their last fetch.
    clock.now += LAG_MS // 2 + 1
    [task] = leader.check_isr()
    await task
    assert controller.calls == [[(HOT, (1,))]]


async def test_the_hw_checkpoint_is_written_only_when_a_high_watermark_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    writes: list[list[tuple[int | str, ...]]] = []
    real = checkpoint.write_entries

    def counting(path: Path, entries: list[tuple[int | str, ...]]) -> None:
        if path.name == rm_module.HW_CHECKPOINT_FILE:
            writes.append(entries)
        real(path, entries)

    monkeypatch.setattr(checkpoint, "write_entries", counting)
    rm = ReplicaManager(1, tmp_path / "b1", BrokerSettings())
    rm.apply_metadata({tp: PartitionMeta("id", Assignment((1,), (1,), 1, 0, 0)) for tp in TPS[:3]})
    try:
        assert await rm.checkpoint_moved_hws()
        assert writes == [[("t", p, 0) for p in range(3)]]
        assert not await rm.checkpoint_moved_hws()
        assert not await rm.checkpoint_moved_hws()
        await rm.produce(TPS[1], _batch("a"), Acks.ALL)
        assert await rm.checkpoint_moved_hws()
        assert writes[-1] == [("t", 0, 0), ("t", 1, 5), ("t", 2, 0)]
        assert not await rm.checkpoint_moved_hws()
        assert len(writes) == 2
    finally:
        await rm.stop()

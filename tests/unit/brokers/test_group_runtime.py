"""The group coordinator runtime on a real ReplicaManager (one broker, tmp dir):
leadership hooks, loading by replay, serialized handlers, commits that
survive a restart, session expiry, NOT_COORDINATOR routing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from types import MappingProxyType

import pytest

from lograft.brokers.groups.heartbeat import HeartbeatRequest, HeartbeatResponse
from lograft.brokers.groups.offsets import OffsetAndMetadata
from lograft.brokers.groups.offsets_partition import EXPIRY_RETRY_BACKOFF_MS, CoordinatorPhase
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC, coordinator_partition
from lograft.brokers.groups.records import NO_PARTITIONS
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.brokers.groups.state import GroupState
from lograft.brokers.metadata_sync import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition

BROKER = 1
OFFSETS_PARTITIONS = 3
ORDERS = "orders"
GROUP = "billing"
GROUP_TP = TopicPartition(CONSUMER_OFFSETS_TOPIC, coordinator_partition(GROUP, OFFSETS_PARTITIONS))
# How long a test waits for a condition that should hold within milliseconds, s.
WAIT_S = 10.0


class FakeMetadata:
    """The metadata view the runtime reads: topics and broker addresses."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicView] = {}

    def set_topic(self, name: str, partitions: int, leader: int, leader_epoch: int) -> None:
        assignment = Assignment((BROKER,), (BROKER,), leader, leader_epoch, 0)
        self.topics[name] = TopicView(
            name, f"id-{name}", MappingProxyType(dict.fromkeys(range(partitions), assignment))
        )

    def topic(self, name: str) -> TopicView | None:
        return self.topics.get(name)

    def broker_url(self, broker_id: int) -> str | None:
        return f"http://broker-{broker_id}"

    def wanted(self) -> dict[TopicPartition, PartitionMeta]:
        view = self.topics[CONSUMER_OFFSETS_TOPIC]
        return {
            TopicPartition(CONSUMER_OFFSETS_TOPIC, p): PartitionMeta(view.topic_id, a)
            for p, a in view.partitions.items()
        }


class Broker:
    def __init__(self, data_dir: Path, settings: GroupRuntimeSettings) -> None:
        self.metadata = FakeMetadata()
        self.metadata.set_topic(ORDERS, 6, leader=BROKER, leader_epoch=0)
        self.replicas = ReplicaManager(BROKER, data_dir, BrokerSettings(produce_timeout_ms=5_000))
        self.runtime = GroupCoordinatorRuntime(self.replicas, self.metadata, settings)
        self.stopped = False

    async def start(self, leader: int = BROKER, leader_epoch: int = 1) -> None:
        await self.replicas.start()
        self.lead(leader, leader_epoch)

    def lead(self, leader: int, leader_epoch: int) -> None:
        """Publish `__consumer_offsets` with `leader` at `leader_epoch`."""
        self.metadata.set_topic(CONSUMER_OFFSETS_TOPIC, OFFSETS_PARTITIONS, leader, leader_epoch)
        self.replicas.apply_metadata(self.metadata.wanted())

    async def loaded(self) -> None:
        coordinator = self.runtime.coordinator(GROUP_TP.partition)
        assert coordinator is not None
        assert await coordinator.wait_loaded(WAIT_S)

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        await self.runtime.stop()
        await self.replicas.stop()


def settings(**coordinator: int) -> GroupRuntimeSettings:
    return GroupRuntimeSettings(**coordinator)


@pytest.fixture
async def make_broker(tmp_path: Path) -> AsyncIterator[Callable[..., Broker]]:
    brokers: list[Broker] = []

    def make(config: GroupRuntimeSettings | None = None) -> Broker:
        broker = Broker(tmp_path / "broker", config or settings())
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        await broker.stop()


async def join(
    runtime: GroupCoordinatorRuntime, member: str, sequence: int = 1
) -> HeartbeatResponse:
    return await runtime.heartbeat(
        HeartbeatRequest(GROUP, member, 0, subscribed_topics=(ORDERS,), sequence=sequence)
    )


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)  # polling a condition, not synchronising on time


async def test_routes_groups_to_the_leader_of_their_partition(make_broker) -> None:
    broker = make_broker()
    await broker.replicas.start()
    try:
        # No __consumer_offsets yet.
        with pytest.raises(CoordinatorNotAvailableError):
            await join(broker.runtime, "m1")
        # Another broker leads the group's partition.
        broker.lead(leader=2, leader_epoch=1)
        with pytest.raises(NotCoordinatorError) as err:
            await join(broker.runtime, "m1")
        assert err.value.details["coordinator_id"] == 2
        assert err.value.details["coordinator_url"] == "http://broker-2"
        assert err.value.details["partition"] == GROUP_TP.partition
        # The metadata names this broker before its replica has become leader.
        broker.metadata.set_topic(CONSUMER_OFFSETS_TOPIC, OFFSETS_PARTITIONS, BROKER, 2)
        with pytest.raises(CoordinatorLoadInProgressError):
            await join(broker.runtime, "m1")
        # Now this broker leads.
        broker.lead(leader=BROKER, leader_epoch=2)
        await broker.loaded()
        response = await join(broker.runtime, "m1")
        assert response.member_epoch > 0
        assert {tp.partition for tp in response.assignment} == set(range(6))
    finally:
        await broker.stop()


async def test_load_in_progress_until_the_partition_is_replayed(make_broker) -> None:
    broker = make_broker()
    await broker.replicas.start()
    try:
        broker.lead(leader=BROKER, leader_epoch=1)
        # The load runs in a worker thread: right after becoming leader it is not done.
        coordinator = broker.runtime.coordinator(GROUP_TP.partition)
        assert coordinator is not None and coordinator.phase is CoordinatorPhase.LOADING
        with pytest.raises(CoordinatorLoadInProgressError):
            await join(broker.runtime, "m1")
        await broker.loaded()
        await join(broker.runtime, "m1")
    finally:
        await broker.stop()


async def test_state_survives_leadership_moves_and_restarts(make_broker) -> None:
    broker = make_broker()
    await broker.start()
    await broker.loaded()
    joined = await join(broker.runtime, "m1")
    tp0 = TopicPartition(ORDERS, 0)
    await broker.runtime.commit_offsets(
        GROUP, "m1", joined.member_epoch, {tp0: OffsetAndMetadata(42, "meta")}
    )
    # Losing leadership drops the state at once.
    broker.lead(leader=2, leader_epoch=2)
    with pytest.raises(NotCoordinatorError):
        broker.runtime.fetch_offsets(GROUP)
    # Leading again replays the log: offsets and the member are back.
    broker.lead(leader=BROKER, leader_epoch=3)
    await broker.loaded()
    assert broker.runtime.fetch_offsets(GROUP)[tp0].offset == 42
    beat = await broker.runtime.heartbeat(
        HeartbeatRequest(
            GROUP, "m1", joined.member_epoch, owned_partitions=joined.assignment, sequence=2
        )
    )
    assert beat.assignment == joined.assignment
    await broker.stop()

    # A fresh process on the same data directory.
    again = make_broker()
    await again.start(leader_epoch=4)
    try:
        await again.loaded()
        committed = again.runtime.fetch_offsets(GROUP)
        assert committed[tp0].offset == 42 and committed[tp0].metadata == "meta"
        description = await again.runtime.describe_group(GROUP, _no_high_watermarks)
        assert [m.member_id for m in description.members] == ["m1"]
    finally:
        await again.stop()


async def _no_high_watermarks(_tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
    return {}


async def test_concurrent_joins_are_serialized(make_broker) -> None:
    broker = make_broker()
    await broker.start()
    try:
        await broker.loaded()
        responses = await asyncio.gather(*(join(broker.runtime, f"m{i}") for i in range(5)))
        assert len({r.member_id for r in responses}) == 5
        coordinator = broker.runtime.coordinator(GROUP_TP.partition)
        assert coordinator is not None
        group = coordinator.read().group(GROUP)
        assert group is not None and len(group.members) == 5
        group.check_invariants()
    finally:
        await broker.stop()


async def test_commits_are_fenced_by_member_epoch(make_broker) -> None:
    broker = make_broker()
    await broker.start()
    try:
        await broker.loaded()
        first = await join(broker.runtime, "m1")
        tp0 = TopicPartition(ORDERS, 0)
        with pytest.raises(UnknownMemberIdError):
            await broker.runtime.commit_offsets(GROUP, "ghost", 1, {tp0: OffsetAndMetadata(1)})
        with pytest.raises(UnknownMemberIdError):
            await broker.runtime.commit_offsets(GROUP, "", 0, {tp0: OffsetAndMetadata(1)})
        with pytest.raises(FencedMemberEpochError):
            await broker.runtime.commit_offsets(
                GROUP, "m1", first.member_epoch + 1, {tp0: OffsetAndMetadata(1)}
            )
        # A second member bumps the group epoch; m1 moves on with its next heartbeat.
        await join(broker.runtime, "m2")
        beat = await broker.runtime.heartbeat(
            HeartbeatRequest(
                GROUP, "m1", first.member_epoch, owned_partitions=first.assignment, sequence=2
            )
        )
        # It is asked to give partitions up; once it has, it moves to the new epoch.
        assert beat.assignment < first.assignment
        beat = await broker.runtime.heartbeat(
            HeartbeatRequest(
                GROUP, "m1", beat.member_epoch, owned_partitions=beat.assignment, sequence=3
            )
        )
        assert beat.member_epoch > first.member_epoch
        with pytest.raises(StaleMemberEpochError):
            await broker.runtime.commit_offsets(
                GROUP, "m1", first.member_epoch, {tp0: OffsetAndMetadata(1)}
            )
        assert broker.runtime.fetch_offsets(GROUP) == {}
    finally:
        await broker.stop()


async def test_a_silent_member_is_removed_after_its_session(make_broker) -> None:
    session_ms = 300
    broker = make_broker(settings(session_timeout_ms=session_ms, group_heartbeat_interval_ms=50))
    await broker.start()
    try:
        await broker.loaded()
        started = time.monotonic()
        await join(broker.runtime, "m1")
        coordinator = broker.runtime.coordinator(GROUP_TP.partition)
        assert coordinator is not None

        def gone() -> bool:
            group = coordinator.read().group(GROUP)
            return group is None or "m1" not in group.members

        await wait_for(gone, "the silent member's removal")
        assert time.monotonic() - started >= session_ms / 1000
        with pytest.raises(UnknownMemberIdError):
            await broker.runtime.heartbeat(
                HeartbeatRequest(GROUP, "m1", 1, owned_partitions=NO_PARTITIONS, sequence=2)
            )
    finally:
        await broker.stop()


async def test_admin_delete_and_reset_need_an_empty_group(make_broker) -> None:
    broker = make_broker()
    await broker.start()
    try:
        await broker.loaded()
        tp0 = TopicPartition(ORDERS, 0)
        await join(broker.runtime, "m1")
        with pytest.raises(NonEmptyGroupError):
            await broker.runtime.delete_group(GROUP)
        with pytest.raises(NonEmptyGroupError):
            await broker.runtime.reset_offsets(GROUP, {tp0: 5})
        await broker.runtime.heartbeat(HeartbeatRequest(GROUP, "m1", -1, sequence=2))
        assert await broker.runtime.reset_offsets(GROUP, {tp0: 5}) == {tp0: 5}
        listed = broker.runtime.list_local_groups()
        assert [(g.group_id, g.state) for g in listed] == [(GROUP, GroupState.EMPTY)]
        await broker.runtime.delete_group(GROUP)
        assert broker.runtime.list_local_groups() == []
        assert broker.runtime.fetch_offsets(GROUP) == {}
    finally:
        await broker.stop()


async def test_an_append_that_may_have_written_reloads_from_the_log(
    make_broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = make_broker()
    await broker.start()
    await broker.loaded()
    tp0 = TopicPartition(ORDERS, 0)
    original = broker.replicas.produce

    async def written_then_timed_out(
        tp: TopicPartition, data: bytes, acks: Acks, *, timeout_ms: int | None = None
    ) -> None:
        await original(tp, data, Acks.LEADER)
        raise RequestTimedOutError("the in-sync replicas did not confirm in time")

    monkeypatch.setattr(broker.replicas, "produce", written_then_timed_out)
    with pytest.raises(RequestTimedOutError):
        await broker.runtime.commit_offsets(GROUP, "", 0, {tp0: OffsetAndMetadata(5)})
    monkeypatch.setattr(broker.replicas, "produce", original)
    # The coordinator does not guess: it reads the log again, which holds the commit.
    await broker.loaded()
    assert broker.runtime.fetch_offsets(GROUP)[tp0].offset == 5


async def test_an_append_refused_before_writing_keeps_the_state(
    make_broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = make_broker()
    await broker.start()
    await broker.loaded()
    tp0 = TopicPartition(ORDERS, 0)

    async def refused(
        tp: TopicPartition, data: bytes, acks: Acks, *, timeout_ms: int | None = None
    ) -> None:
        raise NotEnoughReplicasError("ISR too small")

    monkeypatch.setattr(broker.replicas, "produce", refused)
    with pytest.raises(NotEnoughReplicasError):
        await broker.runtime.commit_offsets(GROUP, "", 0, {tp0: OffsetAndMetadata(5)})
    coordinator = broker.runtime.coordinator(GROUP_TP.partition)
    assert coordinator is not None and coordinator.phase is CoordinatorPhase.ACTIVE
    assert broker.runtime.fetch_offsets(GROUP) == {}


async def test_a_failed_expiry_is_retried_soon(
    make_broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = make_broker(settings(session_timeout_ms=200, group_heartbeat_interval_ms=50))
    await broker.start()
    await broker.loaded()
    await join(broker.runtime, "m1")
    original = broker.replicas.produce
    refusals: list[float] = []

    async def refused(
        tp: TopicPartition, data: bytes, acks: Acks, *, timeout_ms: int | None = None
    ) -> None:
        refusals.append(time.monotonic())
        raise NotEnoughReplicasError("ISR too small")

    monkeypatch.setattr(broker.replicas, "produce", refused)
    # The session runs out; removing the member fails while the ISR is short.
    await wait_for(lambda: len(refusals) >= 1, "an expiry attempt")
    monkeypatch.setattr(broker.replicas, "produce", original)
    coordinator = broker.runtime.coordinator(GROUP_TP.partition)
    assert coordinator is not None

    def gone() -> bool:
        group = coordinator.read().group(GROUP)
        return group is None or "m1" not in group.members

    # Not at the next offsets-retention check (minutes away), and not in a
    # busy loop either: after the back-off.
    await wait_for(gone, "the member's removal on retry")
    assert time.monotonic() - refusals[0] >= EXPIRY_RETRY_BACKOFF_MS / 1000 - 0.01
    assert len(refusals) == 1


async def test_requests_queued_on_a_partition_are_bounded(
    make_broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = make_broker(GroupRuntimeSettings(coordinator_requests_queued_max=2))
    await broker.start()
    await broker.loaded()
    original = broker.replicas.produce
    release = asyncio.Event()
    appending = asyncio.Event()

    async def slow(
        tp: TopicPartition, data: bytes, acks: Acks, *, timeout_ms: int | None = None
    ) -> object:
        appending.set()
        await release.wait()
        return await original(tp, data, acks, timeout_ms=timeout_ms)

    monkeypatch.setattr(broker.replicas, "produce", slow)

    def commit(offset: int) -> asyncio.Task[object]:
        tp0 = TopicPartition(ORDERS, 0)
        return asyncio.create_task(
            broker.runtime.commit_offsets(GROUP, "", 0, {tp0: OffsetAndMetadata(offset)})
        )

    first, second = commit(1), commit(2)
    await appending.wait()  # the first holds the lock, the second waits for it
    with pytest.raises(CoordinatorNotAvailableError):
        await commit(3)
    release.set()
    await asyncio.gather(first, second)
    assert broker.runtime.fetch_offsets(GROUP)[TopicPartition(ORDERS, 0)].offset == 2
    await commit(4)  # room again


async def cancel_as_woken(task: asyncio.Task[object], wake: asyncio.Event) -> None:
    """Cancel `task` in the same loop step as the wait on `wake` it is in ends
    (Python 3.11's asyncio.wait_for then returned the result of its inner
    wait, which finished first, and dropped the cancel)."""
    await wait_for(lambda: bool(wake._waiters), "the task to wait")  # type: ignore[attr-defined]
    wake.set()
    task.cancel()
    await asyncio.wait({task}, timeout=WAIT_S)


async def test_a_wait_for_the_load_cancelled_as_it_ends_is_cancelled(make_broker) -> None:
    broker = make_broker()
    await broker.start()
    await broker.loaded()
    coordinator = broker.runtime.coordinator(GROUP_TP.partition)
    assert coordinator is not None
    loaded = coordinator._loaded
    loaded.clear()  # as a reload does, without starting one
    waiting = asyncio.create_task(coordinator.wait_loaded(WAIT_S))
    await cancel_as_woken(waiting, loaded)
    assert waiting.cancelled(), "wait_loaded swallowed the cancel"
    assert not loaded._waiters  # type: ignore[attr-defined]


async def test_the_expiry_loop_cancelled_as_it_is_woken_ends(make_broker) -> None:
    broker = make_broker()
    await broker.start()
    await broker.loaded()
    coordinator = broker.runtime.coordinator(GROUP_TP.partition)
    assert coordinator is not None and coordinator._expiry_task is not None
    expiry = coordinator._expiry_task
    await cancel_as_woken(expiry, coordinator._wake)
    assert expiry.cancelled(), "the expiry loop went on after it was cancelled"
    assert not coordinator._wake._waiters  # type: ignore[attr-defined]


async def test_an_expiry_pass_takes_no_request_slot(make_broker) -> None:
    """The queue bound counts requests only: the coordinator's own expiry pass
    (one at a time) neither takes a request's slot nor is refused by a full
    queue."""
    broker = make_broker(GroupRuntimeSettings(coordinator_requests_queued_max=1))
    await broker.start()
    await broker.loaded()
    coordinator = broker.runtime.coordinator(GROUP_TP.partition)
    assert coordinator is not None
    lock = coordinator._lock
    await lock.acquire()  # every handler waits for its turn behind this
    try:
        # Offsets expiry due now: the loop starts a pass, which waits for the lock.
        coordinator._next_offsets_expiry_ms = 0
        coordinator._wake.set()
        await wait_for(lambda: bool(lock._waiters), "the expiry pass to wait its turn")  # type: ignore[attr-defined]
        tp0 = TopicPartition(ORDERS, 0)
        commit = asyncio.create_task(
            broker.runtime.commit_offsets(GROUP, "", 0, {tp0: OffsetAndMetadata(7)})
        )
        await wait_for(lambda: len(lock._waiters) == 2 or commit.done(), "the commit to queue")  # type: ignore[attr-defined]
        assert not commit.done(), "the commit was refused for the expiry pass's slot"
    finally:
        lock.release()
    await asyncio.wait_for(commit, WAIT_S)
    assert broker.runtime.fetch_offsets(GROUP)[tp0].offset == 7

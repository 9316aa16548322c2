"""The group coordinator of one broker: which groups it coordinates, and the
entry points the HTTP layer calls.

A group's coordinator is the leader of partition
`coordinator_partition(group, n)` of `__consumer_offsets`, where n is the
topic's partition count in the metadata (not the configured default, which
only applies when the topic is created). The runtime hears of every
leadership change of that topic from the `ReplicaManager`'s role listener:
it starts a `PartitionCoordinator` (which loads the partition) when this
broker becomes leader at a new leader epoch, and closes it (dropping the
state) when the broker stops leading.

A request for a group whose partition this broker does not lead is refused
with NOT_COORDINATOR, whose details name the coordinator (id and URL, from
the metadata), as NOT_LEADER_OR_FOLLOWER does for data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from lograft.brokers.groups.admin import (
    GroupDescription,
    GroupListing,
    dead_group,
    delete_group,
    describe_group,
    list_groups,
    reset_offsets,
)
from lograft.brokers.groups.heartbeat import HeartbeatRequest, HeartbeatResponse, heartbeat
from lograft.brokers.groups.offsets import (
    CommittedOffset,
    OffsetAndMetadata,
    commit_offsets,
    fetch_offsets,
)
from lograft.brokers.groups.offsets_partition import (
    CoordinatorPhase,
    GroupCounters,
    Handler,
    PartitionCoordinator,
)
from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC, coordinator_partition
from lograft.brokers.groups.result import GroupResult
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.brokers.groups.state import CoordinatorState, GroupState
from lograft.brokers.groups.topic_deletion import run_topic_deletion
from lograft.brokers.groups.validation import check_group_id
from lograft.brokers.metadata_sync import TopicView
from lograft.brokers.partition import Partition
from lograft.brokers.replica_manager import ReplicaManager, monotonic_ms
from lograft.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    LograftError,
    NonEmptyGroupError,
    NotCoordinatorError,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import Clock, wall_clock_ms

log = logging.getLogger(__name__)

T = TypeVar("T")

HighWatermarks = Callable[[Collection[TopicPartition]], Awaitable[Mapping[TopicPartition, int]]]


class CoordinatorMetadata(Protocol):
    """What the runtime reads from the metadata image."""

    def topic(self, name: str) -> TopicView | None: ...

    def broker_url(self, broker_id: int) -> str | None: ...


@dataclass(frozen=True, slots=True)
class CoordinatorLocation:
    group_id: str
    partition: int
    # -1 (and url None) while the partition has no leader.
    coordinator_id: int
    coordinator_url: str | None


class GroupCoordinatorRuntime:
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: CoordinatorMetadata,
        settings: GroupRuntimeSettings,
        *,
        clock: Clock = monotonic_ms,
        wall_clock: Clock = wall_clock_ms,
    ) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.settings = settings
        self.config = settings.coordinator
        self.clock = clock
        self.wall_clock = wall_clock
        self._coordinators: dict[int, PartitionCoordinator] = {}
        self._closing: set[asyncio.Task[None]] = set()
        # Deleting offsets of deleted topics: may wait for a load, cancelled on stop.
        self._topic_deletions: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.counters = GroupCounters()
        replicas.add_role_listener(self._on_role)

    # -- leadership ---------------------------------------------------------------------

    def _on_role(self, part: Partition) -> None:
        if part.tp.topic != CONSUMER_OFFSETS_TOPIC or self._stopped:
            return
        current = self._coordinators.get(part.tp.partition)
        if part.is_leader and current is not None and current.leader_epoch == part.leader_epoch:
            return  # same term (an ISR change): nothing to reload
        if current is not None:
            self._close_later(self._coordinators.pop(part.tp.partition))
        if part.is_leader:
            coordinator = PartitionCoordinator(
                part.tp,
                part.leader_epoch,
                self.replicas,
                self.settings,
                clock=self.clock,
                wall_clock=self.wall_clock,
                counters=self.counters,
            )
            self._coordinators[part.tp.partition] = coordinator
            coordinator.start()
            log.info("coordinating %s from leader epoch %d", part.tp, part.leader_epoch)

    def on_topics_deleted(self, topics: frozenset[str]) -> None:
        """The metadata dropped these topics: every coordinator here deletes its
        groups' offsets of them (Kafka's onPartitionsDeleted; see group_topic_deletion)."""
        if not topics or self._stopped:
            return
        for coordinator in self._coordinators.values():
            task = asyncio.get_running_loop().create_task(run_topic_deletion(coordinator, topics))
            self._topic_deletions.add(task)
            task.add_done_callback(self._topic_deletions.discard)

    def _close_later(self, coordinator: PartitionCoordinator) -> None:
        # Called from the replica manager's synchronous metadata apply.
        task = asyncio.get_running_loop().create_task(coordinator.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.info("no longer coordinating %s", coordinator.tp)

    async def stop(self) -> None:
        self._stopped = True
        for task in list(self._topic_deletions):
            task.cancel()
        coordinators = list(self._coordinators.values())
        self._coordinators.clear()
        for coordinator in coordinators:
            await coordinator.close()
        for task in list(self._closing):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def loaded_states(self) -> list[CoordinatorState]:
        """The group state of every `__consumer_offsets` partition coordinated
        and loaded here (for metrics: members, committed offsets)."""
        out = []
        for coordinator in self._coordinators.values():
            if coordinator.phase is CoordinatorPhase.ACTIVE:
                with contextlib.suppress(LograftError):  # no longer leading: skipped
                    out.append(coordinator.read())
        return out

    def coordinator(self, partition: int) -> PartitionCoordinator | None:
        """The coordinator of a partition this broker leads (tests and status)."""
        return self._coordinators.get(partition)

    # -- routing ------------------------------------------------------------------------

    def _offsets_topic(self) -> TopicView:
        view = self.metadata.topic(CONSUMER_OFFSETS_TOPIC)
        if view is None or not view.partitions:
            raise CoordinatorNotAvailableError(
                f"{CONSUMER_OFFSETS_TOPIC} does not exist yet; look the coordinator up "
                "(GET /v1/groups/{group}/coordinator) to create it"
            )
        return view

    def _no_group_can_exist(self, group_id: str) -> bool:
        """True (for a valid id) before `__consumer_offsets` exists: no group
        can exist then, so reads answer as for an unknown group (dead, nothing
        committed, not found) instead of waiting for a coordinator. Writes
        still need one: the coordinator lookup creates the topic."""
        view = self.metadata.topic(CONSUMER_OFFSETS_TOPIC)
        if view is not None and view.partitions:
            return False
        check_group_id(group_id, self.config)
        return True

    def locate(self, group_id: str) -> CoordinatorLocation:
        """Where `group_id` is coordinated, by the metadata this broker has."""
        check_group_id(group_id, self.config)
        view = self._offsets_topic()
        partition = coordinator_partition(group_id, len(view.partitions))
        leader = view.partitions[partition].leader
        url = self.metadata.broker_url(leader) if leader >= 0 else None
        return CoordinatorLocation(group_id, partition, leader, url)

    def _coordinator_for(self, group_id: str) -> PartitionCoordinator:
        where = self.locate(group_id)
        coordinator = self._coordinators.get(where.partition)
        if coordinator is None or coordinator.phase is CoordinatorPhase.CLOSED:
            raise self._not_coordinator(where)
        if coordinator.phase is CoordinatorPhase.LOADING:
            raise CoordinatorLoadInProgressError(
                f"broker {self.replicas.broker_id} is still loading the groups of "
                f"{CONSUMER_OFFSETS_TOPIC}-{where.partition}; retry shortly",
                group_id=group_id,
                partition=where.partition,
            )
        return coordinator

    def _not_coordinator(self, where: CoordinatorLocation) -> Exception:
        if where.coordinator_id == self.replicas.broker_id:
            # The metadata already names this broker; its replica has not
            # become leader yet (or is between leader epochs): soon loading.
            return CoordinatorLoadInProgressError(
                f"broker {self.replicas.broker_id} is becoming the coordinator of "
                f"{CONSUMER_OFFSETS_TOPIC}-{where.partition}; retry shortly",
                group_id=where.group_id,
                partition=where.partition,
            )
        if where.coordinator_id < 0:
            return CoordinatorNotAvailableError(
                f"{CONSUMER_OFFSETS_TOPIC}-{where.partition} has no leader right now; "
                "retry shortly",
                group_id=where.group_id,
                partition=where.partition,
            )
        return NotCoordinatorError(
            f"broker {self.replicas.broker_id} is not the coordinator of group "
            f"{where.group_id!r}; broker {where.coordinator_id} is, at {where.coordinator_url}",
            group_id=where.group_id,
            partition=where.partition,
            coordinator_id=where.coordinator_id,
            coordinator_url=where.coordinator_url,
        )

    async def _run(self, group_id: str, handler: Handler[T]) -> T:
        coordinator = self._coordinator_for(group_id)
        try:
            return await coordinator.run(group_id, handler)
        except NotCoordinatorError:
            # Leadership moved while the request waited its turn: name the new one.
            raise self._not_coordinator(self.locate(group_id)) from None

    def _read(self, group_id: str) -> CoordinatorState:
        coordinator = self._coordinator_for(group_id)
        try:
            return coordinator.read()
        except NotCoordinatorError:
            raise self._not_coordinator(self.locate(group_id)) from None

    def _topic_partitions(self, topics: Iterable[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in topics:
            view = self.metadata.topic(name)
            if view is not None:
                out[name] = len(view.partitions)
        return out

    # -- membership ---------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """Join (epoch 0), heartbeat (> 0) or leave (-1)."""
        coordinator = self._coordinator_for(request.group_id)

        def handle(state: CoordinatorState) -> GroupResult[HeartbeatResponse]:
            group = state.group(request.group_id)
            topics = set(request.subscribed_topics or ())
            if group is not None:
                topics |= group.subscribed_topics()
            return heartbeat(
                state,
                coordinator.sessions_of(request.group_id),
                request,
                self._topic_partitions(topics),
                self.clock(),
                self.config,
            )

        return await self._run(request.group_id, handle)

    # -- offsets ------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return await self._run(
            group_id,
            lambda state: commit_offsets(
                state, group_id, member_id, member_epoch, offsets, self.wall_clock(), self.config
            ),
        )

    def fetch_offsets(
        self, group_id: str, topics: Collection[str] | None = None
    ) -> dict[TopicPartition, CommittedOffset]:
        """Committed offsets of the group (of `topics` only, if given)."""
        if self._no_group_can_exist(group_id):
            return {}
        committed = fetch_offsets(self._read(group_id), group_id)
        return {
            tp: c
            for tp, c in committed.items()
            if c is not None and (topics is None or tp.topic in topics)
        }

    # -- administration -----------------------------------------------------------------

    def list_local_groups(self, states: Collection[GroupState] | None = None) -> list[GroupListing]:
        """Groups of every partition this broker coordinates and has loaded."""
        out: list[GroupListing] = []
        for partition in sorted(self._coordinators):
            coordinator = self._coordinators[partition]
            if coordinator.phase is CoordinatorPhase.ACTIVE:
                out.extend(list_groups(coordinator.read(), states))
        return sorted(out, key=lambda g: g.group_id)

    def loading_partitions(self) -> list[int]:
        return sorted(
            p for p, c in self._coordinators.items() if c.phase is CoordinatorPhase.LOADING
        )

    async def describe_group(
        self, group_id: str, high_watermarks: HighWatermarks
    ) -> GroupDescription:
        if self._no_group_can_exist(group_id):
            return dead_group(group_id, self.config)
        state = self._read(group_id)
        group = state.group(group_id)
        partitions: set[TopicPartition] = set()
        if group is not None:
            partitions |= set(group.offsets)
            for member_id in group.members:
                partitions |= group.current_of(member_id).owned
        hws = await high_watermarks(partitions) if partitions else {}
        # Read again after the wait: describe what the group is now.
        return describe_group(self._read(group_id), group_id, hws, self.config)

    async def delete_group(self, group_id: str) -> None:
        if self._no_group_can_exist(group_id):
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        await self._run(group_id, lambda state: delete_group(state, group_id))

    def check_can_reset(self, group_id: str) -> None:
        """Fail early (before asking partition leaders for bounds) if the group
        has members; `reset_offsets` checks again when it runs."""
        group = self._read(group_id).group(group_id)
        if group is not None and group.members:
            raise NonEmptyGroupError(
                f"group {group_id} has {len(group.members)} members: stop them before resetting",
                members=len(group.members),
            )

    async def reset_offsets(
        self, group_id: str, new_offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        return await self._run(
            group_id,
            lambda state: reset_offsets(
                state, group_id, new_offsets, self.wall_clock(), self.config
            ),
        )

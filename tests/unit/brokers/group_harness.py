"""A stand-in for the group coordinator runtime, minus I/O, for tests.

`Coordinator` does what the runtime will: run a pure handler, encode its
records to bytes and decode them again (so every test also exercises the
codec), append them to a list standing for the `__consumer_offsets`
partition, replay them into the state, and keep each group's sessions. After
every batch it checks the cross-key invariants of every group. `failover`
rebuilds the state from the log (optionally compacted) with fresh sessions,
as a new coordinator does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from lograft.brokers.groups.admin import delete_group, reset_offsets
from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.heartbeat import (
    HeartbeatRequest,
    HeartbeatResponse,
    expire_members,
    heartbeat,
)
from lograft.brokers.groups.offsets import OffsetAndMetadata, commit_offsets
from lograft.brokers.groups.records import (
    GroupRecord,
    Partitions,
    decode_record,
    encode_record,
)
from lograft.brokers.groups.result import GroupResult
from lograft.brokers.groups.sessions import GroupSessions
from lograft.brokers.groups.state import CoordinatorState
from lograft.protocol.topic_partition import TopicPartition

T = TypeVar("T")

LogEntry = tuple[bytes, bytes | None]


def compact(log: list[LogEntry], drop_tombstones: bool = False) -> list[LogEntry]:
    """What log compaction leaves: the latest record of each key, in log order
    (tombstones too, unless their delete retention has passed)."""
    last = {key: i for i, (key, _) in enumerate(log)}
    return [
        (key, value)
        for i, (key, value) in enumerate(log)
        if last[key] == i and not (drop_tombstones and value is None)
    ]


def replay_log(log: list[LogEntry]) -> CoordinatorState:
    state = CoordinatorState()
    for key, value in log:
        state.replay(decode_record(key, value))
    return state


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


class Coordinator:
    def __init__(
        self,
        config: GroupCoordinatorConfig | None = None,
        topics: Mapping[str, int] | None = None,
    ) -> None:
        self.config = config or GroupCoordinatorConfig()
        self.topics: dict[str, int] = dict(topics or {})
        self.state = CoordinatorState()
        self.sessions: dict[str, GroupSessions] = {}
        self.log: list[LogEntry] = []

    def apply(self, group_id: str, result: GroupResult[T]) -> T:
        for record in result.records:
            key, value = encode_record(record)
            decoded = decode_record(key, value)
            assert decoded == record, (record, decoded)
            self.log.append((key, value))
            self.state.replay(decoded)
        if result.sessions is not None:
            self.sessions[group_id] = result.sessions
        for group in self.state.groups.values():
            group.check_invariants()
        return result.response

    def records_of(self, result: GroupResult[T]) -> tuple[GroupRecord, ...]:
        return result.records

    def group_sessions(self, group_id: str) -> GroupSessions:
        return self.sessions.get(group_id, GroupSessions())

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        now_ms: int = 0,
        *,
        subscribed_topics: tuple[str, ...] | None = None,
        owned: Partitions | None = None,
        assignor: str | None = None,
        rebalance_timeout_ms: int | None = None,
        sequence: int | None = None,
    ) -> HeartbeatResponse:
        request = HeartbeatRequest(
            group_id=group_id,
            member_id=member_id,
            member_epoch=member_epoch,
            subscribed_topics=subscribed_topics,
            owned_partitions=owned,
            assignor=assignor,
            rebalance_timeout_ms=rebalance_timeout_ms,
            sequence=sequence,
        )
        result = heartbeat(
            self.state, self.group_sessions(group_id), request, self.topics, now_ms, self.config
        )
        response = self.apply(group_id, result)
        if member_epoch >= 0:
            # The response describes the state after its records.
            group = self.state.group(group_id)
            assert group is not None
            current = group.current_of(member_id)
            assert response.member_epoch == current.member_epoch
            assert response.assignment == current.assigned
        return response

    def join(
        self, group_id: str, member_id: str, topics: tuple[str, ...], now_ms: int = 0, **kw: object
    ) -> HeartbeatResponse:
        return self.heartbeat(group_id, member_id, 0, now_ms, subscribed_topics=topics, **kw)  # type: ignore[arg-type]

    def leave(self, group_id: str, member_id: str, now_ms: int = 0) -> HeartbeatResponse:
        return self.heartbeat(group_id, member_id, -1, now_ms)

    def expire(self, group_id: str, now_ms: int) -> tuple[str, ...]:
        result = expire_members(
            self.state, group_id, self.group_sessions(group_id), now_ms, self.config
        )
        return self.apply(group_id, result)

    def commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        commit_time_ms: int = 0,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        full = {
            k: v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v)
            for k, v in offsets.items()
        }
        result = commit_offsets(
            self.state, group_id, member_id, member_epoch, full, commit_time_ms, self.config
        )
        return self.apply(group_id, result)

    def delete(self, group_id: str) -> None:
        self.apply(group_id, delete_group(self.state, group_id))

    def reset(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        self.apply(group_id, reset_offsets(self.state, group_id, offsets, 0, self.config))

    def failover(
        self, now_ms: int, *, compacted: bool = False, drop_tombstones: bool = False
    ) -> None:
        """A new coordinator: state replayed from the log, a fresh session for all."""
        log = compact(self.log, drop_tombstones) if compacted else self.log
        rebuilt = replay_log(log)
        assert rebuilt == self.state, "replaying the log did not rebuild the state"
        self.state = rebuilt
        self.log = list(log)
        self.sessions = {
            gid: GroupSessions.after_failover(group, now_ms, self.config)
            for gid, group in self.state.groups.items()
        }

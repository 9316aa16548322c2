"""Deleting the committed offsets of deleted topics (Kafka's `onPartitionsDeleted`).

Committed offsets are keyed by topic name, not topic id. Left alone, the
offsets of a deleted topic would apply to a new topic of the same name: a
group would start it at the old topic's positions and skip its first records.
So when the metadata drops a topic (or replaces it by another of the same
name, a new topic id), every coordinator of this broker writes tombstones for
its groups' offsets of that topic, through its handler queue like any change.

Pure part: `deleted_topics` (two name -> id maps) and `delete_topic_offsets`
(a handler); `run_topic_deletion` queues the handler on one coordinator. The
node's metadata apply calls `GroupCoordinatorRuntime.on_topics_deleted`.

A group without members left with no offset is deleted, as offset expiry
does. Gaps (as in Kafka): a coordinator that fails over before its tombstones
are committed, or a broker that was down while the topic was deleted and
re-created, keeps the old offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from lograft.brokers.groups.offsets import group_metadata_tombstones
from lograft.brokers.groups.offsets_partition import PartitionCoordinator
from lograft.brokers.groups.records import GroupRecord, OffsetCommitKey
from lograft.brokers.groups.result import GroupResult
from lograft.brokers.groups.state import CoordinatorState
from lograft.errors import LograftError
from lograft.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

# How long the deletion waits for a coordinator that is still loading its
# partition (it holds no offsets to delete before that), ms.
TOPIC_DELETION_LOAD_WAIT_MS = 60_000


def deleted_topics(before: Mapping[str, str], after: Mapping[str, str]) -> frozenset[str]:
    """Names whose topic is gone from `after` (name -> topic id) or is another topic now."""
    return frozenset(name for name, topic_id in before.items() if after.get(name) != topic_id)


def delete_topic_offsets(
    state: CoordinatorState, topics: Collection[str]
) -> GroupResult[dict[str, list[TopicPartition]]]:
    """Tombstones for every group's offsets of `topics`; the response maps each
    group to the partitions whose offsets were deleted."""
    gone = frozenset(topics)
    records: list[GroupRecord] = []
    deleted: dict[str, list[TopicPartition]] = {}
    for group_id in sorted(state.groups):
        group = state.groups[group_id]
        tps = sorted(
            (tp for tp in group.offsets if tp.topic in gone),
            key=lambda tp: (tp.topic, tp.partition),
        )
        if not tps:
            continue
        deleted[group_id] = tps
        records.extend(
            GroupRecord.tombstone(OffsetCommitKey(group_id, tp.topic, tp.partition)) for tp in tps
        )
        if not group.members and len(tps) == len(group.offsets):
            records.extend(group_metadata_tombstones(group))
    return GroupResult(tuple(records), deleted)


async def run_topic_deletion(coordinator: PartitionCoordinator, topics: frozenset[str]) -> None:
    """Delete the offsets of `topics` on one coordinator once it is loaded; a
    coordinator that closes or fails meanwhile is logged and skipped."""
    if not await coordinator.wait_loaded(TOPIC_DELETION_LOAD_WAIT_MS / 1000):
        log.warning("%s: not loaded; offsets of deleted %s kept", coordinator.tp, sorted(topics))
        return
    try:
        deleted = await coordinator.run(None, lambda state: delete_topic_offsets(state, topics))
    except LograftError as exc:
        log.warning(
            "%s: deleting offsets of deleted %s failed: %s", coordinator.tp, sorted(topics), exc
        )
        return
    for group_id, tps in deleted.items():
        log.info("group %s: offsets of %d partitions of deleted topics removed", group_id, len(tps))

"""What the admin API may not do to the internal topic `__consumer_offsets`.

The group coordinators rely on three properties of that topic:

- it exists: deleting it loses every group's committed offsets and membership;
- it is compacted and nothing else: a group's records are rewritten only when
  they change, so deletion by retention (`delete` or `compact,delete`) would
  drop the state of groups that are alive but quiet;
- its partition count never changes: a group's coordinator is partition
  `hash(group) % count`, so more partitions move most groups to a partition
  that holds none of their records (Kafka allows it; a known footgun).

The controller's topic and config handlers call these checks, so every path
to the controller is guarded, not only the public admin routes. Creating the
topic is not guarded: the first coordinator lookup does it.
"""

from __future__ import annotations

from collections.abc import Mapping

from lograft.errors import InternalTopicProtectedError

# Equal to lograft.brokers.groups.placement.CONSUMER_OFFSETS_TOPIC (the quorum
# package cannot import brokers; a test keeps the two equal).
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
CLEANUP_POLICY_KEY = "cleanup_policy"
# The only cleanup policy the offsets topic may have.
OFFSETS_TOPIC_CLEANUP_POLICY = "compact"


def check_delete_topic(name: str) -> None:
    if name == CONSUMER_OFFSETS_TOPIC:
        raise InternalTopicProtectedError(
            f"cannot delete the internal topic {name}: it holds every consumer group's "
            "committed offsets and membership",
            topic=name,
            operation="delete_topic",
        )


def check_create_partitions(name: str) -> None:
    if name == CONSUMER_OFFSETS_TOPIC:
        raise InternalTopicProtectedError(
            f"cannot add partitions to the internal topic {name}: a group's coordinator is "
            "the partition its id hashes to, so a new partition count would move most "
            "groups to a partition that holds none of their offsets or members",
            topic=name,
            operation="create_partitions",
        )


def check_topic_config_changes(name: str, changes: Mapping[str, str | None]) -> None:
    """Refuse removing or changing `cleanup_policy` of the offsets topic away from compact."""
    if name != CONSUMER_OFFSETS_TOPIC or CLEANUP_POLICY_KEY not in changes:
        return
    value = changes[CLEANUP_POLICY_KEY]
    if value == OFFSETS_TOPIC_CLEANUP_POLICY:
        return
    what = "remove its cleanup_policy" if value is None else f"set cleanup_policy={value}"
    raise InternalTopicProtectedError(
        f"cannot {what} on the internal topic {name}: it must stay compacted only; "
        "deletion by retention would drop the offsets and membership of groups "
        "that have not changed for retention_ms",
        topic=name,
        operation="alter_configs",
        key=CLEANUP_POLICY_KEY,
        value=value,
    )

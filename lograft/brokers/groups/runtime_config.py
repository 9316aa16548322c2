"""Settings of the group coordinator runtime (`[groups]` in the node config).

The runtime's own settings (the `__consumer_offsets` topic, commit and load
bounds, how often offsets expire) sit beside the pure core's
`GroupCoordinatorConfig` (timeouts and per-group limits); `from_dict` takes
one flat table and gives each key to the one that owns it. Units are last in
every name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.errors import InvalidConfigError


@dataclass(frozen=True, slots=True)
class GroupRuntimeSettings:
    # Partitions of `__consumer_offsets` when it is created. Kafka's default is
    # 50; lograft's is 10: every partition is a replica on up to three brokers,
    # all opened when the first group lookup creates the topic, and 10 still
    # spreads coordination over up to 10 brokers. Later changes are ignored:
    # the count decides every group's coordinator, so the runtime always reads
    # it from the topic itself.
    offsets_topic_num_partitions: int = 10
    # Replicas of `__consumer_offsets`, capped at the live brokers at creation.
    offsets_topic_replication_factor: int = 3
    # How long an append of a handler's records waits for the in-sync
    # replicas (Kafka's offsets.commit.timeout.ms), ms. On timeout the request
    # fails with REQUEST_TIMED_OUT and the coordinator reloads its partition.
    offsets_commit_timeout_ms: int = 5_000
    # Bytes read from the log per step while loading a partition (Kafka's
    # offsets.load.buffer.size).
    offsets_load_buffer_bytes: int = 5 * 1024 * 1024
    # How often offsets of member-less groups are checked for expiry, ms
    # (Kafka's offsets.retention.check.interval.ms).
    offsets_retention_check_interval_ms: int = 600_000
    # Requests waiting for their turn on one coordinator partition (handlers
    # run one at a time); past it a request is refused with the retriable
    # COORDINATOR_NOT_AVAILABLE instead of queueing without bound.
    coordinator_requests_queued_max: int = 1_000
    coordinator: GroupCoordinatorConfig = field(default_factory=GroupCoordinatorConfig)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "coordinator" and getattr(self, f.name) <= 0:
                raise InvalidConfigError(f"groups.{f.name} must be positive", key=f.name)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> GroupRuntimeSettings:
        own = {f.name for f in fields(cls)} - {"coordinator"}
        core = {f.name for f in fields(GroupCoordinatorConfig)}
        mine: dict[str, Any] = {}
        theirs: dict[str, Any] = {}
        for key, value in raw.items():
            if key in own:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InvalidConfigError(f"groups.{key}: must be an integer", key=key)
                mine[key] = value
            elif key in core:
                theirs[key] = value
            else:
                raise InvalidConfigError(
                    f"groups.{key}: unknown setting; known: {', '.join(sorted(own | core))}",
                    key=key,
                )
        try:
            coordinator = GroupCoordinatorConfig(**theirs)
        except (TypeError, ValueError) as exc:
            raise InvalidConfigError(f"groups: {exc}") from None
        return cls(**mine, coordinator=coordinator)

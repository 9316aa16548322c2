"""Settings of the group coordinator runtime (`[groups]` in the node config).

The runtime's own settings (the `__consumer_offsets` topic, commit and load
bounds, how often offsets expire) sit beside the pure core's
`GroupCoordinatorConfig` (timeouts and per-group limits): one flat table, so
`GroupRuntimeSettings` extends that config and is the pure core's config too
(`coordinator`). Units are last in every name.
"""

from __future__ import annotations

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.typed import Positive


class GroupRuntimeSettings(GroupCoordinatorConfig, kw_only=True):
    # Partitions of `__consumer_offsets` when it is created. Kafka's default is
    # 50; lograft's is 10: every partition is a replica on up to three brokers,
    # all opened when the first group lookup creates the topic, and 10 still
    # spreads coordination over up to 10 brokers. Later changes are ignored:
    # the count decides every group's coordinator, so the runtime always reads
    # it from the topic itself.
    offsets_topic_num_partitions: Positive = 10
    # Replicas of `__consumer_offsets`, capped at the live brokers at creation.
    offsets_topic_replication_factor: Positive = 3
    # How long an append of a handler's records waits for the in-sync
    # replicas (Kafka's offsets.commit.timeout.ms), ms. On timeout the request
    # fails with REQUEST_TIMED_OUT and the coordinator reloads its partition.
    offsets_commit_timeout_ms: Positive = 5_000
    # Bytes read from the log per step while loading a partition (Kafka's
    # offsets.load.buffer.size).
    offsets_load_buffer_bytes: Positive = 5 * 1024 * 1024
    # How often offsets of member-less groups are checked for expiry, ms
    # (Kafka's offsets.retention.check.interval.ms).
    offsets_retention_check_interval_ms: Positive = 600_000
    # Requests waiting for their turn on one coordinator partition (handlers
    # run one at a time); past it a request is refused with the retriable
    # COORDINATOR_NOT_AVAILABLE instead of queueing without bound.
    coordinator_requests_queued_max: Positive = 1_000

    @property
    def coordinator(self) -> GroupCoordinatorConfig:
        """The pure core's settings (these settings hold them)."""
        return self

"""The controller's and the metadata quorum's metrics, read at scrape time.

Raft numbers come from the Raft thread's last tick (`RaftAdapter.counters`,
no call into the thread); the cluster-wide counts (fenced brokers, offline
partitions, topics) are computed from the metadata image and, as in Kafka,
reported by the active controller only (the others report 0), so a
dashboard may sum them over the controllers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from lograft.quorum.controller_runtime import ControllerRuntime
from lograft.quorum.image import BrokerState, MetadataImage
from lograft.quorum.raft.adapter import RaftAdapter

__all__ = ["QuorumCollector"]


class QuorumCollector:
    def __init__(
        self,
        raft: RaftAdapter,
        runtime: ControllerRuntime | None,
        image: Callable[[], MetadataImage],
        wall_clock_s: Callable[[], float] = time.time,
    ) -> None:
        """`runtime`: None on a node without the controller role."""
        self.raft = raft
        self.runtime = runtime
        self.image = image
        self.wall_clock_s = wall_clock_s

    def collect(self) -> Iterator[Metric]:
        active = self.runtime is not None and self.runtime.active
        yield _gauge(
            "lograft_controller_active",
            "1 on the active controller, else 0 (Kafka ActiveControllerCount)",
            1 if active else 0,
        )
        counters = self.raft.counters()
        applied = self.raft.last_applied
        yield _gauge(
            "lograft_raft_term", "The Raft term (KRaft raft-metrics current-epoch)", counters.term
        )
        yield _gauge(
            "lograft_raft_commit_index",
            "The Raft commit index (KRaft raft-metrics high-watermark)",
            counters.commit_index,
        )
        yield _gauge(
            "lograft_raft_applied_offset",
            "The last metadata log entry applied here (KRaft last-applied-record-offset)",
            applied,
        )
        yield _gauge(
            "lograft_raft_apply_lag_entries",
            "Raft log entries committed but not yet applied here "
            "(KRaft last-applied-record-lag-ms, in entries)",
            max(counters.commit_index - applied, 0),
        )
        yield CounterMetricFamily(
            "lograft_raft_elections",
            "Raft terms begun since this node started, each an election "
            "(KRaft raft-metrics election-latency count)",
            value=counters.elections,
        )
        image = self.image()
        yield _gauge(
            "lograft_metadata_offset",
            "Offset of the metadata image this node serves (KRaft last-applied-record-offset)",
            image.offset,
        )
        if counters.snapshot_offset is not None and counters.snapshot_at is not None:
            yield _gauge(
                "lograft_raft_snapshot_offset",
                "Offset of the latest metadata snapshot written or loaded here",
                counters.snapshot_offset,
            )
            yield _gauge(
                "lograft_raft_snapshot_age_seconds",
                "Seconds since that snapshot was written or loaded "
                "(Kafka latest-snapshot-generated-age-ms)",
                max(self.wall_clock_s() - counters.snapshot_at, 0.0),
            )
        yield from self._cluster(image if active else None)

    def _cluster(self, image: MetadataImage | None) -> Iterator[Metric]:
        """Cluster-wide counts, on the active controller (None elsewhere: 0)."""
        fenced = active_brokers = offline = partitions = topics = 0
        if image is not None:
            for reg in image.brokers.values():
                if reg.state is BrokerState.FENCED:
                    fenced += 1
                else:
                    active_brokers += 1
            topics = len(image.topics)
            for p in image.all_partitions():
                partitions += 1
                if p.leader < 0:
                    offline += 1
        yield _gauge(
            "lograft_controller_fenced_brokers",
            "Registered brokers that are fenced (Kafka FencedBrokerCount)",
            fenced,
        )
        yield _gauge(
            "lograft_controller_active_brokers",
            "Registered brokers not fenced (Kafka ActiveBrokerCount)",
            active_brokers,
        )
        yield _gauge(
            "lograft_controller_offline_partitions",
            "Partitions without a leader (Kafka OfflinePartitionsCount)",
            offline,
        )
        yield _gauge(
            "lograft_controller_partitions",
            "Partitions in the cluster (Kafka GlobalPartitionCount)",
            partitions,
        )
        yield _gauge(
            "lograft_controller_topics", "Topics in the cluster (Kafka GlobalTopicCount)", topics
        )


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)

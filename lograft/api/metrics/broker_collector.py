"""The broker's metrics, computed at scrape time from its replicas and its hot-path counters.

Gauges (partition counts, log sizes, lag) are read from the replica
manager's state when a scrape asks; the counters are the plain integers the
produce, fetch and replication paths add to (brokers/broker_stats.py). The
Kafka metric each one stands for is in docs/metrics.md.

Per-partition series (log size, replica fetch lag) are capped by
`[metrics] partition_series_max`, largest first (series.py).

Log sizes are read by `refresh`, which the scrape awaits before it collects,
in a worker thread: each read takes its log's lock, and 2,000 of them on the
event loop held it for about 20 ms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from lograft.api.metrics.series import DroppedSeries, largest
from lograft.api.metrics.settings import MetricsSettings
from lograft.brokers.broker_stats import BrokerStats, TopicStats
from lograft.brokers.partition import Role
from lograft.brokers.replica_manager import ReplicaManager
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import Log

__all__ = ["BrokerCollector"]

# (attribute of TopicStats, metric name without lograft_ and _total, help).
_TOPIC_COUNTERS = (
    ("bytes_in", "topic_bytes_in", "Bytes appended as leader (Kafka BytesInPerSec)"),
    ("records_in", "topic_records_in", "Records appended as leader (Kafka MessagesInPerSec)"),
    (
        "bytes_out",
        "topic_bytes_out",
        "Bytes read from the log for consumers (Kafka BytesOutPerSec)",
    ),
    (
        "records_out",
        "topic_records_out",
        "Records this node sent to clients: fetches, raw fetches, streams",
    ),
    (
        "replication_bytes_in",
        "topic_replication_bytes_in",
        "Bytes appended as follower (Kafka ReplicationBytesInPerSec)",
    ),
    (
        "replication_bytes_out",
        "topic_replication_bytes_out",
        "Bytes read for followers (Kafka ReplicationBytesOutPerSec)",
    ),
    (
        "produce_requests",
        "topic_produce_requests",
        "Partition appends asked of this leader (Kafka TotalProduceRequestsPerSec)",
    ),
    (
        "produce_failed",
        "topic_produce_requests_failed",
        "Partition appends refused or failed (Kafka FailedProduceRequestsPerSec)",
    ),
    (
        "fetch_requests",
        "topic_fetch_requests",
        "Consumer partition reads on this leader (Kafka TotalFetchRequestsPerSec)",
    ),
    (
        "fetch_failed",
        "topic_fetch_requests_failed",
        "Consumer partition reads that failed (Kafka FailedFetchRequestsPerSec)",
    ),
)


class BrokerCollector:
    def __init__(
        self,
        replicas: ReplicaManager,
        stats: BrokerStats,
        settings: MetricsSettings,
        topic_names: Callable[[], frozenset[str]],
        dropped: Callable[[], DroppedSeries],
    ) -> None:
        """`topic_names`: the topics the metadata has now (the counters of
        deleted topics are dropped); `dropped`: the scrape's tally of series
        left out."""
        self.replicas = replicas
        self.stats = stats
        self.settings = settings
        self.topic_names = topic_names
        self.dropped = dropped
        # (bytes, partition) of every log hosted here, as of the last refresh.
        self._sizes: list[tuple[float, TopicPartition]] = []

    async def refresh(self) -> None:
        """Read every hosted log's size, in a worker thread (awaited before a scrape)."""
        logs = [
            (tp, part.log)
            for tp, part in self.replicas.partitions.items()
            if part.role is not Role.STOPPED and not part.log.closed
        ]
        self._sizes = await asyncio.to_thread(_log_sizes, logs)

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_counters()
        yield from self._partitions()
        flush = self.stats.flush_seconds.snapshot()
        family = HistogramMetricFamily(
            "lograft_log_flush_seconds",
            "fsync time of log flushes and group commits (Kafka LogFlushRateAndTimeMs)",
        )
        family.add_metric([], list(flush.buckets), flush.total)
        yield family
        yield _counter(
            "lograft_broker_isr_shrinks",
            "ISR shrinks accepted by the controller (Kafka IsrShrinksPerSec)",
            self.stats.isr_shrinks,
        )
        yield _counter(
            "lograft_broker_isr_expands",
            "ISR expansions accepted by the controller (Kafka IsrExpandsPerSec)",
            self.stats.isr_expands,
        )
        yield from self._fetch_sessions()
        yield _gauge(
            "lograft_broker_replica_streams",
            "Followers' WebSockets of replica fetches open to this leader",
            self.stats.replica_streams_open,
        )
        yield _counter(
            "lograft_broker_replica_stream_fetches",
            "Replica fetches answered over followers' WebSockets",
            self.stats.replica_stream_fetches,
        )

    def _fetch_sessions(self) -> Iterator[Metric]:
        """The leader's replica fetch session cache (brokers/fetch_session_cache.py)."""
        sessions = self.replicas.fetch_sessions
        yield _gauge(
            "lograft_broker_fetch_sessions",
            "Replica fetch sessions cached by this leader "
            "(Kafka FetchSessionCache NumIncrementalFetchSessions)",
            len(sessions),
        )
        yield _gauge(
            "lograft_broker_fetch_session_partitions",
            "Partitions cached over this leader's replica fetch sessions "
            "(Kafka FetchSessionCache NumIncrementalFetchPartitionsCached)",
            sessions.partitions_cached,
        )
        yield _counter(
            "lograft_broker_fetch_session_evictions",
            "Replica fetch sessions evicted, least recently used first, to keep the cache "
            "within its caps (Kafka FetchSessionCache IncrementalFetchSessionEvictionsPerSec)",
            sessions.evictions,
        )

    def _topic_counters(self) -> Iterator[Metric]:
        self.stats.forget(self.topic_names())
        topics: dict[str, TopicStats] = self.stats.topics()
        for attribute, name, text in _TOPIC_COUNTERS:
            family = CounterMetricFamily(f"lograft_{name}", text, labels=("topic",))
            for topic, counts in topics.items():
                family.add_metric([topic], getattr(counts, attribute))
            yield family

    def _partitions(self) -> Iterator[Metric]:
        leaders = under_replicated = under_min_isr = at_min_isr = followers = hosted = 0
        lags: list[tuple[float, TopicPartition]] = []
        fetcher = self.replicas.fetcher
        for tp, part in self.replicas.partitions.items():
            if part.role is Role.STOPPED or part.log.closed:
                continue
            hosted += 1
            if part.role is Role.LEADER:
                leaders += 1
                isr = len(part.isr)
                if isr < len(part.replicas):
                    under_replicated += 1
                min_isr = part.settings.min_insync_replicas
                if isr < min_isr:
                    under_min_isr += 1
                elif isr == min_isr:
                    at_min_isr += 1
            elif part.role is Role.FOLLOWER:
                followers += 1
                lag = fetcher.lag(part)
                if lag is not None:
                    lags.append((lag, tp))
        yield _gauge(
            "lograft_broker_partitions",
            "Replicas hosted here (Kafka ReplicaManager PartitionCount)",
            hosted,
        )
        yield _gauge(
            "lograft_broker_leader_partitions",
            "Partitions led here (Kafka ReplicaManager LeaderCount)",
            leaders,
        )
        yield _gauge(
            "lograft_broker_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set "
            "(Kafka UnderReplicatedPartitions)",
            under_replicated,
        )
        yield _gauge(
            "lograft_broker_under_min_isr_partitions",
            "Partitions led here whose ISR is below min_insync_replicas "
            "(Kafka UnderMinIsrPartitionCount)",
            under_min_isr,
        )
        yield _gauge(
            "lograft_broker_at_min_isr_partitions",
            "Partitions led here whose ISR is exactly min_insync_replicas "
            "(Kafka AtMinIsrPartitionCount)",
            at_min_isr,
        )
        yield _gauge(
            "lograft_broker_failed_replicas",
            "Replicas this broker should host that are out of service (Kafka OfflineReplicaCount)",
            len(self.replicas.failed_replicas()),
        )
        cap = self.settings.partition_series_max
        kept, left = largest(self._sizes, cap)
        self.dropped().add("lograft_log_size_bytes", left)
        family = GaugeMetricFamily(
            "lograft_log_size_bytes",
            "Bytes of a partition's log segments on this broker (Kafka Log Size)",
            labels=("topic", "partition"),
        )
        for value, tp in kept:
            family.add_metric([tp.topic, str(tp.partition)], value)
        yield family
        kept, left = largest(lags, cap)
        self.dropped().add("lograft_replica_fetch_lag_records", left)
        family = GaugeMetricFamily(
            "lograft_replica_fetch_lag_records",
            "Offsets a follower replica here is behind its leader's log end, as of the "
            "leader's last answer (Kafka FetcherLagMetrics ConsumerLag)",
            labels=("topic", "partition"),
        )
        for value, tp in kept:
            family.add_metric([tp.topic, str(tp.partition)], value)
        yield family
        yield _gauge(
            "lograft_replica_fetch_lag_max_records",
            "The largest replica fetch lag of the followers here "
            "(Kafka ReplicaFetcherManager MaxLag)",
            max((lag for lag, _tp in lags), default=0),
        )


def _log_sizes(logs: Sequence[tuple[TopicPartition, Log]]) -> list[tuple[float, TopicPartition]]:
    """Each log's bytes (blocking: a lock per log; run in a worker thread)."""
    return [(float(target.size_bytes), tp) for tp, target in logs]


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)

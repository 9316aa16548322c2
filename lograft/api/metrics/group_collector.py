"""Consumer groups' metrics: membership, rebalances and committed-offset lag.

Reported by each group's coordinator (the leader of its `__consumer_offsets`
partition), so summing over the nodes counts every group once.

Lag, as Burrow and kafka-lag-exporter define it: a partition's high
watermark minus the group's committed offset (0 when the commit is at or
past it). The coordinator holds the commits; the high watermarks come from
the partitions' leaders, asked once per leader (2,000 partitions per
request, api/partition_offsets.py) by `refresh`, which the scrape awaits
before it collects, at most `lag_partitions_max` commits and
`lag_offsets_timeout_ms` long; a partition whose leader did not answer has
no lag series at that scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from lograft.api.metrics.series import DroppedSeries, largest
from lograft.api.metrics.settings import MetricsSettings
from lograft.api.partition_offsets import PartitionOffsets
from lograft.brokers.groups.runtime import GroupCoordinatorRuntime
from lograft.brokers.peer_calls import LeaderOffsets
from lograft.protocol.topic_partition import TopicPartition

__all__ = ["GroupCollector"]


class GroupCollector:
    def __init__(
        self,
        groups: GroupCoordinatorRuntime,
        offsets: PartitionOffsets,
        settings: MetricsSettings,
        dropped: Callable[[], DroppedSeries],
    ) -> None:
        self.groups = groups
        self.offsets = offsets
        self.settings = settings
        self.dropped = dropped
        # (group, partition) -> lag, as of the last `refresh`.
        self._lags: dict[tuple[str, TopicPartition], int] = {}
        self._lags_left_out = 0

    async def refresh(self) -> None:
        """Compute the lag of the groups coordinated here (awaited before a scrape)."""
        commits: dict[tuple[str, TopicPartition], int] = {}
        cap = self.settings.lag_partitions_max
        left_out = 0
        for state in self.groups.loaded_states():
            for group_id, group in state.groups.items():
                for tp, commit in group.offsets.items():
                    if len(commits) >= cap:
                        left_out += 1
                        continue
                    commits[(group_id, tp)] = commit.offset
        found: dict[TopicPartition, object] = {}
        if commits:
            tps = {tp for _group, tp in commits}
            found = dict(
                await self.offsets.offsets(tps, timeout_ms=self.settings.lag_offsets_timeout_ms)
            )
        lags = {}
        for (group_id, tp), committed in commits.items():
            answer = found.get(tp)
            if isinstance(answer, LeaderOffsets):
                lags[(group_id, tp)] = max(answer.high_watermark - committed, 0)
        self._lags = lags
        self._lags_left_out = left_out

    def collect(self) -> Iterator[Metric]:
        states = self.groups.loaded_states()
        members: list[tuple[float, str]] = []
        by_state: dict[str, int] = {}
        for state in states:
            for group_id, group in state.groups.items():
                members.append((len(group.members), group_id))
                name = group.state().value
                by_state[name] = by_state.get(name, 0) + 1
        family = GaugeMetricFamily(
            "lograft_groups",
            "Consumer groups coordinated here, by state (Kafka consumer-group-count)",
            labels=("state",),
        )
        for name, count in sorted(by_state.items()):
            family.add_metric([name], count)
        yield family
        group_cap = self.settings.group_series_max
        kept, left = largest(members, group_cap)
        dropped = self.dropped()
        dropped.add("lograft_group_members", left)
        family = GaugeMetricFamily(
            "lograft_group_members",
            "Members of a consumer group coordinated here",
            labels=("group",),
        )
        for size, group_id in kept:
            family.add_metric([group_id], size)
        yield family
        yield CounterMetricFamily(
            "lograft_group_rebalances",
            "New target assignments committed by the coordinators here "
            "(Kafka consumer-group-rebalance-count)",
            value=self.groups.counters.rebalances,
        )
        partition_cap = self.settings.partition_series_max
        lags = [(float(lag), key) for key, lag in self._lags.items()]
        kept_lags, left = largest(lags, partition_cap)
        dropped.add("lograft_group_lag_records", left + self._lags_left_out)
        family = GaugeMetricFamily(
            "lograft_group_lag_records",
            "High watermark minus the group's committed offset "
            "(kafka-lag-exporter kafka_consumergroup_group_lag)",
            labels=("group", "topic", "partition"),
        )
        for lag, (group_id, tp) in kept_lags:
            family.add_metric([group_id, tp.topic, str(tp.partition)], lag)
        yield family
        worst: dict[str, float] = {}
        for value, (group_id, _tp) in lags:
            worst[group_id] = max(worst.get(group_id, 0.0), value)
        kept_worst, left = largest([(v, g) for g, v in worst.items()], group_cap)
        dropped.add("lograft_group_lag_max_records", left)
        family = GaugeMetricFamily(
            "lograft_group_lag_max_records",
            "The largest lag of a group's partitions "
            "(kafka-lag-exporter kafka_consumergroup_group_max_lag)",
            labels=("group",),
        )
        for lag, group_id in kept_worst:
            family.add_metric([group_id], lag)
        yield family

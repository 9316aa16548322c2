"""`[metrics]` in the node config: the switch and the cardinality caps (docs/metrics.md).

Typed (`lograft.typed`): bounds in the field types, unknown keys refused.
This module imports nothing of the metrics code, so the node config can
compose the section without importing prometheus-client's users.
"""

from __future__ import annotations

from lograft.typed import Positive, Record


class MetricsSettings(Record):
    """`[metrics]`:

    [metrics]
    enabled = true
    partition_series_max = 1000
    """

    # false: no GET /metrics, no request timing, no counters on the hot paths.
    enabled: bool = True
    # Per-partition series of one metric (log size, replica fetch lag, consumer
    # lag): at most this many, the largest values first; the rest are counted
    # in lograft_metrics_series_dropped.
    partition_series_max: Positive = 1_000
    # Topics with per-topic counters of their own; later topics share the
    # topic="__other__" series.
    topic_series_max: Positive = 500
    # Per-group series of one metric (members, max lag): the largest first.
    group_series_max: Positive = 500
    # Committed offsets whose lag one scrape computes (the partitions'
    # leaders are asked for their high watermarks, 2,000 per request).
    lag_partitions_max: Positive = 10_000
    # How long a scrape waits for the leaders' high watermarks, ms; a leader
    # that does not answer in time leaves its partitions' lag out.
    lag_offsets_timeout_ms: Positive = 2_000

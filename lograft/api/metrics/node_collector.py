"""The node's own metrics: event-loop lag, open streams, and the series the caps left out.

CPU, memory and open files come from prometheus-client's `ProcessCollector`
(registered beside this one: `process_cpu_seconds_total`,
`process_resident_memory_bytes`, `process_open_fds`, ...).

Event-loop lag is a histogram of how late the loop ran the probe's 20 ms
timer (lograft/node/loop_lag.py), in seconds: the number that predicts
fencings here, since a stalled loop stops a broker's heartbeats and, for
the GIL, the Raft thread's ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from lograft.api.metrics.series import DroppedSeries
from lograft.histogram import Buckets

__all__ = ["LOOP_LAG_BOUNDS_S", "NodeCollector"]

# Event-loop lag, seconds: a timer 1 ms late is noise; 10 s fences a broker.
LOOP_LAG_BOUNDS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class NodeCollector:
    def __init__(
        self,
        node_id: int,
        roles: tuple[str, ...],
        loop_lag: Buckets,
        streams_open: Callable[[], int] | None,
        dropped: Callable[[], DroppedSeries],
    ) -> None:
        """`streams_open`: None on a node without the broker role (no streams)."""
        self.node_id = node_id
        self.roles = roles
        self.loop_lag = loop_lag
        self.streams_open = streams_open
        self.dropped = dropped

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "lograft_node_info", "This node's id and roles (always 1)", labels=("node_id", "roles")
        )
        info.add_metric([str(self.node_id), ",".join(self.roles)], 1)
        yield info
        snap = self.loop_lag.snapshot()
        family = HistogramMetricFamily(
            "lograft_event_loop_lag_seconds",
            "How late the event loop ran a 20 ms timer, backed off to 320 ms when idle"
            " (node/loop_lag.py)",
        )
        family.add_metric([], list(snap.buckets), snap.total)
        yield family
        if self.streams_open is not None:
            yield GaugeMetricFamily(
                "lograft_sse_streams_open",
                "Server-Sent Events streams this node serves now",
                value=self.streams_open(),
            )

    def collect_dropped(self) -> Iterator[Metric]:
        """Last: the other collectors have added to the tally by then."""
        family = GaugeMetricFamily(
            "lograft_metrics_series_dropped",
            "Series of a metric left out of this scrape by the [metrics] caps",
            labels=("metric",),
        )
        for metric, count in self.dropped().items():
            family.add_metric([metric], count)
        yield family

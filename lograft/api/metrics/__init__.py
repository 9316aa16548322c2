"""`GET /metrics`: the node's metrics in the Prometheus exposition formats (docs/metrics.md).

- `settings.py`: `[metrics]` in the node config (switch, series caps);
- `request_metrics.py`: per-route request times (queue, local, remote,
  total) and errors by code, observed by two middlewares;
- `broker_collector.py`, `quorum_collector.py`, `group_collector.py`,
  `process_collector.py`: what a scrape reads, computed then from the
  node's state and the plain counters its hot paths keep;
- `exposition.py`: the node's own `CollectorRegistry` (several nodes may
  share a process: tests), rendering by prometheus-client, and the route.
"""

"""The node's registry and `GET /metrics`, rendered by prometheus-client.

Each node has its own `CollectorRegistry` (never prometheus-client's global
one: tests run several nodes in one process), holding prometheus-client's
`ProcessCollector` and `PlatformCollector` and lograft's collectors, which
compute their values when a scrape asks.

A scrape first awaits what needs the network (the consumer lag's high
watermarks, group_collector.py), then collects on the event loop (the
collectors read state that only the loop may touch), then renders the text
in one of the node's record-work threads when there are many series (the
loop gets its turns meanwhile). Concurrent scrapes of one format share one
rendering: a flood of scrapes costs one scrape's work at a time.

The format follows the `Accept` header (prometheus-client's
`choose_encoder`): the Prometheus text format 0.0.4 by default, OpenMetrics
when asked.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder

from lograft.api.metrics.series import DroppedSeries
from lograft.api.record_work import RecordWork

__all__ = ["METRICS_PATH", "NodeMetrics", "add_metrics_route"]

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
# Rendered inline up to this many samples; more go to a record-work thread.
INLINE_SAMPLES_MAX = 2_000


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class _Collected:
    """Families already collected, in the shape prometheus-client's encoders read."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


class _Call:
    """A plain callable as a collector."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()


class NodeMetrics:
    def __init__(self, work: RecordWork | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.work = work
        self._before: list[Callable[[], Awaitable[None]]] = []
        self._dropped = DroppedSeries()
        self._renders: dict[str, asyncio.Task[tuple[bytes, str]]] = {}

    def dropped(self) -> DroppedSeries:
        """The tally of series the caps left out at the scrape under way."""
        return self._dropped

    def add(self, collector: Collector | Callable[[], Iterable[Metric]]) -> None:
        """Collected at every scrape, in the order added."""
        target = collector if hasattr(collector, "collect") else _Call(collector)
        self.registry.register(target)

    def before_scrape(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """Awaited before each scrape collects (work that needs the network)."""
        self._before.append(refresh)

    def collect(self) -> list[Metric]:
        """Every family, collected now (on the event loop)."""
        self._dropped = DroppedSeries()
        return list(self.registry.collect())

    async def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition in the format `accept` asks for, and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        running = self._renders.get(content_type)
        if running is None:
            running = asyncio.ensure_future(self._render(encoder, content_type))
            self._renders[content_type] = running
            running.add_done_callback(lambda _t: self._renders.pop(content_type, None))
        # Shielded: one scraper leaving does not cancel the others' rendering.
        return await asyncio.shield(running)

    async def _render(
        self, encoder: Callable[[Any], bytes], content_type: str
    ) -> tuple[bytes, str]:
        for refresh in self._before:
            try:
                await refresh()
            except Exception:
                # The scrape goes on with what the refresh had before.
                log.exception("refreshing metrics before a scrape failed")
        families = self.collect()
        samples = sum(len(f.samples) for f in families)
        render = functools.partial(encoder, _Collected(families))
        if self.work is None or samples <= INLINE_SAMPLES_MAX:
            return render(), content_type
        return await self.work.run(render), content_type


def add_metrics_route(app: web.Application, metrics: NodeMetrics) -> None:
    async def handle(request: web.Request) -> web.Response:
        body, content_type = await metrics.render(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    app.router.add_get(METRICS_PATH, handle)

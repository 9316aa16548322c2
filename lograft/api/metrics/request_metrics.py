"""Per-route request times and errors: Kafka's RequestMetrics, over HTTP.

For each route (method and path pattern, e.g. `POST
/v1/topics/{topic}/partitions/{partition}/batches`), four histograms of
seconds, as Kafka's RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs and
TotalTimeMs:

- total: from the request reaching the application (the outermost
  middleware but the connection guard, after aiohttp parsed its headers) to
  its handler returning the response; a response the handler streams
  (large fetches) is sent by then, a small one is written just after;
- queue: from then to the route's handler starting: authentication,
  authorization, the serving gate, quotas, waiting for room in the
  request-body budget and reading the body (Kafka's request queue is where a
  read request waits for a handler thread, and `queued.max.request.bytes`
  holds reads back there); a request refused before its handler counts its
  whole time here;
- remote: inside the handler, waiting on others (brokers/remote_wait.py):
  acks=all waiting for the in-sync replicas, long-polls waiting for data,
  calls to other nodes (forwarded produce, controller, leaders' offsets);
- local: total - queue - remote: the handler's own work on this node
  (appends, reads, rendering, worker threads it waits for, a quota's
  throttle delay).

`GET /v1/topics/{topic}/stream` is not timed (it lasts as long as its client
reads; lograft_sse_streams_open counts it), but its errors are counted.

Errors: `lograft_request_errors_total{method,route,code}`, the error code of
every error answer (Kafka's ErrorsPerSec{request,error}); a code this
version does not register (relayed from a newer node) counts as `OTHER`.

Cardinality: one series set per route the node has (a fixed list) and method
(clamped to the HTTP methods; `OTHER` for anything else); a request matching
no route counts under route `unmatched`.

Cost per request: two `perf_counter` calls, a context variable set and
reset, and four `Buckets.observe` (lograft/histogram.py), about 3 us.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from lograft.api.http_errors import ERROR_CODE_KEY
from lograft.api.internal_paths import REPLICA_STREAM_PATH
from lograft.brokers.remote_wait import RequestClock, current_clock, reset_clock, use_clock
from lograft.errors import all_error_classes
from lograft.histogram import Buckets

__all__ = ["PHASES", "UNMATCHED", "UNTIMED_ROUTES", "RequestMetrics", "RouteTimes"]

UNMATCHED = "unmatched"
OTHER = "OTHER"
# Long-lived: a client's stream of records, a follower's stream of replica
# fetches (each of whose fetches is timed as a POST of the fetch route:
# `observe_exchange`).
UNTIMED_ROUTES = frozenset({("GET", "/v1/topics/{topic}/stream"), ("GET", REPLICA_STREAM_PATH)})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# The phases, as metric names: lograft_request_<phase>_seconds.
PHASES = ("queue", "local", "remote", "total")
_KAFKA = {
    "queue": "RequestQueueTimeMs",
    "local": "LocalTimeMs",
    "remote": "RemoteTimeMs",
    "total": "TotalTimeMs",
}


class RouteTimes:
    __slots__ = ("local", "queue", "remote", "total")

    def __init__(self) -> None:
        self.queue = Buckets()
        self.local = Buckets()
        self.remote = Buckets()
        self.total = Buckets()


class RequestMetrics:
    """One node's request times and errors; observed on its event loop only."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], RouteTimes] = {}
        self.errors: dict[tuple[str, str, str], int] = {}
        self._codes = frozenset(c.code for c in all_error_classes())
        # Whether handler starts are marked (`handler_mark`, or the request
        # pipeline): without it the queue phase is unknown (0).
        self._marked = False

    def middleware(self) -> Any:
        """The outermost of the app's middlewares: times every request."""

        @web.middleware
        async def timed(request: web.Request, handler: Any) -> web.StreamResponse:
            clock = RequestClock(time.perf_counter())
            token = use_clock(clock)
            response: web.StreamResponse | None = None
            try:
                response = await handler(request)
                return response
            finally:
                reset_clock(token)
                self.observe(request, clock, time.perf_counter(), response)

        return timed

    def handler_mark(self) -> Any:
        """The innermost middleware: notes when the route's handler starts."""
        self._marked = True

        @web.middleware
        async def mark(request: web.Request, handler: Any) -> web.StreamResponse:
            clock = current_clock()
            if clock is not None:
                clock.handler_at = time.perf_counter()
            return await handler(request)

        return mark

    def note_handler_marks(self) -> None:
        """Whoever runs the requests notes each handler's start (the request
        pipeline): the queue phase is known."""
        self._marked = True

    def observe(
        self,
        request: web.Request,
        clock: RequestClock,
        end: float,
        response: web.StreamResponse | None,
    ) -> None:
        resource = request.match_info.route.resource
        route = UNMATCHED if resource is None else resource.canonical
        method = request.method if request.method in _METHODS else OTHER
        key = (method, route)
        # Only an error answer (status >= 400) carries a code; asking every
        # answer's state for one costs a KeyError raised and caught.
        if response is not None and response.status >= 400:
            code = response.get(ERROR_CODE_KEY)
            if code is not None:
                ekey = (method, route, code if code in self._codes else OTHER)
                self.errors[ekey] = self.errors.get(ekey, 0) + 1
        if key in UNTIMED_ROUTES:
            return
        self._time(key, clock, end)

    def observe_exchange(
        self, method: str, route: str, clock: RequestClock, end: float, code: str | None
    ) -> None:
        """One exchange that is not an HTTP request of its own (a fetch on a
        follower's stream), timed and counted as a request of `route`;
        `code`: its error's, or None."""
        key = (method, route)
        if code is not None:
            ekey = (method, route, code if code in self._codes else OTHER)
            self.errors[ekey] = self.errors.get(ekey, 0) + 1
        self._time(key, clock, end)

    def _time(self, key: tuple[str, str], clock: RequestClock, end: float) -> None:
        times = self.routes.get(key)
        if times is None:
            times = self.routes[key] = RouteTimes()
        total = end - clock.started_at
        if clock.handler_at is not None:
            queue = clock.handler_at - clock.started_at
        else:
            queue = total if self._marked else 0.0
        remote = min(clock.remote_s, total - queue)
        times.total.observe(total)
        times.queue.observe(queue)
        times.remote.observe(remote)
        times.local.observe(max(total - queue - remote, 0.0))

    def collect(self) -> Iterator[Metric]:
        for phase in PHASES:
            family = HistogramMetricFamily(
                f"lograft_request_{phase}_seconds",
                f"Request {phase} time by route (Kafka RequestMetrics {_KAFKA[phase]})",
                labels=("method", "route"),
            )
            for (method, route), times in self.routes.items():
                snap = getattr(times, phase).snapshot()
                family.add_metric([method, route], list(snap.buckets), snap.total)
            yield family
        errors = CounterMetricFamily(
            "lograft_request_errors",
            "Error answers by route and error code (Kafka RequestMetrics ErrorsPerSec)",
            labels=("method", "route", "code"),
        )
        for (method, route, code), count in self.errors.items():
            errors.add_metric([method, route, code], count)
        yield errors

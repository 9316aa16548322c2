"""Every request's way to its handler, in one middleware.

The steps, in order (each module named keeps its rule and documents it):

1. the connection guard notes the request's headers are in (connection_guard.py);
2. the request metrics' clock starts (metrics/request_metrics.py; metrics on);
3. an allowed origin's CORS preflight is answered (console/cors.py; `OPTIONS` only);
4. from here on every error is answered as JSON (http_errors.py's `error_answer`);
5. who is calling: an internal route (`/internal/...`) must show the
   cluster secret (app.py), a public one (`/healthz`, ...) needs nothing,
   any other is authenticated (authentication.py);
6. authorization of the route (access.py; with `[security] authorization`);
7. the serving gate (serving_gate.py; brokers only);
8. client quotas (quota_gate.py; `/v1/` routes while some quota is set);
9. the request body is read whole under the node's budgets (request_bodies.py;
   with the listener, http_server.py);
10. the metrics note the handler's start, and the handler runs.

They were twelve aiohttp middlewares; as one they cost a node ~110 µs less
CPU per request (docs/benchmarks.md, "CPU per request"): each layer was a
coroutine and a frame to await, and each looked the route up again. What a
step decides from the route alone (internal, public, gated, its
authorization decision) is decided once per route (`RoutePlan`) and kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute

from lograft.api.access import AccessControl, enforce_route
from lograft.api.auth_failure_log import AuthFailureLog
from lograft.api.authentication import INTERNAL_PREFIX, PUBLIC_ROUTES, Authenticator
from lograft.api.cluster_secret import check_cluster_secret
from lograft.api.console.cors import Origins, preflight_answer
from lograft.api.http_errors import error_answer
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.quota_gate import QUOTA_PREFIX, QuotaGate, serve_with_quotas
from lograft.api.route_access import RouteAccess, decision_for
from lograft.api.serving_gate import ServingCheck, is_gated
from lograft.brokers.remote_wait import RequestClock, reset_clock, use_clock

if TYPE_CHECKING:
    from lograft.api.connection_guard import ConnectionGuard
    from lograft.api.request_bodies import RequestBodies

__all__ = ["PIPELINE_KEY", "RequestPipeline", "RoutePlan"]


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """What the steps decide from a matched route alone."""

    method: str
    canonical: str
    internal: bool
    public: bool
    gated: bool
    decision: RouteAccess | None

    @classmethod
    def of(cls, method: str, canonical: str) -> RoutePlan:
        internal = canonical.startswith(INTERNAL_PREFIX)
        return cls(
            method=method,
            canonical=canonical,
            internal=internal,
            public=canonical in PUBLIC_ROUTES and not internal,
            gated=is_gated(method, canonical),
            decision=decision_for(method, canonical),
        )


class RequestPipeline:
    """The steps above for one app; `middleware()` is the app's one middleware.
    The listener (http_server.py) adds its connection guard and request
    bodies before it serves."""

    def __init__(
        self,
        *,
        cluster_secret: str,
        authenticator: Authenticator,
        secret_failures: AuthFailureLog,
        access: AccessControl | None = None,
        serving: ServingCheck | None = None,
        quotas: QuotaGate | None = None,
        request_metrics: RequestMetrics | None = None,
        cors_origins: Origins | None = None,
    ) -> None:
        self.cluster_secret = cluster_secret
        self.authenticator = authenticator
        self.secret_failures = secret_failures
        self.access = access
        self.serving = serving
        self.quotas = quotas
        self.metrics = request_metrics
        if request_metrics is not None:
            request_metrics.note_handler_marks()
        self.cors_origins = cors_origins
        self.guard: ConnectionGuard | None = None
        self.bodies: RequestBodies | None = None
        # One plan per route the app has (keyed by the route object, which
        # lives as long as the app; a 404/405's route is made per request and
        # never planned).
        self._plans: dict[AbstractRoute, RoutePlan] = {}

    def middleware(self) -> Any:
        @web.middleware
        async def pipeline(request: web.Request, handler: Any) -> web.StreamResponse:
            return await self.serve(request, handler)

        return pipeline

    def plan(self, route: AbstractRoute) -> RoutePlan | None:
        """The route's plan; None for a request that matched no route."""
        plan = self._plans.get(route)
        if plan is None:
            resource = route.resource
            if resource is None:
                return None
            plan = self._plans[route] = RoutePlan.of(route.method, resource.canonical)
        return plan

    async def serve(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Steps 1-4 around the rest."""
        conn = self.guard.connection_of(request) if self.guard is not None else None
        if conn is not None:
            conn.request_started(request.content)
        metrics = self.metrics
        clock: RequestClock | None = None
        token: object = None
        if metrics is not None:
            clock = RequestClock(time.perf_counter())
            token = use_clock(clock)
        response: web.StreamResponse | None = None
        try:
            if self.cors_origins is not None and request.method == "OPTIONS":
                response = preflight_answer(request, self.cors_origins)
                if response is not None:
                    return response
            try:
                response = await self._checked(request, handler, clock)
            except Exception as exc:
                response = error_answer(exc, request)
                if response is None:
                    raise
            return response
        finally:
            if metrics is not None and clock is not None:
                reset_clock(token)
                metrics.observe(request, clock, time.perf_counter(), response)
            if conn is not None:
                conn.request_finished()

    async def _checked(
        self, request: web.Request, handler: Any, clock: RequestClock | None
    ) -> web.StreamResponse:
        """Steps 5-10."""
        route = request.match_info.route
        plan = self.plan(route)
        if (plan is not None and plan.internal) or request.path.startswith(INTERNAL_PREFIX):
            refused = check_cluster_secret(request, self.cluster_secret, self.secret_failures)
            if refused is not None:
                return refused
        elif plan is None or not plan.public:
            if self.authenticator.settings.authenticating:
                refused = await self.authenticator.authenticated(request)
                if refused is not None:
                    return refused
            else:
                self.authenticator.set_anonymous(request)
        if plan is not None:
            if self.access is not None:
                enforce_route(self.access, plan.method, plan.canonical, plan.decision, request)
            if plan.gated and self.serving is not None:
                refusal = self.serving()
                if refusal is not None:
                    raise refusal  # answered below: 503 + Retry-After
        quotas = self.quotas
        if quotas is not None and request.path.startswith(QUOTA_PREFIX):
            quotas.sync()
            if quotas.any_active:
                return await serve_with_quotas(quotas, request, _Inner(self, handler, clock))
        return await self._handled(request, handler, clock)

    async def _handled(
        self, request: web.Request, handler: Any, clock: RequestClock | None
    ) -> web.StreamResponse:
        """Steps 9-10: the body read under its budget, then the handler."""
        bodies = self.bodies
        if (
            bodies is None
            or not request.body_exists
            or request.match_info.http_exception is not None  # a 404/405 reads none
        ):
            if clock is not None:
                clock.handler_at = time.perf_counter()
            return await handler(request)
        taken = await bodies.take(request)
        if isinstance(taken, web.Response):
            return taken
        try:
            if clock is not None:
                clock.handler_at = time.perf_counter()
            return await handler(request)
        finally:
            taken.release()


class _Inner:
    """Steps 9-10 as a handler, for the quotas to time and throttle."""

    __slots__ = ("_clock", "_handler", "_pipeline")

    def __init__(self, pipeline: RequestPipeline, handler: Any, clock: RequestClock | None) -> None:
        self._pipeline = pipeline
        self._handler = handler
        self._clock = clock

    def __call__(self, request: web.Request) -> Any:
        return self._pipeline._handled(request, self._handler, self._clock)


# Where the app keeps its pipeline (for the listener to add its steps).
PIPELINE_KEY = web.AppKey("lograft.request_pipeline", RequestPipeline)

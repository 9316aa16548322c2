"""The aiohttp application: middleware, limits and route groups.

Public API under `/v1`, health at `/healthz` (the process is up, and how
late its event loop runs: `loop_lag_ms`, lograft/node/loop_lag.py) and
`/readyz` (it can serve: metadata caught up, broker registered and unfenced,
its metadata caught up with the quorum as of its registration (until then the
data routes refuse: serving_gate.py),
every replica it should host in service; docs/api.md),
internal endpoints under `/internal/v1` behind the cluster secret
(`X-Lograft-Cluster-Secret`), and the OpenAPI document at `/openapi.json`.

One middleware, the request pipeline (api/request_pipeline.py), runs every
step between aiohttp and a handler, in order: the connection guard
(http_server.py), the request metrics' timer (api/metrics/request_metrics.py;
with metrics on), CORS preflights of the cluster's own nodes
(api/console/cors.py), errors as JSON, authentication (api/authentication.py:
sets the Caller) or the internal-secret check (api/cluster_secret.py),
authorization (api/access.py), the serving gate, client quotas
(api/quota_gate.py), request bodies (http_server.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from lograft.api.access import ACCESS_KEY, AccessControl, check_every_route_decided
from lograft.api.authentication import INTERNAL_PREFIX, Authenticator
from lograft.api.cluster_secret import (
    CLUSTER_PRINCIPAL,
    SECRET_CHALLENGE,
    SECRET_HEADER,
    check_cluster_secret,
)
from lograft.api.console.cors import Origins, add_cors_headers
from lograft.api.http_errors import REQUEST_BYTES_MAX_KEY
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.quota_gate import QUOTA_GATE_KEY, QuotaGate
from lograft.api.request_pipeline import PIPELINE_KEY, RequestPipeline
from lograft.api.serving_gate import ServingCheck

__all__ = [
    "CLUSTER_PRINCIPAL",
    "INTERNAL_PREFIX",
    "SECRET_CHALLENGE",
    "SECRET_HEADER",
    "check_cluster_secret",
    "create_app",
]

ReadyCheck = Callable[[], tuple[bool, dict[str, Any]]]
# What /healthz adds to {"status": "ok"}.
HealthDetail = Callable[[], dict[str, Any]]


def create_app(
    *,
    cluster_secret: str,
    request_bytes_max: int,
    ready: ReadyCheck,
    health: HealthDetail | None = None,
    serving: ServingCheck | None = None,
    authenticator: Authenticator | None = None,
    access: AccessControl | None = None,
    quotas: QuotaGate | None = None,
    request_metrics: RequestMetrics | None = None,
    cors_origins: Origins | None = None,
) -> web.Application:
    """`serving`: None when the node has no data routes (no broker role), else
    what refuses them while the broker may not serve (api/serving_gate.py).
    `authenticator`: who is calling (api/authentication.py); None: everyone
    is User:ANONYMOUS. `access`: None with `[security] authorization` off,
    else what decides every route (api/access.py), after authentication; the
    app then refuses to start with a route the table (api/route_access.py)
    does not decide. `quotas`: the client quotas enforced on the public
    routes (api/quota_gate.py); None: none. `request_metrics`: times every
    request from the first middleware (api/metrics/request_metrics.py);
    None: metrics off. `cors_origins`: the origins (the cluster's nodes)
    whose pages may call this node, for the web console's failover
    (api/console/cors.py); None: no CORS answers."""
    authenticator = authenticator or Authenticator()
    # Every step of every request runs in one middleware (request_pipeline.py).
    pipeline = RequestPipeline(
        cluster_secret=cluster_secret,
        authenticator=authenticator,
        secret_failures=authenticator.failures,
        access=access,
        serving=serving,
        quotas=quotas,
        request_metrics=request_metrics,
        cors_origins=cors_origins,
    )
    app = web.Application(client_max_size=request_bytes_max, middlewares=[pipeline.middleware()])
    app[PIPELINE_KEY] = pipeline
    app[REQUEST_BYTES_MAX_KEY] = request_bytes_max
    if cors_origins is not None:
        add_cors_headers(app, cors_origins)
    if quotas is not None:
        app[QUOTA_GATE_KEY] = quotas
    if access is not None:
        app[ACCESS_KEY] = access
        app.on_startup.append(check_every_route_decided)

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", **(health() if health is not None else {})})

    async def readyz(_request: web.Request) -> web.Response:
        ok, detail = ready()
        return web.json_response({"ready": ok, **detail}, status=200 if ok else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app

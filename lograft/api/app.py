"""The aiohttp application: middleware, limits and route groups.

Public API under `/v1`, health at `/healthz` (the process is up, and how
late its event loop runs: `loop_lag_ms`, lograft/node/loop_lag.py) and
`/readyz` (it can serve: metadata caught up, broker registered and unfenced,
its metadata caught up with the quorum as of its registration (until then the
data routes refuse: serving_gate.py),
every replica it should host in service; docs/api.md),
internal endpoints under `/internal/v1` behind the cluster secret
(`X-Lograft-Cluster-Secret`), and the OpenAPI document at `/openapi.json`.

Middleware, outermost first: the connection guard (http_server.py), the
request metrics' timer (api/metrics/request_metrics.py; with metrics on),
CORS preflights of the cluster's own nodes (api/console/cors.py), errors
as JSON, authentication (api/authentication.py: sets the Caller), the
internal-secret check, authorization (api/access.py), the serving gate,
client quotas (api/quota_gate.py), request bodies (http_server.py).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from aiohttp import web

from lograft.api.access import (
    ACCESS_KEY,
    AccessControl,
    authorization_middleware,
    check_every_route_decided,
)
from lograft.api.auth_failure_log import AuthFailureLog
from lograft.api.authentication import Authenticator, is_internal, peer_host, refusal
from lograft.api.caller import CALLER_KEY, Caller, How
from lograft.api.console.cors import Origins, add_cors_headers, cors_middleware
from lograft.api.http_errors import REQUEST_BYTES_MAX_KEY, error_middleware
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.quota_gate import QUOTA_GATE_KEY, QuotaGate, quota_middleware
from lograft.api.serving_gate import ServingCheck, serving_gate_middleware
from lograft.security.failures import AuthenticationFailed, AuthFailure

INTERNAL_PREFIX = "/internal/"
SECRET_HEADER = "X-Lograft-Cluster-Secret"
# The principal of another node calling an internal endpoint with the
# cluster secret (How.CLUSTER; no credential can claim it, the How tells).
CLUSTER_PRINCIPAL = "User:lograft-cluster"
# The challenge of an internal endpoint's 401.
SECRET_CHALLENGE = 'Cluster-Secret realm="lograft-internal"'

ReadyCheck = Callable[[], tuple[bool, dict[str, Any]]]
# What /healthz adds to {"status": "ok"}.
HealthDetail = Callable[[], dict[str, Any]]


def secret_middleware(secret: str, failures: AuthFailureLog | None = None) -> Any:
    """Internal endpoints answer only callers that present the cluster secret
    (never client credentials: an Authorization header is not looked at).
    Refused: 401 SASL_AUTHENTICATION_FAILED, details.reason
    `missing_credentials` (no secret) or `bad_credentials` (a wrong one)."""
    failures = failures or AuthFailureLog()

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if is_internal(request):
            given = request.headers.get(SECRET_HEADER, "")
            if not secret or not hmac.compare_digest(
                given.encode("utf-8", "surrogateescape"), secret.encode()
            ):
                failure = AuthenticationFailed(
                    AuthFailure.BAD_CREDENTIALS if given else AuthFailure.MISSING,
                    f"internal endpoint: send the cluster secret in {SECRET_HEADER}",
                )
                failures.failure(
                    failure.reason.value,
                    peer_host(request),
                    failure.message,
                    where=f"{request.method} {request.path}",
                )
                return refusal(failure, (SECRET_CHALLENGE,))
            request[CALLER_KEY] = Caller(CLUSTER_PRINCIPAL, peer_host(request), "", How.CLUSTER)
        return await handler(request)

    return check


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
    middlewares: list[Any] = [] if request_metrics is None else [request_metrics.middleware()]
    if cors_origins is not None:
        # Before authentication: a preflight carries no credentials.
        middlewares.append(cors_middleware(cors_origins))
    middlewares += [
        error_middleware,
        authenticator.middleware(),
        secret_middleware(cluster_secret, authenticator.failures),
    ]
    if access is not None:
        middlewares.append(authorization_middleware(access))
    if serving is not None:
        middlewares.append(serving_gate_middleware(serving))
    if quotas is not None:
        middlewares.append(quota_middleware(quotas))
    app = web.Application(client_max_size=request_bytes_max, middlewares=middlewares)
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

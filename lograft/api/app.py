"""The aiohttp application: middleware, limits and route groups.

Public API under `/v1`, health at `/healthz` (the process is up, and how
late its event loop runs: `loop_lag_ms`, lograft/node/loop_lag.py) and
`/readyz` (it can serve: metadata caught up, broker registered and unfenced,
its metadata caught up with the quorum as of its registration (until then the
data routes refuse: serving_gate.py),
every replica it should host in service; docs/api.md),
internal endpoints under `/internal/v1` behind the cluster secret
(`X-Lograft-Cluster-Secret`), and the OpenAPI document at `/openapi.json`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from aiohttp import web

from lograft.api.http_errors import (
    REQUEST_BYTES_MAX_KEY,
    UnauthorizedError,
    error_middleware,
    error_response,
)
from lograft.api.serving_gate import ServingCheck, serving_gate_middleware

INTERNAL_PREFIX = "/internal/"
SECRET_HEADER = "X-Lograft-Cluster-Secret"

ReadyCheck = Callable[[], tuple[bool, dict[str, Any]]]
# What /healthz adds to {"status": "ok"}.
HealthDetail = Callable[[], dict[str, Any]]


def secret_middleware(secret: str) -> Any:
    """Internal endpoints answer only callers that present the cluster secret."""

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith(INTERNAL_PREFIX):
            given = request.headers.get(SECRET_HEADER, "")
            if not secret or not hmac.compare_digest(given.encode(), secret.encode()):
                return error_response(
                    UnauthorizedError(
                        f"internal endpoint: send the cluster secret in {SECRET_HEADER}"
                    )
                )
        return await handler(request)

    return check


def create_app(
    *,
    cluster_secret: str,
    request_bytes_max: int,
    ready: ReadyCheck,
    health: HealthDetail | None = None,
    serving: ServingCheck | None = None,
) -> web.Application:
    """`serving`: None when the node has no data routes (no broker role), else
    what refuses them while the broker may not serve (api/serving_gate.py)."""
    middlewares = [error_middleware, secret_middleware(cluster_secret)]
    if serving is not None:
        middlewares.append(serving_gate_middleware(serving))
    app = web.Application(client_max_size=request_bytes_max, middlewares=middlewares)
    app[REQUEST_BYTES_MAX_KEY] = request_bytes_max

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", **(health() if health is not None else {})})

    async def readyz(_request: web.Request) -> web.Response:
        ok, detail = ready()
        return web.json_response({"ready": ok, **detail}, status=200 if ok else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app

"""Cross-origin answers for the web console (docs/console.md, "Failover").

The console is loaded from one node but must keep working when that node
dies, so it calls the cluster's other nodes: other origins (another port or
host), which a browser lets a page read only with CORS headers. They are
given only to the cluster's own nodes' origins (`origins()`: the `http`
endpoints of the brokers in this node's metadata), never to any other site:
a page elsewhere cannot read this API through a visitor's browser (with
security off, or with a TLS client certificate the browser would present).

The console sends its credentials in an explicit `Authorization` header (no
cookies), so no `Access-Control-Allow-Credentials` is ever sent. A preflight
(`OPTIONS` with `Access-Control-Request-Method`) from an allowed origin is
answered 204 before authentication (browsers send no credentials on one);
any other `OPTIONS` goes on to routing as before (405).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from aiohttp import web

Origins = Callable[[], frozenset[str]]

ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE"
ALLOWED_HEADERS = "Authorization, Content-Type, Last-Event-ID, X-Lograft-Client-Id"
# What the console may read of an answer beyond the CORS-safelisted headers.
EXPOSED_HEADERS = (
    "Retry-After, X-Lograft-High-Watermark, X-Lograft-Log-Start-Offset, X-Lograft-Next-Offset"
)
# How long a browser may reuse a preflight's answer, seconds.
PREFLIGHT_MAX_AGE_S = 600


def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of an http(s) URL, as a browser's Origin header says it."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 80 if parts.scheme == "http" else 443
    return f"{parts.scheme}://{host}" + ("" if port in (None, default) else f":{port}")


def origins_of(urls: Iterable[str]) -> frozenset[str]:
    return frozenset(o for o in map(origin_of, urls) if o is not None)


def allowed_origin(request: web.Request, origins: Origins) -> str | None:
    origin = request.headers.get("Origin")
    return origin if origin is not None and origin in origins() else None


def preflight_answer(request: web.Request, origins: Origins) -> web.Response | None:
    """The 204 to an allowed origin's preflight (an `OPTIONS` request); None
    for anything else."""
    if "Access-Control-Request-Method" not in request.headers:
        return None
    origin = allowed_origin(request, origins)
    if origin is None:
        return None
    return web.Response(
        status=204,
        headers={
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": ALLOWED_METHODS,
            "Access-Control-Allow-Headers": ALLOWED_HEADERS,
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
            "Vary": "Origin",
        },
    )


def add_cors_headers(app: web.Application, origins: Origins) -> None:
    """Every answer (errors and streams included: set before the headers are
    sent) to an allowed origin says so."""

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        origin = allowed_origin(request, origins)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
            response.headers.add("Vary", "Origin")

    app.on_response_prepare.append(on_prepare)

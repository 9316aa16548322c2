"""The console's static files, served at `/ui/` and `/ui/{asset}`.

Only the files named in `ASSETS` are served, read once from this package's
`static/` folder (shipped as package data, so an installed node has them):
no path from a request ever reaches the file system. They hold no data (the
page fetches everything from the public API with the caller's credentials),
so the routes are public (api/route_access.py) and open through the serving
gate (api/serving_gate.py).

Every answer carries a strict Content-Security-Policy: scripts, styles and
images only from this node, no inline script or style, no framing, and
`connect-src` naming this node and the cluster's other nodes (their
origins, from the metadata's broker endpoints: the console fails over to
them when this node goes away; api/console/cors.py lets them answer it).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from aiohttp import web

from lograft.echo import clip, shown
from lograft.errors import NotFoundError

# Files served, with their content types; nothing else under /ui/ exists.
ASSETS: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
INDEX = "index.html"
UI_ROUTES = ("/ui", "/ui/", "/ui/{asset}")

Origins = Callable[[], frozenset[str]]


def load_assets() -> dict[str, bytes]:
    """Every file of `ASSETS`, from the package's static folder."""
    folder = resources.files(__package__).joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in ASSETS}


def content_security_policy(origins: frozenset[str]) -> str:
    """The page may load only this node's files and talk only to the cluster's nodes."""
    connect = " ".join(["'self'", *sorted(origins)])
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src {connect}; object-src 'none'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    )


def add_console_routes(app: web.Application, origins: Origins) -> None:
    """`GET /ui` and `/ui/` (the page; it names its files by absolute
    paths, so both work) and `/ui/{asset}`."""
    files = load_assets()

    def answer(name: str) -> web.Response:
        return web.Response(
            body=files[name],
            headers={
                "Content-Type": ASSETS[name],
                "Content-Security-Policy": content_security_policy(origins()),
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                # A node upgrade changes the files: always revalidate.
                "Cache-Control": "no-cache",
            },
        )

    async def index(_request: web.Request) -> web.Response:
        return answer(INDEX)

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["asset"]
        if name not in files:
            raise NotFoundError(f"the console has no file {shown(name)}", asset=clip(name))
        return answer(name)

    app.router.add_get("/ui", index)
    app.router.add_get("/ui/", index)
    app.router.add_get("/ui/{asset}", asset)

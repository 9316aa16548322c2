"""The web console's static routes and its CORS answers (lograft/api/console):
the files are served with a strict CSP, nothing outside the shipped set is,
and only the cluster's own nodes' origins get CORS answers (a preflight
before authentication, the header on every answer, errors included)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.api.authentication import Authenticator
from lograft.api.console.assets import ASSETS, add_console_routes, content_security_policy
from lograft.api.console.cors import origin_of, origins_of
from tests.unit.api.test_authentication import CREDENTIALS, security

PEER = "http://127.0.0.1:19093"
ORIGINS = frozenset({"http://127.0.0.1:19092", PEER})


def ready() -> tuple[bool, dict[str, Any]]:
    return True, {}


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    # Authentication on (passwords): a preflight must be answered without
    # credentials, while the API still refuses a request without them.
    app = create_app(
        cluster_secret="s" * 16,
        request_bytes_max=1 << 20,
        ready=ready,
        authenticator=Authenticator(security("password"), credentials=lambda: CREDENTIALS),
        cors_origins=lambda: ORIGINS,
    )
    add_console_routes(app, lambda: ORIGINS)

    async def cluster(_request: web.Request) -> web.Response:
        return web.json_response({"cluster_id": "c"})

    app.router.add_get("/v1/cluster", cluster)
    async with TestClient(TestServer(app)) as c:
        yield c


async def test_the_page_and_its_files_are_served_with_a_strict_csp(
    client: TestClient[Any, Any],
) -> None:
    pages = [("/ui", "index.html"), ("/ui/", "index.html")]
    for path, name in [*pages, *((f"/ui/{n}", n) for n in ASSETS)]:
        resp = await client.get(path)
        assert resp.status == 200, path
        assert resp.headers["Content-Type"] == ASSETS[name]
        csp = resp.headers["Content-Security-Policy"]
        assert csp.startswith("default-src 'self'; script-src 'self'; style-src 'self'")
        assert f"connect-src 'self' http://127.0.0.1:19092 {PEER};" in csp
        assert "frame-ancestors 'none'" in csp
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    page = await (await client.get("/ui/")).text()
    assert '<script src="/ui/console.js"' in page and "<style" not in page


async def test_only_the_shipped_files_exist(client: TestClient[Any, Any]) -> None:
    for path in ("/ui/secret.txt", "/ui/..%2Fassets.py", "/ui/%2E%2E%2F__init__.py"):
        resp = await client.get(path)
        assert resp.status == 404, path
        assert (await resp.json())["error"]["code"] == "NOT_FOUND"
    # No route at all: not public, so authentication refuses it first.
    assert (await client.get("/ui/static/console.js")).status == 401


async def test_a_cluster_nodes_origin_gets_cors_answers(client: TestClient[Any, Any]) -> None:
    preflight = await client.options(
        "/v1/cluster",
        headers={
            "Origin": PEER,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == PEER
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    assert "Access-Control-Allow-Credentials" not in preflight.headers
    # The API itself still wants credentials; its refusal is readable cross-origin.
    refused = await client.get("/v1/cluster", headers={"Origin": PEER})
    assert refused.status == 401
    assert refused.headers["Access-Control-Allow-Origin"] == PEER


async def test_any_other_origin_gets_none(client: TestClient[Any, Any]) -> None:
    evil = "http://evil.example"
    preflight = await client.options(
        "/v1/cluster", headers={"Origin": evil, "Access-Control-Request-Method": "GET"}
    )
    assert preflight.status == 401  # no preflight answer: on to authentication
    assert "Access-Control-Allow-Origin" not in preflight.headers
    resp = await client.get("/v1/cluster", headers={"Origin": evil})
    assert "Access-Control-Allow-Origin" not in resp.headers


def test_origins_are_what_a_browser_sends() -> None:
    assert origin_of("http://127.0.0.1:9092") == "http://127.0.0.1:9092"
    assert origin_of("https://Node-1.example:443/x") == "https://node-1.example"
    assert origin_of("http://[::1]:9092/") == "http://[::1]:9092"
    assert origin_of("ftp://x") is None and origin_of("http://:bad") is None
    assert origins_of(["http://a:1", "junk"]) == frozenset({"http://a:1"})
    assert "connect-src 'self' http://a:1 http://b:2;" in content_security_policy(
        frozenset({"http://b:2", "http://a:1"})
    )

"""The app's one middleware (lograft/api/request_pipeline.py): its steps keep
their order, and what it decides from a route is decided once per route."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import SECRET_HEADER, create_app
from lograft.api.caller import CALLER_KEY
from lograft.api.request_pipeline import PIPELINE_KEY
from lograft.errors import BrokerNotAvailableError

SECRET = "unit-test-cluster-secret"


def app_with(**kwargs: Any) -> web.Application:
    app = create_app(
        cluster_secret=SECRET, request_bytes_max=1 << 20, ready=lambda: (True, {}), **kwargs
    )

    async def who(request: web.Request) -> web.Response:
        caller = request[CALLER_KEY]
        return web.json_response({"principal": caller.principal, "how": caller.how.value})

    app.router.add_get("/v1/topics/{topic}", who)
    app.router.add_post("/internal/v1/produce", who)
    return app


async def test_one_middleware_runs_every_step() -> None:
    app = app_with()
    assert len(app.middlewares) == 1
    assert app[PIPELINE_KEY] is not None


async def test_the_caller_is_the_cluster_on_internal_routes_and_anonymous_elsewhere() -> None:
    async with TestClient(TestServer(app_with())) as client:
        public = await client.get("/v1/topics/t")
        assert (await public.json()) == {"principal": "User:ANONYMOUS", "how": "anonymous"}
        internal = await client.post("/internal/v1/produce", headers={SECRET_HEADER: SECRET})
        assert (await internal.json())["principal"] == "User:lograft-cluster"
        refused = await client.post("/internal/v1/produce", headers={SECRET_HEADER: "wrong"})
        assert refused.status == 401
        assert (await refused.json())["error"]["details"]["reason"] == "bad_credentials"


async def test_an_unrouted_internal_path_asks_for_the_secret_before_saying_404() -> None:
    """Which internal routes exist is not told to a caller without the secret."""
    async with TestClient(TestServer(app_with())) as client:
        assert (await client.get("/internal/v1/nothing")).status == 401
        found = await client.get("/internal/v1/nothing", headers={SECRET_HEADER: SECRET})
        assert found.status == 404
        assert (await found.json())["error"]["code"] == "NOT_FOUND"


async def test_the_secret_is_checked_before_the_serving_gate() -> None:
    refusal = BrokerNotAvailableError("catching up")
    async with TestClient(TestServer(app_with(serving=lambda: refusal))) as client:
        assert (await client.post("/internal/v1/produce")).status == 401
        gated = await client.post("/internal/v1/produce", headers={SECRET_HEADER: SECRET})
        assert gated.status == 503
        assert (await gated.json())["error"]["code"] == "BROKER_NOT_AVAILABLE"


async def test_a_route_is_planned_once() -> None:
    app = app_with()
    pipeline = app[PIPELINE_KEY]
    async with TestClient(TestServer(app)) as client:
        for _ in range(3):
            assert (await client.get("/v1/topics/t")).status == 200
        assert (await client.get("/v1/nothing")).status == 404
    planned = {(p.method, p.canonical) for p in pipeline._plans.values()}
    assert planned == {("GET", "/v1/topics/{topic}")}  # a 404's route is never kept
    route = next(iter(pipeline._plans))
    assert pipeline.plan(route) is pipeline.plan(route)

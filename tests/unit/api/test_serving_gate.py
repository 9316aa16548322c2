"""A broker that may not serve yet refuses its data routes with a retriable
503 (lograft/api/serving_gate.py), and only those."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.api.http_errors import RETRY_AFTER_S
from lograft.api.serving_gate import is_gated
from lograft.errors import BrokerNotAvailableError, LograftError

SECRET = "unit-test-cluster-secret"

GATED = [
    ("POST", "/v1/topics/{topic}/records", "/v1/topics/t/records"),
    (
        "POST",
        "/v1/topics/{topic}/partitions/{partition}/batches",
        "/v1/topics/t/partitions/0/batches",
    ),
    (
        "GET",
        "/v1/topics/{topic}/partitions/{partition}/records",
        "/v1/topics/t/partitions/0/records",
    ),
    (
        "GET",
        "/v1/topics/{topic}/partitions/{partition}/offsets",
        "/v1/topics/t/partitions/0/offsets",
    ),
    ("GET", "/v1/topics/{topic}/stream", "/v1/topics/t/stream"),
    ("POST", "/v1/groups/{group}/members", "/v1/groups/g/members"),
    ("GET", "/v1/groups/{group}/offsets", "/v1/groups/g/offsets"),
    ("POST", "/v1/producers", "/v1/producers"),
    ("POST", "/internal/v1/produce", "/internal/v1/produce"),
    ("POST", "/internal/v1/replica-fetch", "/internal/v1/replica-fetch"),
    ("POST", "/internal/v1/stream-fetch", "/internal/v1/stream-fetch"),
    ("POST", "/internal/v1/partition-offsets", "/internal/v1/partition-offsets"),
]
OPEN = [
    ("GET", "/v1/cluster", "/v1/cluster"),
    ("GET", "/v1/topics", "/v1/topics"),
    ("POST", "/v1/topics", "/v1/topics"),
    ("GET", "/v1/topics/{topic}", "/v1/topics/t"),
    ("POST", "/v1/topics/{topic}/partitions", "/v1/topics/t/partitions"),
    ("POST", "/internal/v1/controller/{name}", "/internal/v1/controller/register"),
]


async def _ok(_request: web.Request) -> web.Response:
    return web.json_response({"served": True})


def _app(refusal: list[LograftError | None]) -> web.Application:
    app = create_app(
        cluster_secret=SECRET,
        request_bytes_max=1 << 20,
        ready=lambda: (refusal[0] is None, {}),
        serving=lambda: refusal[0],
    )
    for method, pattern, _path in GATED + OPEN:
        app.router.add_route(method, pattern, _ok)
    return app


async def _call(client: TestClient[Any, Any], method: str, path: str) -> Any:
    return await client.request(method, path, headers={"X-Lograft-Cluster-Secret": SECRET})


@pytest.mark.parametrize(("method", "pattern", "path"), GATED)
async def test_a_data_route_is_refused_retriably_until_the_broker_serves(method, pattern, path):
    assert is_gated(method, pattern)
    refusal: list[LograftError | None] = [BrokerNotAvailableError("catching up", broker_id=1)]
    async with TestClient(TestServer(_app(refusal))) as client:
        res = await _call(client, method, path)
        assert res.status == 503
        assert res.headers["Retry-After"] == str(RETRY_AFTER_S)
        error = (await res.json())["error"]
        assert error["code"] == "BROKER_NOT_AVAILABLE"
        assert error["retriable"] is True
        refusal[0] = None
        res = await _call(client, method, path)
        assert res.status == 200, await res.text()


@pytest.mark.parametrize(("method", "pattern", "path"), OPEN)
async def test_admin_health_and_controller_routes_are_not_gated(method, pattern, path):
    assert not is_gated(method, pattern)
    refusal: list[LograftError | None] = [BrokerNotAvailableError("catching up", broker_id=1)]
    async with TestClient(TestServer(_app(refusal))) as client:
        res = await _call(client, method, path)
        assert res.status == 200, await res.text()
        assert (await client.get("/readyz")).status == 503


def test_an_undecided_route_is_gated_and_a_head_is_decided_as_its_get() -> None:
    # Fails closed: a route nobody listed serves only once the broker may
    # (tests/unit/node/test_route_decisions.py makes someone list it).
    assert is_gated("GET", "/v1/some-new-route")
    assert not is_gated("HEAD", "/readyz")
    assert is_gated("HEAD", "/v1/topics/{topic}/partitions/{partition}/records")

"""Every route a node serves is decided, gated or open, in
lograft/api/serving_gate.py: a route added later fails here until someone
lists it, instead of staying open while a restarted broker catches up.

The router walked is a real node's (broker and controller roles, wired by
lograft/node/server.py), with Raft, the controller runtime, the broker agent
and the HTTP listener stubbed out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lograft.api.serving_gate import GATED_ROUTES, OPEN_ROUTES, decision_key, is_gated
from lograft.node.broker_agent import AgentState
from lograft.node.config import parse_config

V = [{"id": 1, "raft": "h:1", "http": "h:2"}]


class NoAgent:
    """Stands in for the broker agent: nothing registers."""

    unfenced = False
    broker_epoch = -1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.state = AgentState.ACTIVE

    async def start(self) -> None:
        pass


class CapturedServer:
    """Stands in for the HTTP server: keeps the application, binds nothing."""

    apps: list[web.Application] = []

    def __init__(self, app: web.Application, _config: Any, _tls: Any = None, **_kw: Any) -> None:
        self.apps.append(app)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


@pytest.fixture
async def node_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[web.Application]:
    from lograft.node import server as node_module
    from lograft.quorum.controller_runtime import ControllerRuntime

    async def nothing(*_args: Any) -> None:
        pass

    cfg = parse_config(
        {
            "node_id": 1,
            "roles": ["broker", "controller"],
            "data_dir": str(tmp_path),
            "cluster_secret": "unit-test-cluster-secret",
            "voters": V,
            "http": {"host": "127.0.0.1", "port": 0},
        }
    )
    n = node_module.Node(cfg)
    monkeypatch.setattr(n.raft, "start", nothing)
    monkeypatch.setattr(ControllerRuntime, "start", nothing)
    monkeypatch.setattr(ControllerRuntime, "stop", nothing)
    monkeypatch.setattr(node_module, "BrokerAgent", NoAgent)
    monkeypatch.setattr(node_module, "HttpServer", CapturedServer)
    CapturedServer.apps.clear()
    try:
        await n.start()
        (app,) = CapturedServer.apps
        yield app
    finally:
        n.agent = None
        await n.stop()


def routes(app: web.Application) -> set[tuple[str, str]]:
    """Every (method, canonical pattern) the app routes, a HEAD as its GET."""
    found = set()
    for route in app.router.routes():
        assert route.resource is not None
        found.add(decision_key(route.method, route.resource.canonical))
    return found


def undecided(app: web.Application) -> set[tuple[str, str]]:
    return routes(app) - GATED_ROUTES - OPEN_ROUTES


async def test_every_route_of_a_node_is_decided_gated_or_open(node_app: web.Application) -> None:
    missing = sorted(undecided(node_app))
    assert not missing, (
        f"routes decided neither gated nor open: {missing}; add each to GATED_ROUTES "
        "or OPEN_ROUTES in lograft/api/serving_gate.py"
    )
    # The lists name only routes a node has: none is stale.
    assert routes(node_app) == GATED_ROUTES | OPEN_ROUTES
    assert not GATED_ROUTES & OPEN_ROUTES
    for method, pattern in GATED_ROUTES:
        assert is_gated(method, pattern)


async def test_a_route_added_without_a_decision_fails_the_walk(node_app: web.Application) -> None:
    async def handler(_request: web.Request) -> web.Response:
        return web.json_response({})

    node_app.router.add_get("/v1/topics/{topic}/new-thing", handler)
    assert undecided(node_app) == {("GET", "/v1/topics/{topic}/new-thing")}
    # Until decided it is gated: it fails closed, not open.
    assert is_gated("GET", "/v1/topics/{topic}/new-thing")

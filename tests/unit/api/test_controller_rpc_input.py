"""The controller's RPC bodies (internal endpoints, behind the cluster
secret) parse their integers as strictly as the public API: a peer's bad
body is INVALID_REQUEST, not a ValueError (a 500) or a value that overflows
a metadata record."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.http_errors import error_middleware
from lograft.api.routes_internal import ControllerRpc, add_controller_routes
from lograft.errors import InvalidRequestError
from tests.unit.node.test_heartbeat_contact import Clock, SlowRaft, runtime


def alter(item: dict[str, Any], **body: Any) -> dict[str, Any]:
    part = {
        "topic_id": "t",
        "partition": 0,
        "leader_epoch": 0,
        "partition_epoch": 0,
        "new_isr": [2],
        **item,
    }
    return {"broker_id": 2, "broker_epoch": 7, "partitions": [part], **body}


@pytest.mark.parametrize(
    "body",
    [
        alter({"new_isr": ["x"]}),  # int("x") was a ValueError: a 500
        alter({"new_isr": [2.0]}),
        alter({"new_isr": [True]}),
        alter({"new_isr": [2**31]}),
        alter({"partition": 2**63}),
        alter({}, broker_id=True),
        alter({}, broker_epoch=-(2**63) - 1),
    ],
)
async def test_bad_integers_in_alter_partitions_are_invalid_request(body):
    rpc = ControllerRpc(runtime(SlowRaft(), Clock()))
    with pytest.raises(InvalidRequestError):
        await rpc.methods["alter-partitions"](body)


TOPIC = {"name": "t", "partitions": 1, "replication_factor": 1}


def log_end(**item: Any) -> dict[str, Any]:
    return {"topic_id": "t", "partition": 0, "last_epoch": 0, "end_offset": 0, **item}


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("create-topic", {**TOPIC, "name": 7}, "name"),
        ("create-topic", {k: v for k, v in TOPIC.items() if k != "partitions"}, "partitions"),
        ("create-topic", {**TOPIC, "partitions": True}, "partitions"),
        ("create-topic", {**TOPIC, "replication_factor": 2**63}, "replication_factor"),
        ("create-topic", {**TOPIC, "configs": ["retention_ms"]}, "configs"),
        ("create-topic", {**TOPIC, "configs": {"retention_ms": [1]}}, "configs.retention_ms"),
        ("create-topic", {**TOPIC, "extra": 1}, "extra"),
        ("delete-topic", {}, "name"),
        ("create-partitions", {"name": "t", "partitions": "2"}, "partitions"),
        ("alter-configs", {"resource_name": "t"}, "configs"),
        ("alter-configs", {"resource_name": 1, "configs": {}}, "resource_name"),
        ("report-log-ends", {"broker_id": 2, "broker_epoch": 7}, "log_ends"),
        ("report-log-ends", {"broker_id": 2, "broker_epoch": 7, "log_ends": {}}, "log_ends"),
        (
            "report-log-ends",
            {"broker_id": 2, "broker_epoch": 7, "log_ends": [log_end(partition="0")]},
            "log_ends[0].partition",
        ),
        (
            "report-log-ends",
            {"broker_id": 2, "broker_epoch": 7, "log_ends": [log_end(end_offset=2**63)]},
            "log_ends[0].end_offset",
        ),
        # ConfigResourceType("x") was a ValueError: a 500.
        (
            "alter-configs",
            {"resource_type": "x", "resource_name": "t", "configs": {}},
            "resource_type",
        ),
    ],
)
async def test_bad_admin_bodies_are_invalid_request_naming_the_field(
    name: str, body: dict[str, Any], field: str
) -> None:
    rpc = ControllerRpc(runtime(SlowRaft(), Clock()))
    with pytest.raises(InvalidRequestError) as caught:
        await rpc.methods[name](body)
    assert str(caught.value).startswith(f"{field}:"), caught.value
    assert caught.value.details["field"] == field


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{", "request body: not valid JSON"),
        (b"[1]", "request body: Expected `object`, got `array`"),
        (b'{"name": 7}', "name: Expected `str`, got `int`"),
    ],
)
async def test_the_controller_route_answers_400_for_a_bad_body(raw: bytes, says: str) -> None:
    app = web.Application(middlewares=[error_middleware])
    add_controller_routes(app, ControllerRpc(runtime(SlowRaft(), Clock())))
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/internal/v1/controller/delete-topic", data=raw)
        body = await resp.json()
    assert resp.status == 400
    assert body["error"]["code"] == "INVALID_REQUEST"
    assert body["error"]["message"].startswith(says)

"""The error middleware cannot fail: whatever an error's details hold, the
answer is the JSON error body with code and message."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import create_app
from lograft.api.http_errors import error_dict, render_error
from lograft.errors import InvalidRequestError, OffsetOutOfRangeError

UNENCODABLE: dict[str, object] = {
    "huge": 1 << 64,  # orjson: "Integer exceeds 64-bit range"
    "object": object(),
    "surrogate": "\udc80",  # no UTF-8 form
    "nested": {"deep": [1 << 70]},
}


def _raising(error: Exception) -> web.Handler:
    async def handle(_request: web.Request) -> web.Response:
        raise error

    return handle


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    app = create_app(cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}))
    app.router.add_get(
        "/details",
        _raising(OffsetOutOfRangeError("offset out of range", log_start_offset=0, **UNENCODABLE)),
    )
    app.router.add_get(
        "/message", _raising(InvalidRequestError("bad topic \udc80", topic="\udc80", n=1))
    )
    async with TestClient(TestServer(app)) as c:
        yield c


async def test_unencodable_details_are_left_out_and_the_rest_kept(client: TestClient) -> None:
    resp = await client.get("/details")
    assert resp.status == 416
    assert resp.content_type == "application/json"
    err = (await resp.json())["error"]
    assert err["code"] == "OFFSET_OUT_OF_RANGE"
    assert err["message"] == "offset out of range"
    assert err["details"] == {"log_start_offset": 0}


async def test_an_unencodable_message_is_answered_with_replacement_characters(
    client: TestClient,
) -> None:
    resp = await client.get("/message")
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["code"] == "INVALID_REQUEST"
    assert err["message"].startswith("bad topic ")
    assert err["details"] == {"n": 1}


async def test_a_method_not_allowed_names_the_allowed_ones(client: TestClient) -> None:
    """RFC 9110: a 405 carries Allow (schemathesis found it missing)."""
    resp = await client.request("TRACE", "/details")
    assert resp.status == 405
    assert "GET" in resp.headers["Allow"].split(",")
    assert (await resp.json())["error"]["code"] == "METHOD_NOT_ALLOWED"


def test_render_error_never_raises_and_is_always_json() -> None:
    error = OffsetOutOfRangeError("m", **UNENCODABLE)
    body = orjson.loads(render_error(error))
    assert body["error"]["code"] == "OFFSET_OUT_OF_RANGE" and body["error"]["message"] == "m"
    assert "details" not in body["error"]


def test_error_dict_for_embedded_errors_is_encodable() -> None:
    embedded = error_dict(InvalidRequestError("m", partition=1 << 64, topic="t"))
    assert orjson.loads(orjson.dumps(embedded)) == {
        "code": "INVALID_REQUEST",
        "message": "m",
        "retriable": False,
        "details": {"topic": "t"},
    }

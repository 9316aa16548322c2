"""The OpenAPI 3.1 document served at `/openapi.json`.

Written by hand, next to the routes it describes; a test walks the app's
router and fails if any public route is missing here (or described here but
not served), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lograft import __version__

_ERROR = {
    "description": "error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _op(
    summary: str,
    *,
    params: list[dict[str, Any]] | None = None,
    body: str | None = None,
    ok: str = "200",
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {ok: {"description": "success"}, "default": _ERROR},
    }
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"content": {body: {"schema": {"type": "object"}}}}
    return op


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, kind: str = "integer", required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": {"type": kind}}


TOPIC = _path("topic")
PARTITION = _path("partition")


def _event_stream(op: dict[str, Any]) -> dict[str, Any]:
    """`op`, answering a text/event-stream (Server-Sent Events) on success."""
    op["responses"]["200"] = {
        "description": "a Server-Sent Events stream that lasts until the client leaves",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    return op


GROUP = _path("group")
MEMBER = _path("member")

PATHS: dict[str, dict[str, Any]] = {
    "/healthz": {"get": _op("the process is up")},
    "/readyz": {"get": _op("the node can serve (503 until it can)")},
    "/openapi.json": {"get": _op("this document")},
    "/v1/cluster": {"get": _op("cluster id, active controller, Raft state, brokers")},
    "/v1/brokers": {"get": _op("registered brokers and whether they are fenced")},
    "/v1/producers": {
        "post": _op("allocate a producer id (epoch 0) for idempotent producing", ok="201"),
    },
    "/v1/groups": {
        "get": _op("every consumer group in the cluster, with its state and coordinator"),
    },
    "/v1/groups/{group}": {
        "get": _op(
            "describe a group: state, members, assignment, committed offsets, lag",
            params=[GROUP],
        ),
        "delete": _op("delete a group without members", params=[GROUP]),
    },
    "/v1/groups/{group}/coordinator": {
        "get": _op(
            "the broker that coordinates the group (any broker answers; creates "
            "__consumer_offsets on first use)",
            params=[GROUP],
        ),
    },
    "/v1/groups/{group}/members": {
        "post": _op(
            "join: subscribed_topics, member_id?, assignor?, client_id?, "
            "rebalance_timeout_ms?, sequence?",
            params=[GROUP],
            body="application/json",
        ),
    },
    "/v1/groups/{group}/members/{member}/heartbeat": {
        "post": _op(
            "heartbeat: member_epoch, owned_partitions, sequence; the response carries "
            "the assignment",
            params=[GROUP, MEMBER],
            body="application/json",
        ),
    },
    "/v1/groups/{group}/members/{member}": {
        "delete": _op(
            "leave the group: its partitions are released at once",
            params=[GROUP, MEMBER, _query("sequence")],
        ),
    },
    "/v1/groups/{group}/offsets": {
        "post": _op(
            "commit offsets (fenced by member epoch; answered once committed, acks=all)",
            params=[GROUP],
            body="application/json",
        ),
        "get": _op(
            "committed offsets of the group; with auto_offset_reset (earliest, latest, "
            "none) every partition of topics with its start_offset",
            params=[GROUP, _query("topics", "string"), _query("auto_offset_reset", "string")],
        ),
    },
    "/v1/groups/{group}/offsets/reset": {
        "post": _op(
            "reset offsets of a group without members: earliest, latest, timestamp, offset",
            params=[GROUP],
            body="application/json",
        ),
    },
    "/v1/topics": {
        "get": _op("list topics"),
        "post": _op(
            "create a topic: name, partitions, replication_factor, configs",
            body="application/json",
            ok="201",
        ),
    },
    "/v1/topics/{topic}": {
        "get": _op(
            "describe a topic: per partition leader, replicas, ISR, offsets", params=[TOPIC]
        ),
        "delete": _op("delete a topic", params=[TOPIC]),
    },
    "/v1/topics/{topic}/partitions": {
        "post": _op("raise the partition count", params=[TOPIC], body="application/json"),
    },
    "/v1/topics/{topic}/configs": {
        "patch": _op(
            "set (or, with null, remove) topic configs", params=[TOPIC], body="application/json"
        ),
    },
    "/v1/topics/{topic}/records": {
        "post": _op(
            "produce JSON records; keyed records go to their murmur2 partition",
            params=[TOPIC, _query("acks", "string")],
            body="application/json",
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/batches": {
        "post": _op(
            "produce raw RecordBatch v2 bytes to the partition leader",
            params=[TOPIC, PARTITION, _query("acks", "string")],
            body="application/vnd.lograft.batch",
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/records": {
        "get": _op(
            "fetch records below the high watermark (long-poll); JSON, or raw batches with "
            "Accept: application/vnd.lograft.batch",
            params=[
                TOPIC,
                PARTITION,
                _query("offset", required=True),
                _query("max_records"),
                _query("max_bytes"),
                _query("max_wait_ms"),
                _query("min_bytes"),
                _query("format", "string"),
                _query("key_format", "string"),
            ],
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/offsets": {
        "get": _op(
            "earliest and latest offsets, or the first offset at a timestamp",
            params=[TOPIC, PARTITION, _query("timestamp")],
        ),
    },
    "/v1/topics/{topic}/stream": {
        "get": _event_stream(
            _op(
                "stream records live as Server-Sent Events (text/event-stream): one event per "
                "record below the high watermark, id = the cursor 'partition:next_offset,...', "
                "data = the fetch endpoint's record object; ': keep-alive' comments; an error "
                "after the stream started is 'event: error'; resume with Last-Event-ID; "
                "with group= the stream is a member of that consumer group (assigned "
                "partitions, periodic commits, 'event: assignment')",
                params=[
                    TOPIC,
                    _query("partitions", "string"),
                    _query("offset", "string"),
                    _query("format", "string"),
                    _query("key_format", "string"),
                    _query("max_bytes"),
                    _query("last_event_id", "string"),
                    _query("group", "string"),
                    _query("auto_offset_reset", "string"),
                    _query("commit_interval_ms"),
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
            )
        ),
    },
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "lograft", "version": __version__},
        "paths": PATHS,
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message", "retriable"],
                            "properties": {
                                "code": {"type": "string"},
                                "message": {"type": "string"},
                                "retriable": {"type": "boolean"},
                                "details": {"type": "object"},
                            },
                        }
                    },
                }
            }
        },
    }


def add_openapi_route(app: web.Application) -> None:
    async def handle(_request: web.Request) -> web.Response:
        return web.json_response(document())

    app.router.add_get("/openapi.json", handle)

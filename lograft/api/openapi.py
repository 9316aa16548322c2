"""The OpenAPI 3.1 document served at `/openapi.json`.

Written by hand, next to the routes it describes; a test walks the app's
router and fails if any public route is missing here (or described here but
not served), so the two cannot drift apart. Every success answer is declared
with its status, content type and schema (`openapi_schemas`), errors with the
one error body (`default`), so that schemathesis checks conformance of both
(tests/integration/test_openapi_fuzz.py). Links let its stateful phase use a
created topic, a joined member or a looked-up coordinator in the next call.
"""

from __future__ import annotations

import copy
from typing import Any

from aiohttp import web

from lograft import __version__
from lograft.api.authentication import PUBLIC_ROUTES
from lograft.api.openapi_schemas import (
    COMPONENTS,
    PARTITION_NUMBER,
    UINT64,
    Schema,
    ref,
)
from lograft.api.records_json import READ_FORMATS
from lograft.api.request_ints import QUERY_INT_MAX
from lograft.api.routes_data import BATCH_CONTENT_TYPE
from lograft.api.stream.group import AUTO_OFFSET_RESETS
from lograft.api.stream.sse import CONTENT_TYPE as EVENT_STREAM

JSON = "application/json"
BINARY: Schema = {"type": "string", "format": "binary"}

_ERROR = {"description": "error", "content": {JSON: {"schema": ref("Error")}}}


def _json(schema: str, description: str = "success", **extra: Any) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": ref(schema)}}, **extra}


_NO_BODY = {"description": "accepted (acks=0): no body, nothing is confirmed"}


def _op(
    operation_id: str,
    summary: str,
    responses: dict[str, Any],
    *,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "responses": {**responses, "default": _ERROR},
    }
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": body}
    return op


def _json_body(schema: str, example: Any) -> dict[str, Any]:
    return {JSON: {"schema": ref(schema), "example": example}}


def _path(name: str, schema: Schema, example: Any) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema, "example": example}


def _query(name: str, schema: Schema, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema}


def _int(minimum: int = 0, maximum: int = QUERY_INT_MAX) -> Schema:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


TOPIC = _path("topic", {"type": "string"}, "orders")
# The example for operations that change or remove a topic names another one.
SCRATCH_TOPIC = _path("topic", {"type": "string"}, "scratch")
PARTITION = _path("partition", PARTITION_NUMBER, 0)
GROUP = _path("group", {"type": "string"}, "billing")
MEMBER = _path("member", {"type": "string"}, "member-1")
ACKS = _query("acks", {"enum": ["0", "1", "all", "-1"]})
FORMAT = _query("format", {"enum": list(READ_FORMATS)})
KEY_FORMAT = _query("key_format", {"enum": list(READ_FORMATS)})
AUTO_OFFSET_RESET = _query("auto_offset_reset", {"enum": list(AUTO_OFFSET_RESETS)})
# A stream cursor, `partition:offset` pairs (lograft.api.stream.sse); empty: none
# (what an EventSource sends before it saw an id).
CURSOR: Schema = {"type": "string", "pattern": "^([0-9]+:[0-9]+(,[0-9]+:[0-9]+)*)?$"}

_TOPIC_LINKS = {
    name: {"operationId": op, "parameters": {"topic": "$response.body#/name"}}
    for name, op in (
        ("DescribeTopic", "describeTopic"),
        ("ProduceRecords", "produceRecords"),
        ("AlterTopicConfigs", "alterTopicConfigs"),
        ("AddPartitions", "addPartitions"),
        ("DeleteTopic", "deleteTopic"),
    )
}
_MEMBER_LINKS = {
    name: {
        "operationId": op,
        "parameters": {"group": "$response.body#/group_id", "member": "$response.body#/member_id"},
    }
    for name, op in (("Heartbeat", "heartbeat"), ("Leave", "leaveGroup"))
}
_GROUP_LINKS = {
    name: {"operationId": op, "parameters": {"group": "$response.body#/group_id"}}
    for name, op in (
        ("DescribeGroup", "describeGroup"),
        ("JoinGroup", "joinGroup"),
        ("FetchOffsets", "fetchOffsets"),
    )
}

# ACL filter query parameters (lograft/security/acl_filters.py): absent = any.
_ACL_FILTER = [
    _query("principal", {"type": "string", "minLength": 3, "maxLength": 1024}),
    _query("host", {"type": "string", "minLength": 1, "maxLength": 64}),
    _query("resource_type", ref("ResourceType")),
    _query("resource_name", {"type": "string", "minLength": 1, "maxLength": 255}),
    _query("pattern_type", {"enum": ["literal", "prefixed", "any", "match"]}),
    _query("operation", ref("AclOperation")),
    _query("permission", ref("AclPermission")),
]
USER = _path("user", {"type": "string", "minLength": 1, "maxLength": 255}, "alice")
_EXAMPLE_ACL = {
    "principal": "User:alice",
    "host": "*",
    "resource_type": "topic",
    "resource_name": "orders",
    "pattern_type": "literal",
    "operation": "read",
    "permission": "allow",
}
_SECURITY_PATHS: dict[str, dict[str, Any]] = {
    "/v1/acls": {
        "get": _op(
            "listAcls",
            "list the ACL bindings matching a filter (absent fields match anything; "
            "pattern_type=match: every binding that applies to resource_name)",
            {"200": _json("AclList")},
            params=_ACL_FILTER,
        ),
        "post": _op(
            "createAcls",
            "add ACL bindings (one that exists is left as it is, under 'existing')",
            {"201": _json("AclsCreated", "added")},
            body=_json_body("CreateAcls", {"acls": [_EXAMPLE_ACL]}),
        ),
        "delete": _op(
            "deleteAcls",
            "remove every ACL binding matching a filter (at most "
            "[controller] acls_per_request_max in one request)",
            {"200": _json("AclsDeleted")},
            params=_ACL_FILTER,
        ),
    },
    "/v1/users": {
        "get": _op(
            "listUsers",
            "users with SCRAM credentials and their mechanisms (never salts, keys or passwords)",
            {"200": _json("UserList")},
        ),
    },
    "/v1/users/{user}": {
        "put": _op(
            "setUserPassword",
            "set a user's password: hashed (PBKDF2, SCRAM) on the receiving node; only the "
            "salted hash is stored",
            {"200": _json("UserSet")},
            params=[USER],
            body=_json_body(
                "SetPassword",
                {"password": "correct horse battery", "mechanism": "SCRAM-SHA-512"},
            ),
        ),
        "delete": _op(
            "deleteUser",
            "remove a user's credentials: one mechanism, or all when absent",
            {"200": _json("UserDeleted")},
            params=[USER, _query("mechanism", ref("ScramMechanism"))],
        ),
    },
    "/v1/quotas": {
        "get": _op(
            "listQuotas",
            "client quotas, optionally only those of a named user and/or client id",
            {"200": _json("QuotaList")},
            params=[
                _query("user", {"type": "string", "minLength": 1, "maxLength": 1024}),
                _query("client_id", {"type": "string", "minLength": 1, "maxLength": 255}),
            ],
        ),
        "post": _op(
            "alterQuotas",
            "set and remove quotas of one entity (user and/or client_id; null: the default)",
            {"200": _json("QuotasAltered")},
            body=_json_body(
                "AlterQuotas",
                {"entity": {"user": "alice"}, "set": {"producer_byte_rate": 1048576}},
            ),
        ),
    },
}

PATHS: dict[str, dict[str, Any]] = {
    "/healthz": {"get": _op("health", "the process is up", {"200": _json("Health")})},
    "/readyz": {
        "get": _op(
            "readiness",
            "the node can serve (503 until it can)",
            {"200": _json("Readiness"), "503": _json("Readiness", "not ready yet")},
        )
    },
    "/openapi.json": {
        "get": _op(
            "openapi",
            "this document",
            {"200": {"description": "success", "content": {JSON: {"schema": {"type": "object"}}}}},
        )
    },
    # The web console (docs/console.md): static files, no data in them.
    "/ui": {
        "get": _op(
            "console",
            "the web console's page (it calls this API with the caller's credentials)",
            {"200": {"description": "success", "content": {"text/html": {"schema": {}}}}},
        )
    },
    "/ui/": {
        "get": _op(
            "consoleIndex",
            "the web console's page, as /ui",
            {"200": {"description": "success", "content": {"text/html": {"schema": {}}}}},
        )
    },
    "/ui/{asset}": {
        "get": _op(
            "consoleAsset",
            "one of the web console's static files (index.html, console.js, console.css)",
            {
                "200": {
                    "description": "success",
                    "content": {
                        "text/html": {"schema": {}},
                        "text/javascript": {"schema": {}},
                        "text/css": {"schema": {}},
                    },
                }
            },
            params=[_path("asset", {"type": "string"}, "console.js")],
        )
    },
    "/metrics": {
        "get": _op(
            "metrics",
            "this node's metrics, Prometheus text format (OpenMetrics when the Accept "
            "header asks for it); needs DESCRIBE on the cluster with authorization on "
            "(docs/metrics.md)",
            {
                "200": {
                    "description": "success",
                    "content": {
                        "text/plain": {"schema": {"type": "string"}},
                        "application/openmetrics-text": {"schema": {"type": "string"}},
                    },
                }
            },
        )
    },
    "/v1/cluster": {
        "get": _op(
            "describeCluster",
            "cluster id, active controller, Raft state, brokers",
            {"200": _json("Cluster")},
        )
    },
    "/v1/brokers": {
        "get": _op(
            "listBrokers",
            "registered brokers and whether they are fenced",
            {"200": _json("Brokers")},
        )
    },
    "/v1/producers": {
        "post": _op(
            "initProducer",
            "allocate a producer id (epoch 0) for idempotent producing",
            {"201": _json("Producer", "created")},
        ),
    },
    "/v1/groups": {
        "get": _op(
            "listGroups",
            "every consumer group in the cluster, with its state and coordinator",
            {"200": _json("GroupList")},
        ),
    },
    "/v1/groups/{group}": {
        "get": _op(
            "describeGroup",
            "describe a group: state, members, assignment, committed offsets, lag "
            "(an unknown group is dead)",
            {"200": _json("GroupDescription")},
            params=[GROUP],
        ),
        "delete": _op(
            "deleteGroup",
            "delete a group without members",
            {"200": _json("GroupDeleted")},
            params=[GROUP],
        ),
    },
    "/v1/groups/{group}/coordinator": {
        "get": _op(
            "findCoordinator",
            "the broker that coordinates the group (any broker answers; creates "
            "__consumer_offsets on first use)",
            {"200": _json("Coordinator", links=_GROUP_LINKS)},
            params=[GROUP],
        ),
    },
    "/v1/groups/{group}/members": {
        "post": _op(
            "joinGroup",
            "join: subscribed_topics, member_id?, assignor?, client_id?, "
            "rebalance_timeout_ms?, sequence?",
            {"200": _json("Member", links=_MEMBER_LINKS)},
            params=[GROUP],
            body=_json_body("Join", {"subscribed_topics": ["orders"], "client_id": "worker-1"}),
        ),
    },
    "/v1/groups/{group}/members/{member}/heartbeat": {
        "post": _op(
            "heartbeat",
            "heartbeat: member_epoch, owned_partitions, sequence; the response carries "
            "the assignment",
            {"200": _json("Member", links=_MEMBER_LINKS)},
            params=[GROUP, MEMBER],
            body=_json_body(
                "Heartbeat", {"member_epoch": 1, "owned_partitions": {"orders": [0]}, "sequence": 2}
            ),
        ),
    },
    "/v1/groups/{group}/members/{member}": {
        "delete": _op(
            "leaveGroup",
            "leave the group: its partitions are released at once",
            {"200": _json("Member")},
            params=[GROUP, MEMBER, _query("sequence", _int(maximum=(1 << 63) - 1))],
        ),
    },
    "/v1/groups/{group}/offsets": {
        "post": _op(
            "commitOffsets",
            "commit offsets (fenced by member epoch; answered once committed, acks=all)",
            {"200": _json("OffsetsSet")},
            params=[GROUP],
            body=_json_body(
                "Commit", {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}
            ),
        ),
        "get": _op(
            "fetchOffsets",
            "committed offsets of the group; with auto_offset_reset (earliest, latest, "
            "none) every partition of topics with its start_offset",
            {"200": _json("CommittedOffsets")},
            params=[GROUP, _query("topics", {"type": "string"}), AUTO_OFFSET_RESET],
        ),
    },
    "/v1/groups/{group}/offsets/reset": {
        "post": _op(
            "resetOffsets",
            "reset offsets of a group without members: earliest, latest, timestamp, offset",
            {"200": _json("OffsetsSet")},
            params=[GROUP],
            body=_json_body("ResetOffsets", {"strategy": "earliest", "topics": ["orders"]}),
        ),
    },
    "/v1/topics": {
        "get": _op("listTopics", "list topics", {"200": _json("TopicList")}),
        "post": _op(
            "createTopic",
            "create a topic: name, partitions, replication_factor, configs",
            {"201": _json("TopicCreated", "created", links=_TOPIC_LINKS)},
            body=_json_body("CreateTopic", {"name": "events", "partitions": 2}),
        ),
    },
    "/v1/topics/{topic}": {
        "get": _op(
            "describeTopic",
            "describe a topic: per partition leader, replicas, ISR, offsets",
            {"200": _json("TopicDescription")},
            params=[TOPIC],
        ),
        "delete": _op(
            "deleteTopic", "delete a topic", {"200": _json("TopicDeleted")}, params=[SCRATCH_TOPIC]
        ),
    },
    "/v1/topics/{topic}/partitions": {
        "post": _op(
            "addPartitions",
            "raise the partition count",
            {"200": _json("PartitionsAdded")},
            params=[SCRATCH_TOPIC],
            body=_json_body("AddPartitions", {"partitions": 2}),
        ),
    },
    "/v1/topics/{topic}/configs": {
        "patch": _op(
            "alterTopicConfigs",
            "set (or, with null, remove) topic configs",
            {"200": _json("ConfigsAltered")},
            params=[SCRATCH_TOPIC],
            body=_json_body("AlterConfigs", {"configs": {"retention_ms": "3600000"}}),
        ),
    },
    "/v1/topics/{topic}/records": {
        "post": _op(
            "produceRecords",
            "produce JSON records; keyed records go to their murmur2 partition",
            {
                "200": _json("ProduceResult", "every record written"),
                "207": _json("ProduceResult", "some partitions failed: per record outcome"),
                "202": _NO_BODY,
            },
            params=[TOPIC, ACKS],
            body=_json_body("ProduceBody", {"records": [{"key": "alice", "value": {"n": 1}}]}),
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/batches": {
        "post": _op(
            "produceBatches",
            "produce raw RecordBatch v2 bytes to the partition leader",
            {"200": _json("BatchAppended"), "202": _NO_BODY},
            params=[TOPIC, PARTITION, ACKS],
            body={BATCH_CONTENT_TYPE: {"schema": BINARY}},
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/records": {
        "get": _op(
            "fetchRecords",
            "fetch records below the high watermark (long-poll); JSON, or raw batches with "
            "Accept: application/vnd.lograft.batch",
            {
                "200": {
                    "description": "the records (JSON), or the raw batches with the rest in "
                    "headers (Accept: application/vnd.lograft.batch)",
                    "content": {
                        JSON: {"schema": ref("Fetched")},
                        BATCH_CONTENT_TYPE: {"schema": BINARY},
                    },
                    "headers": {
                        name: {"description": what, "schema": UINT64}
                        for name, what in (
                            ("X-Lograft-High-Watermark", "raw batches: the high watermark"),
                            ("X-Lograft-Log-Start-Offset", "raw batches: the log start offset"),
                            ("X-Lograft-Next-Offset", "raw batches: where to fetch next"),
                        )
                    },
                }
            },
            params=[
                TOPIC,
                PARTITION,
                _query("offset", _int(), required=True),
                _query("max_records", _int(minimum=1)),
                _query("max_bytes", _int(minimum=1)),
                _query("max_wait_ms", _int()),
                _query("min_bytes", _int()),
                FORMAT,
                KEY_FORMAT,
            ],
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/offsets": {
        "get": _op(
            "partitionOffsets",
            "earliest and latest offsets, or the first offset at a timestamp",
            {"200": _json("PartitionOffsets")},
            params=[TOPIC, PARTITION, _query("timestamp", _int(maximum=(1 << 63) - 1))],
        ),
    },
    "/v1/topics/{topic}/stream": {
        "get": _op(
            "streamRecords",
            "stream records live as Server-Sent Events (text/event-stream): one event per "
            "record below the high watermark, id = the cursor 'partition:next_offset,...', "
            "data = the fetch endpoint's record object; ': keep-alive' comments; an error "
            "after the stream started is 'event: error'; resume with Last-Event-ID; "
            "with group= the stream is a member of that consumer group (assigned "
            "partitions, periodic commits, 'event: assignment')",
            {
                "200": {
                    "description": "a Server-Sent Events stream that lasts until the client "
                    "leaves; the schema is that of one event",
                    "content": {EVENT_STREAM: {"schema": ref("StreamEvent")}},
                }
            },
            params=[
                TOPIC,
                _query("partitions", {"type": "string", "pattern": "^[0-9]+(,[0-9]+)*$"}),
                _query(
                    "offset",
                    {"anyOf": [{"enum": ["earliest", "latest"]}, {"pattern": "^[0-9]+$"}]},
                ),
                FORMAT,
                KEY_FORMAT,
                _query("max_bytes", _int(minimum=1)),
                _query("last_event_id", CURSOR),
                _query("group", {"type": "string"}),
                AUTO_OFFSET_RESET,
                _query("commit_interval_ms", _int(minimum=1)),
                {"name": "Last-Event-ID", "in": "header", "required": False, "schema": CURSOR},
            ],
        ),
    },
    **_SECURITY_PATHS,
}


# The ways in of `[security] authentication` (docs/api.md, "Authentication").
# Which ones a node takes is its config; `{}` (none) is what a node without
# authentication takes. A refusal is a 401 SASL_AUTHENTICATION_FAILED error.
SECURITY_SCHEMES: dict[str, Any] = {
    "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
    "password": {"type": "http", "scheme": "basic"},
    "certificate": {"type": "mutualTLS"},
}
_ANY_WAY_IN: list[dict[str, list[str]]] = [{}] + [{name: []} for name in SECURITY_SCHEMES]


def document() -> dict[str, Any]:
    """A fresh copy each time: a caller (a schema loader) may change what it gets."""
    doc: dict[str, Any] = copy.deepcopy(
        {
            "openapi": "3.1.0",
            "info": {"title": "lograft", "version": __version__},
            "paths": PATHS,
            "components": {"schemas": COMPONENTS, "securitySchemes": SECURITY_SCHEMES},
            "security": _ANY_WAY_IN,
        }
    )
    for path in sorted(PUBLIC_ROUTES):  # answered without credentials
        for operation in doc["paths"][path].values():
            operation["security"] = [{}]
    return doc


def add_openapi_route(app: web.Application) -> None:
    async def handle(_request: web.Request) -> web.Response:
        return web.json_response(document())

    app.router.add_get("/openapi.json", handle)

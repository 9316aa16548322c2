"""JSON Schemas of the bodies in the OpenAPI document (`openapi.py`): what
each request takes and each success and error answer holds.

The request bodies' schemas are generated from the typed Records that parse
them (`request_shapes`, msgspec's JSON Schema), so what the document promises
and what the validator takes cannot drift apart. The answers' schemas are
written by hand from the handlers that build them (routes_*.py, records_json,
group_json): the answers are plain dicts, not Records. schemathesis checks the
served answers against them (tests/integration/test_openapi_fuzz.py). Answer
objects allow properties not listed, so that adding a field to an answer is
not a breaking change; request bodies are closed (unknown fields refused).
"""

from __future__ import annotations

from typing import Any

from lograft.api.request_ints import INT32_MAX, INT64_MAX
from lograft.api.request_shapes import json_schemas

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(
    required: dict[str, Schema], optional: dict[str, Schema] | None = None, *, closed: bool = False
) -> Schema:
    """An object with `required` and `optional` properties; `closed`: no others."""
    out: Schema = {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **(optional or {})},
    }
    if closed:
        out["additionalProperties"] = False
    return out


def array(items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "items": items, **extra}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


STRING: Schema = {"type": "string"}
BOOLEAN: Schema = {"type": "boolean"}
INT64: Schema = {"type": "integer", "minimum": -(1 << 63), "maximum": INT64_MAX}
UINT64: Schema = {"type": "integer", "minimum": 0, "maximum": INT64_MAX}
INT32: Schema = {"type": "integer", "minimum": -(1 << 31), "maximum": INT32_MAX}
PARTITION_NUMBER: Schema = {"type": "integer", "minimum": 0, "maximum": INT32_MAX}
ANY: Schema = {}
# Topic name -> partition numbers, both ways (group_json).
PARTITIONS_BY_TOPIC: Schema = {"type": "object", "additionalProperties": array(PARTITION_NUMBER)}

ERROR_OBJECT = obj(
    {"code": STRING, "message": STRING, "retriable": BOOLEAN},
    {"details": {"type": "object"}},
)

# -- data: produce, fetch, offsets ----------------------------------------------------------

HEADER_VALUE = nullable(STRING)
PRODUCE_OUTCOME = {
    "anyOf": [
        obj({"partition": PARTITION_NUMBER, "offset": UINT64}, {"duplicate": BOOLEAN}),
        obj({"partition": PARTITION_NUMBER, "error": ref("ErrorObject")}),
    ]
}
# Present when a client quota delayed the answer (docs/api.md "Quotas"), ms.
THROTTLE_TIME_MS: Schema = {"type": "integer", "minimum": 1}
PRODUCE_RESULT = obj({"offsets": array(PRODUCE_OUTCOME)}, {"throttle_time_ms": THROTTLE_TIME_MS})
BATCH_APPENDED = obj(
    {
        "partition": PARTITION_NUMBER,
        "base_offset": UINT64,
        "last_offset": UINT64,
        "log_append_time": INT64,
        "duplicate": BOOLEAN,
    },
    {"throttle_time_ms": THROTTLE_TIME_MS},
)
ENCODING = {"enum": ["base64"]}
FETCHED_RECORD = obj(
    {
        "partition": PARTITION_NUMBER,
        "offset": UINT64,
        "timestamp": INT64,
        "key": ANY,
        "value": ANY,
    },
    {
        "key_encoding": ENCODING,
        "value_encoding": ENCODING,
        "headers": array(obj({"key": STRING, "value": HEADER_VALUE}, {"encoding": ENCODING})),
    },
)
FETCHED = obj(
    {
        "topic": STRING,
        "partition": PARTITION_NUMBER,
        "records": array(ref("FetchedRecord")),
        "next_offset": UINT64,
        "high_watermark": UINT64,
        "log_start_offset": UINT64,
    },
    {"throttle_time_ms": THROTTLE_TIME_MS},
)
PARTITION_OFFSETS = obj(
    {
        "topic": STRING,
        "partition": PARTITION_NUMBER,
        "earliest": UINT64,
        "latest": UINT64,
        "log_end_offset": UINT64,
    },
    {"offset_for_timestamp": nullable(obj({"offset": UINT64, "timestamp": INT64}))},
)
# One Server-Sent Event as schemathesis reads it (OpenAPI before 3.2 describes
# each event of a text/event-stream): records are the default `message`
# events, `data` the fetch endpoint's record object as JSON text.
STREAM_EVENT = obj(
    {"event": {"enum": ["message", "error", "assignment"]}, "data": STRING},
    {"id": STRING, "retry": {"type": "integer"}},
)

# -- topics, cluster --------------------------------------------------------------------------

CONFIGS = {"type": "object", "additionalProperties": STRING}
METADATA_OFFSET = {"metadata_offset": INT64}
TOPIC_CREATED = obj(
    {
        "name": STRING,
        "topic_id": STRING,
        "partitions": array(
            obj({"partition": PARTITION_NUMBER, "replicas": array(INT32)}),
        ),
    },
    METADATA_OFFSET,
)
TOPIC_DELETED = obj({"name": STRING, "topic_id": STRING}, METADATA_OFFSET)
PARTITIONS_ADDED = obj({"name": STRING, "partitions": PARTITION_NUMBER}, METADATA_OFFSET)
CONFIGS_ALTERED = obj(
    {
        "resource_type": STRING,
        "resource_name": STRING,
        "configs": {"type": "object", "additionalProperties": nullable(STRING)},
    },
    METADATA_OFFSET,
)
TOPIC_LIST = obj(
    {
        "topics": array(
            obj(
                {
                    "name": STRING,
                    "topic_id": STRING,
                    "partitions": {"type": "integer", "minimum": 0},
                    "replication_factor": {"type": "integer", "minimum": 0},
                    "configs": CONFIGS,
                }
            )
        )
    }
)
OPTIONAL_OFFSET = nullable(UINT64)
TOPIC_DESCRIPTION = obj(
    {
        "name": STRING,
        "topic_id": STRING,
        "configs": CONFIGS,
        "partitions": array(
            obj(
                {
                    "partition": PARTITION_NUMBER,
                    "leader": INT32,
                    "leader_epoch": INT32,
                    "replicas": array(INT32),
                    "isr": array(INT32),
                    "offline": BOOLEAN,
                    "log_start_offset": OPTIONAL_OFFSET,
                    "log_end_offset": OPTIONAL_OFFSET,
                    "high_watermark": OPTIONAL_OFFSET,
                    "size_bytes": OPTIONAL_OFFSET,
                }
            )
        ),
    }
)
BROKER = obj(
    {
        "id": INT32,
        "epoch": INT64,
        "state": STRING,
        "fenced": BOOLEAN,
        "rack": nullable(STRING),
        "endpoints": {"type": "object", "additionalProperties": STRING},
    }
)
BROKERS = obj({"brokers": array(ref("Broker"))})
CLUSTER = obj(
    {
        "cluster_id": STRING,
        "node_id": INT32,
        "active_controller": nullable(INT32),
        "metadata_offset": INT64,
        "raft": obj(
            {
                "role": STRING,
                "leader_id": nullable(STRING),
                "term": INT64,
                "commit_index": INT64,
                "last_applied": INT64,
                "has_quorum": BOOLEAN,
                "voters": array({"type": "object"}),
                "observers": array(ANY),
            }
        ),
        "brokers": array(ref("Broker")),
        "topics": {"type": "integer", "minimum": 0},
    }
)
PRODUCER = obj({"producer_id": UINT64, "producer_epoch": {"type": "integer", "minimum": 0}})
HEALTH = obj(
    {"status": {"const": "ok"}},
    {
        "event_loop": {"enum": ["asyncio", "uvloop"]},
        "loop_lag_ms": {"type": "object"},
        "raft_tick_lag_ms": {"type": "object"},
        "raft_term": INT64,
        "raft_elections": INT64,
    },
)
READINESS = obj(
    {"ready": BOOLEAN},
    {
        "controller_elected": BOOLEAN,
        "metadata_offset": INT64,
        # A broker: its metadata reached the quorum's offset as of its registration.
        "metadata_caught_up": BOOLEAN,
        "metadata_offset_to_reach": nullable(INT64),
    },
)

# -- consumer groups -------------------------------------------------------------------------

EPOCH = {"type": "integer", "minimum": -1, "maximum": INT32_MAX}
MEMBER = obj(
    {
        "group_id": STRING,
        "member_id": STRING,
        "member_epoch": EPOCH,
        "heartbeat_interval_ms": {"type": "integer", "minimum": 0},
        "session_timeout_ms": {"type": "integer", "minimum": 0},
        "assignment": PARTITIONS_BY_TOPIC,
    }
)
OFFSETS_SET = obj(
    {
        "group_id": STRING,
        "offsets": array(
            obj(
                {"topic": STRING, "partition": PARTITION_NUMBER, "offset": UINT64},
                {"committed_offset": OPTIONAL_OFFSET},
            )
        ),
    },
    {"dry_run": BOOLEAN},
)
COMMITTED_OFFSETS = obj(
    {
        "group_id": STRING,
        "offsets": array(
            obj(
                {"topic": STRING, "partition": PARTITION_NUMBER, "offset": OPTIONAL_OFFSET},
                {
                    "metadata": STRING,
                    "leader_epoch": EPOCH,
                    "commit_timestamp": INT64,
                    "start_offset": UINT64,
                    "error": ref("ErrorObject"),
                },
            )
        ),
    }
)
COORDINATOR = obj(
    {
        "group_id": STRING,
        "partition": PARTITION_NUMBER,
        "coordinator_id": INT32,
        "coordinator_url": nullable(STRING),
    }
)
GROUP_STATE = {"enum": ["empty", "assigning", "reconciling", "stable", "dead"]}
GROUP_LIST = obj(
    {
        "groups": array(
            obj(
                {
                    "group_id": STRING,
                    "state": GROUP_STATE,
                    "members": {"type": "integer", "minimum": 0},
                    "coordinator_id": INT32,
                }
            )
        ),
        "unreachable_brokers": array(INT32),
        "loading_partitions": array(PARTITION_NUMBER),
    }
)
GROUP_DESCRIPTION = obj(
    {
        "group_id": STRING,
        "state": GROUP_STATE,
        "group_epoch": INT32,
        "assignment_epoch": INT32,
        "assignor": STRING,
        "members": array(
            obj(
                {
                    "member_id": STRING,
                    "client_id": STRING,
                    "client_host": STRING,
                    "subscribed_topics": array(STRING),
                    "assignor": nullable(STRING),
                    "member_epoch": EPOCH,
                    "member_state": STRING,
                    "assigned": PARTITIONS_BY_TOPIC,
                    "pending_revocation": PARTITIONS_BY_TOPIC,
                    "target": PARTITIONS_BY_TOPIC,
                }
            )
        ),
        "offsets": array(
            obj(
                {
                    "topic": STRING,
                    "partition": PARTITION_NUMBER,
                    "committed_offset": OPTIONAL_OFFSET,
                    "metadata": STRING,
                    "high_watermark": OPTIONAL_OFFSET,
                    "lag": OPTIONAL_OFFSET,
                    "owner": nullable(STRING),
                }
            )
        ),
    }
)
GROUP_DELETED = obj({"group_id": STRING, "deleted": {"const": True}})

# -- security metadata (routes_security) -------------------------------------------------------

ACL_LIST = obj({"acls": array(ref("AclBinding"))})
ACLS_CREATED = obj(
    {
        "created": array(ref("AclBinding")),
        "existing": array(ref("AclBinding")),
        "metadata_offset": INT64,
    }
)
ACLS_DELETED = obj({"deleted": array(ref("AclBinding")), "metadata_offset": INT64})
USER_LIST = obj(
    {
        "users": array(
            obj(
                {
                    "name": STRING,
                    "mechanisms": array(
                        obj({"mechanism": ref("ScramMechanism"), "iterations": UINT64})
                    ),
                }
            )
        )
    }
)
USER_SET = obj(
    {
        "name": STRING,
        "mechanism": ref("ScramMechanism"),
        "iterations": UINT64,
        "metadata_offset": INT64,
    }
)
USER_DELETED = obj(
    {"name": STRING, "mechanisms": array(ref("ScramMechanism")), "metadata_offset": INT64}
)
QUOTA_VALUES: Schema = {"type": "object", "additionalProperties": {"type": "number"}}
QUOTA_LIST = obj({"quotas": array(obj({"entity": ref("QuotaEntity"), "values": QUOTA_VALUES}))})
QUOTAS_ALTERED = obj(
    {"entity": ref("QuotaEntity"), "values": QUOTA_VALUES, "metadata_offset": INT64}
)

COMPONENTS: dict[str, Schema] = {
    "Error": obj({"error": ref("ErrorObject")}),
    "ErrorObject": ERROR_OBJECT,
    "ProduceResult": PRODUCE_RESULT,
    "BatchAppended": BATCH_APPENDED,
    "FetchedRecord": FETCHED_RECORD,
    "Fetched": FETCHED,
    "PartitionOffsets": PARTITION_OFFSETS,
    "StreamEvent": STREAM_EVENT,
    "TopicCreated": TOPIC_CREATED,
    "TopicDeleted": TOPIC_DELETED,
    "PartitionsAdded": PARTITIONS_ADDED,
    "ConfigsAltered": CONFIGS_ALTERED,
    "TopicList": TOPIC_LIST,
    "TopicDescription": TOPIC_DESCRIPTION,
    "Broker": BROKER,
    "Brokers": BROKERS,
    "Cluster": CLUSTER,
    "Producer": PRODUCER,
    "Health": HEALTH,
    "Readiness": READINESS,
    "Member": MEMBER,
    "OffsetsSet": OFFSETS_SET,
    "CommittedOffsets": COMMITTED_OFFSETS,
    "Coordinator": COORDINATOR,
    "GroupList": GROUP_LIST,
    "GroupDescription": GROUP_DESCRIPTION,
    "GroupDeleted": GROUP_DELETED,
    "AclList": ACL_LIST,
    "AclsCreated": ACLS_CREATED,
    "AclsDeleted": ACLS_DELETED,
    "UserList": USER_LIST,
    "UserSet": USER_SET,
    "UserDeleted": USER_DELETED,
    "QuotaList": QUOTA_LIST,
    "QuotasAltered": QUOTAS_ALTERED,
    # The request bodies, from the Records that parse them (request_shapes).
    **json_schemas(ref("{name}")["$ref"]),
}

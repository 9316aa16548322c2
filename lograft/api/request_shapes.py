"""The JSON request bodies of the public API, declared once as typed Records.

Each body is a `lograft.typed.Record`: its fields' types and bounds are
checked, unknown fields refused, by one msgspec decode (`decode_body`), and a
bad body is `400 INVALID_REQUEST` whose message and `details.field` name the
bad field (`records[3].partition: Expected int <= 2147483647, got 2147483648`).
The same declarations are the OpenAPI document's request-body schemas
(`json_schemas`, used by openapi_schemas.py), so the document and the
validator cannot drift apart.

What a field's type cannot say is checked where it was before, with the code
it had: a key or value must be a string unless its format is `json`, acks
values go through `Acks.parse`, duplicate partitions, and the limits set in
the node config (`produce_records_max`, `offset_commit_partitions_max`). A
topic's name, partition count, replication factor and configs are judged by
the controller, which answers `INVALID_TOPIC_EXCEPTION`, `INVALID_PARTITIONS`,
`INVALID_REPLICATION_FACTOR` or `INVALID_CONFIG`; the bounds the document
shows for them are documentation only (`_documented`), never a second check
with another code.

Integers follow docs/api.md "Integers": a JSON integer (not `true`, not
`1.0`), int64 unless the field is narrower (Kafka's int32 partitions and
epochs).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from lograft import typed
from lograft.api.request_ints import INT32_MAX, INT64_MAX, INT64_MIN
from lograft.errors import InvalidRequestError
from lograft.protocol import controller_wire
from lograft.protocol.offset_reset import OffsetResetStrategy
from lograft.security.acls import AclBinding
from lograft.security.passwords import (
    ITERATIONS_DEFAULT,
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    ScramMechanism,
)
from lograft.security.quotas import QuotaEntity, QuotaKey

T = TypeVar("T")

Int64 = Annotated[int, Meta(ge=INT64_MIN, le=INT64_MAX)]
UInt64 = Annotated[int, Meta(ge=0, le=INT64_MAX)]
PartitionNumber = Annotated[int, Meta(ge=0, le=INT32_MAX)]
PositiveInt32 = Annotated[int, Meta(ge=1, le=INT32_MAX)]
# A member epoch a client may send: -1 (none) up to int32.
Epoch = Annotated[int, Meta(ge=-1, le=INT32_MAX)]
ValueFormat = Literal["json", "string", "base64"]
# Topic name -> partition numbers.
PartitionsByTopic = dict[str, list[PartitionNumber]]


def _documented(**schema: Any) -> Meta:
    """Bounds shown in the document but checked by the controller (with its
    own error code), not here."""
    return Meta(extra_json_schema=schema)


# -- produce (records_json) --------------------------------------------------------------


class HeaderItem(typed.Record):
    key: str
    value: str | None = None


class ProduceRecord(typed.Record):
    """One record: key and value in the body's formats; headers as an object
    {name: value} or a list of {key, value}; partition and timestamp (ms)
    optional."""

    key: Any = None
    value: Any = None
    headers: dict[str, str | None] | list[HeaderItem] | None = None
    partition: PartitionNumber | None = None
    timestamp: UInt64 | None = None


class ProduceBody(typed.Record):
    records: Annotated[list[ProduceRecord], Meta(min_length=1)]
    value_format: ValueFormat = "json"
    key_format: ValueFormat = "string"
    header_format: Literal["string", "base64"] = "string"
    # Acks.parse judges it (as the query parameter): "all" in any case too.
    acks: Annotated[str | int, _documented(enum=["0", "1", "all", "-1", 0, 1, -1])] | None = None


# -- topics (routes_admin) ---------------------------------------------------------------

# A topic config's value (None deletes the key): the controller RPC's type.
ConfigValue = controller_wire.ConfigValue


class CreateTopic(typed.Record):
    name: Annotated[str, _documented(pattern="^[a-zA-Z0-9._-]{1,249}$")]
    partitions: Annotated[Int64, _documented(minimum=1, maximum=INT32_MAX)] = 1
    # Absent: min(3, number of brokers).
    replication_factor: Annotated[Int64, _documented(minimum=1, maximum=INT32_MAX)] | None = None
    configs: dict[str, ConfigValue] | None = None


class AddPartitions(typed.Record):
    partitions: Annotated[Int64, _documented(minimum=1, maximum=INT32_MAX)]


class AlterConfigs(typed.Record):
    # A null value deletes the key.
    configs: Annotated[dict[str, ConfigValue], Meta(min_length=1)]


# -- consumer groups (routes_groups, routes_group_admin) -----------------------------------


class Join(typed.Record):
    subscribed_topics: list[str]
    member_id: str | None = None
    assignor: str | None = None
    client_id: str | None = None
    rebalance_timeout_ms: PositiveInt32 | None = None
    sequence: UInt64 | None = None


class Heartbeat(typed.Record):
    member_epoch: PositiveInt32
    owned_partitions: PartitionsByTopic | None = None
    subscribed_topics: list[str] | None = None
    assignor: str | None = None
    client_id: str | None = None
    rebalance_timeout_ms: PositiveInt32 | None = None
    sequence: UInt64 | None = None


class CommittedOffset(typed.Record):
    topic: str
    partition: PartitionNumber
    offset: UInt64
    metadata: str | None = None
    leader_epoch: Epoch | None = None


class Commit(typed.Record):
    offsets: list[CommittedOffset]
    member_id: str | None = None
    member_epoch: Epoch | None = None


class TopicPartitionRef(typed.Record):
    topic: str
    partition: PartitionNumber


class ResetOffsets(typed.Record):
    strategy: OffsetResetStrategy
    timestamp: UInt64 | None = None
    offset: UInt64 | None = None
    topics: list[str] | None = None
    partitions: list[TopicPartitionRef] | None = None
    # Answer the offsets a reset would set, with the committed ones, and
    # change nothing (Kafka's kafka-consumer-groups --dry-run).
    dry_run: bool = False


# -- security metadata (routes_security) ---------------------------------------------------


class CreateAcls(typed.Record):
    acls: Annotated[list[AclBinding], Meta(min_length=1)]


class SetPassword(typed.Record):
    """A user's password, hashed on the receiving node (the password's bounds
    are checked there, with a message that never repeats it)."""

    password: str
    mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_512
    iterations: Annotated[int, Meta(ge=ITERATIONS_MIN, le=ITERATIONS_MAX)] = ITERATIONS_DEFAULT


class AlterQuotas(typed.Record):
    """Set and remove quotas of one entity; `user` / `client_id` null in the
    entity is the default entity of that kind."""

    entity: QuotaEntity
    values: dict[QuotaKey, Annotated[float, Meta(gt=0)]] = msgspec.field(
        default_factory=dict, name="set"
    )
    remove: list[QuotaKey] = msgspec.field(default_factory=list)


# The bodies the OpenAPI document names, by component name.
BODIES: tuple[type[typed.Record], ...] = (
    ProduceBody,
    CreateTopic,
    AddPartitions,
    AlterConfigs,
    Join,
    Heartbeat,
    Commit,
    ResetOffsets,
    CreateAcls,
    SetPassword,
    AlterQuotas,
)


def decode_body(raw: bytes, into: type[T], *, empty: bytes | None = b"{}") -> T:
    """The body `raw` as an `into`, or InvalidRequestError naming the field
    (`details.field`). An empty body reads as `empty` (None: it is not JSON)."""
    data = raw or empty or b""
    try:
        return typed.decode_json(data, into, error=InvalidRequestError, detail="field")
    except InvalidRequestError as exc:
        if exc.details.get("field"):
            raise
        # Not even an object, or not JSON: say which document is meant.
        raise InvalidRequestError(f"request body: {exc.message}") from None


def json_schemas(ref_template: str) -> dict[str, dict[str, Any]]:
    """JSON Schemas of the bodies and every object they hold, by name."""
    _, components = msgspec.json.schema_components(BODIES, ref_template=ref_template)
    return components

"""The shapes of the controller RPCs a broker makes, both ways.

`POST /internal/v1/controller/<name>` (cluster secret required) carries one
of these requests as JSON and answers with the matching response; a node
whose own controller runtime is active makes the same call in process with
the same shapes (lograft/node/controller_client.py). The caller builds a
request here, the controller's route (lograft/api/routes_internal.py) reads it
with `request_of`, and the caller reads the answer with `response_of`: one
declaration each, so the two sides cannot drift apart.

Every answer carries `metadata_offset`: the metadata offset that includes the
call's change, so the caller can wait until its own image has caught up.

The administrative calls (create-topic, delete-topic, create-partitions,
alter-configs; for security create-acls, delete-acls, upsert-scram-credential,
delete-scram-credential, alter-client-quotas) carry what a client's admin
request asked (checked first by lograft/api/request_shapes.py); their
requests are declared here too, so the controller reads them the same way.
What a type cannot say (a topic name's characters, the partition and
replication bounds, config names and values) is judged by the controller
with its own codes (INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS,
INVALID_CONFIG, ...), as for a public request.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from lograft.errors import InvalidRequestError, LograftError
from lograft.security.acl_filters import AclFilter
from lograft.security.acls import AclBinding
from lograft.security.passwords import ScramCredential, ScramMechanism, UserName
from lograft.security.quotas import QuotaEntity, QuotaKey
from lograft.typed import Record, build, to_builtins

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

# Every integer of these bodies is an int64 (or narrower) in the metadata.
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
BrokerId = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]

R = TypeVar("R", bound=Record)


class RegisterBrokerRequest(Record, frozen=True):
    broker_id: Int64
    incarnation_id: str
    endpoints: dict[str, str]
    rack: str | None = None
    # The broker epoch this broker held when it last shut down cleanly (its
    # clean-shutdown file), -1 when its last shutdown was not clean or it has
    # none; absent (None) from a broker that does not say, taken as clean.
    previous_broker_epoch: Int64 | None = None


class RegisterBrokerResponse(Record, frozen=True):
    broker_epoch: int
    metadata_offset: int


class ReplicaLogEndItem(Record, frozen=True):
    topic_id: str
    partition: Int64
    last_epoch: Int64  # the epoch of the log's last batch, -1 for an empty log
    end_offset: Int64


class ReportLogEndsRequest(Record, frozen=True):
    """Where this broker's replicas of partitions awaiting unclean recovery
    end (lograft/quorum/unclean_recovery.py)."""

    broker_id: Int64
    broker_epoch: Int64
    log_ends: list[ReplicaLogEndItem]


class ReportLogEndsResponse(Record, frozen=True):
    elected: int  # partitions this report let the controller elect a leader for
    metadata_offset: int


class HeartbeatRequest(Record, frozen=True):
    broker_id: Int64
    broker_epoch: Int64
    metadata_offset: Int64
    want_shutdown: bool = False


class HeartbeatResponse(Record, frozen=True):
    fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool
    metadata_offset: int


class AlterPartitionItem(Record, frozen=True):
    topic_id: str
    partition: Int64
    leader_epoch: Int64
    partition_epoch: Int64
    new_isr: list[BrokerId]


class AlterPartitionsRequest(Record, frozen=True):
    """Many partitions' ISR changes, in one request and one metadata commit."""

    broker_id: Int64
    broker_epoch: Int64
    partitions: list[AlterPartitionItem]


class AlterPartitionAnswer(Record, frozen=True, omit_defaults=True):
    """One partition after the change, or `error` (an HTTP error body's inner
    object) and nothing else."""

    topic_id: str
    partition: int
    leader: int | None = None
    leader_epoch: int | None = None
    partition_epoch: int | None = None
    isr: list[int] | None = None
    error: dict[str, Any] | None = None


class AlterPartitionsResponse(Record, frozen=True):
    """Per partition, in request order."""

    partitions: list[AlterPartitionAnswer]
    metadata_offset: int


class ProducerIdsRequest(Record, frozen=True):
    broker_id: Int64
    broker_epoch: Int64


class ProducerIdsResponse(Record, frozen=True):
    first_producer_id: int
    size: int
    metadata_offset: int


# A topic config's value as a client may give it; None deletes the key. The
# controller turns each into the string the metadata stores.
ConfigValue = str | int | float | bool | None


class CreateTopicRequest(Record, frozen=True, omit_defaults=True):
    name: str
    partitions: Int64
    replication_factor: Int64
    configs: dict[str, ConfigValue] | None = None


class TopicAssignment(Record, frozen=True):
    partition: int
    replicas: list[int]


class CreateTopicResponse(Record, frozen=True):
    name: str
    topic_id: str
    partitions: list[TopicAssignment]
    metadata_offset: int


class DeleteTopicRequest(Record, frozen=True):
    name: str


class DeleteTopicResponse(Record, frozen=True):
    name: str
    topic_id: str
    metadata_offset: int


class CreatePartitionsRequest(Record, frozen=True):
    name: str
    partitions: Int64


class CreatePartitionsResponse(Record, frozen=True):
    name: str
    partitions: int
    metadata_offset: int


# The values of lograft.quorum.records.ConfigResourceType (this leaf does not
# import the quorum).
ResourceType = Literal["topic", "cluster"]


class AlterConfigsRequest(Record, frozen=True, kw_only=True):
    resource_type: ResourceType = "topic"
    resource_name: str
    configs: dict[str, ConfigValue]


class AlterConfigsResponse(Record, frozen=True):
    resource_type: ResourceType
    resource_name: str
    configs: dict[str, ConfigValue]
    metadata_offset: int


# -- security metadata (issue 12) --------------------------------------------------------
# The values are lograft.security's checked types: a request that does not
# make one is INVALID_REQUEST naming the field before the controller sees it.


class CreateAclsRequest(Record, frozen=True):
    acls: list[AclBinding]


class CreateAclsResponse(Record, frozen=True):
    created: list[AclBinding]  # added now
    existing: list[AclBinding]  # were there already (nothing added)
    metadata_offset: int


class DeleteAclsRequest(Record, frozen=True):
    filter: AclFilter


class DeleteAclsResponse(Record, frozen=True):
    deleted: list[AclBinding]
    metadata_offset: int


class UpsertScramCredentialRequest(Record, frozen=True):
    """The credential the receiving node computed from the password; the
    password itself never leaves that node."""

    credential: ScramCredential


class UpsertScramCredentialResponse(Record, frozen=True):
    name: str
    mechanism: ScramMechanism
    iterations: int
    metadata_offset: int


class DeleteScramCredentialRequest(Record, frozen=True, omit_defaults=True):
    name: UserName
    mechanism: ScramMechanism | None = None  # None: every mechanism


class DeleteScramCredentialResponse(Record, frozen=True):
    name: str
    mechanisms: list[ScramMechanism]
    metadata_offset: int


class AlterClientQuotasRequest(Record, frozen=True):
    entity: QuotaEntity
    values: dict[QuotaKey, float] = msgspec.field(default_factory=dict, name="set")
    remove: list[QuotaKey] = msgspec.field(default_factory=list)


class AlterClientQuotasResponse(Record, frozen=True):
    entity: QuotaEntity
    values: dict[QuotaKey, float]  # the entity's quotas after the change
    metadata_offset: int


# name -> (request, response)
RPCS: dict[str, tuple[type[Record], type[Record]]] = {
    "register": (RegisterBrokerRequest, RegisterBrokerResponse),
    "heartbeat": (HeartbeatRequest, HeartbeatResponse),
    "report-log-ends": (ReportLogEndsRequest, ReportLogEndsResponse),
    "alter-partitions": (AlterPartitionsRequest, AlterPartitionsResponse),
    "producer-ids": (ProducerIdsRequest, ProducerIdsResponse),
    "create-topic": (CreateTopicRequest, CreateTopicResponse),
    "delete-topic": (DeleteTopicRequest, DeleteTopicResponse),
    "create-partitions": (CreatePartitionsRequest, CreatePartitionsResponse),
    "alter-configs": (AlterConfigsRequest, AlterConfigsResponse),
    "create-acls": (CreateAclsRequest, CreateAclsResponse),
    "delete-acls": (DeleteAclsRequest, DeleteAclsResponse),
    "upsert-scram-credential": (UpsertScramCredentialRequest, UpsertScramCredentialResponse),
    "delete-scram-credential": (DeleteScramCredentialRequest, DeleteScramCredentialResponse),
    "alter-client-quotas": (AlterClientQuotasRequest, AlterClientQuotasResponse),
}


def heartbeat_request(
    broker_id: int, broker_epoch: int, metadata_offset: int, *, want_shutdown: bool = False
) -> HeartbeatRequest:
    """The one builder of a broker heartbeat (the heartbeat thread's regular
    ones, the agent's controlled-shutdown ones)."""
    return HeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        metadata_offset=metadata_offset,
        want_shutdown=want_shutdown,
    )


def request_of(body: Any, into: type[R]) -> R:
    """A controller RPC's request from its JSON value (INVALID_REQUEST naming
    the field, in the message and `details.field`, when it is not one)."""
    return build(body, into, error=InvalidRequestError, detail="field")


def response_of(doc: Any, into: type[R], error: type[LograftError]) -> R:
    """A controller RPC's answer from its JSON value (`error` when it is not one)."""
    return build(doc, into, error=error, where="controller answer")


def body_of(message: Record) -> dict[str, Any]:
    """A request or response as the JSON object it travels as."""
    body: dict[str, Any] = to_builtins(message)
    return body


__all__ = [
    "RPCS",
    "AlterClientQuotasRequest",
    "AlterClientQuotasResponse",
    "AlterConfigsRequest",
    "AlterConfigsResponse",
    "AlterPartitionAnswer",
    "AlterPartitionItem",
    "AlterPartitionsRequest",
    "AlterPartitionsResponse",
    "ConfigValue",
    "CreateAclsRequest",
    "CreateAclsResponse",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreateTopicRequest",
    "CreateTopicResponse",
    "DeleteAclsRequest",
    "DeleteAclsResponse",
    "DeleteScramCredentialRequest",
    "DeleteScramCredentialResponse",
    "DeleteTopicRequest",
    "DeleteTopicResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "ProducerIdsRequest",
    "ProducerIdsResponse",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "ResourceType",
    "TopicAssignment",
    "UpsertScramCredentialRequest",
    "UpsertScramCredentialResponse",
    "body_of",
    "heartbeat_request",
    "request_of",
    "response_of",
]

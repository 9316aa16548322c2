"""The one typed error hierarchy of lograft.

Every error a user or a peer can see is a subclass of `LograftError` with a
stable string `code`, Kafka's error number where Kafka has one (`kafka_code`,
-1 where it has none), and a `retriable` flag that tells a client whether the
same request may succeed later. The mapping to HTTP status and JSON bodies
lives only in `lograft.api`; this module knows nothing of HTTP.

A few unregistered subclasses refine a registered class for the raising
node's own code (`PeerUnreachableError` and its kin: which way a
node-to-node call failed); they keep its code, so on the wire, and back
through `from_dict`, they are that class.

This is a leaf module: every package may import it, it imports nothing of
lograft.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar


class LograftError(Exception):
    """Base of all lograft errors. `details` carries machine-readable context."""

    code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    kafka_code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "retriable": self.retriable,
        }
        if self.details:
            # A copy: the body must not alias the error's own details, which a
            # caller may still extend (and which may then contain this body).
            body["details"] = dict(self.details)
        return body

    @classmethod
    def from_dict(cls, body: Any) -> LograftError:
        """The error an error object describes: the inverse of `to_dict`, and
        the one way back from an error body (`{"error": {...}}`'s inner object)
        another node or a client reads.

        The class is the registered one for `code`, whichever class this is
        called on. A code this version does not know (a newer node's) becomes
        a `LograftError` subclass that keeps the code and the body's
        `retriable` flag. `message` and `details` are kept as sent. Raises
        ValueError when `body` is not an error object: not a JSON object, or
        no string `code`, or a `message` that is not a string, or `details`
        that are not an object (the caller decides what such an answer means).
        """
        if not isinstance(body, Mapping):
            raise ValueError(f"an error must be an object, got {_kind(body)}")
        code = body.get("code")
        if not isinstance(code, str) or not code:
            raise ValueError(f"an error needs a non-empty string code, got {_kind(code)}")
        message = body.get("message", code)
        if not isinstance(message, str):
            raise ValueError(f"error {code!r:.80}: message must be a string, got {_kind(message)}")
        details = body.get("details")
        if details is not None and not isinstance(details, Mapping):
            raise ValueError(f"error {code!r:.80}: details must be an object, got {_kind(details)}")
        known = _REGISTRY.get(code)
        if known is None:
            known = (
                LograftError
                if code == LograftError.code
                else _remote_class(code, body.get("retriable") is True)
            )
        error = known(message)
        # Assigned, not passed as keywords: a detail may be called `message`.
        error.details = dict(details) if details else {}
        return error


_REGISTRY: dict[str, type[LograftError]] = {}


def _register(cls: type[LograftError]) -> type[LograftError]:
    if cls.code in _REGISTRY:
        raise RuntimeError(f"duplicate error code {cls.code}")
    _REGISTRY[cls.code] = cls
    return cls


def all_error_classes() -> list[type[LograftError]]:
    return list(_REGISTRY.values())


# Bounded: the codes come from the network, and each one makes a class.
@functools.lru_cache(maxsize=64)
def _remote_class(code: str, retriable: bool) -> type[LograftError]:
    """A class for a code this version does not know, so the error keeps the
    sender's code and retriable flag (one class per pair while cached)."""
    return type("RemoteError", (LograftError,), {"code": code, "retriable": retriable})


def _kind(value: Any) -> str:
    """What `value` is, for a message about a malformed error body (never the
    value itself, which may be large)."""
    return "nothing" if value is None else type(value).__name__


# --- input and request errors (not retriable) --------------------------------


@_register
class InvalidRequestError(LograftError):
    code = "INVALID_REQUEST"
    kafka_code = 42


@_register
class InvalidConfigError(LograftError):
    code = "INVALID_CONFIG"
    kafka_code = 40


@_register
class CorruptRecordError(LograftError):
    """A record batch failed validation: bad CRC, bad lengths, wrong magic."""

    code = "CORRUPT_MESSAGE"
    kafka_code = 2


@_register
class InvalidRecordError(LograftError):
    """A well-formed batch whose records break a rule (offset deltas, counts)."""

    code = "INVALID_RECORD"
    kafka_code = 87


@_register
class RecordTooLargeError(LograftError):
    code = "MESSAGE_TOO_LARGE"
    kafka_code = 10


@_register
class UnsupportedCompressionError(LograftError):
    code = "UNSUPPORTED_COMPRESSION_TYPE"
    kafka_code = 76


@_register
class InvalidTimestampError(LograftError):
    code = "INVALID_TIMESTAMP"
    kafka_code = 32


@_register
class OffsetOutOfRangeError(LograftError):
    code = "OFFSET_OUT_OF_RANGE"
    kafka_code = 1


@_register
class UnknownTopicOrPartitionError(LograftError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"
    kafka_code = 3
    retriable = True


@_register
class TopicAlreadyExistsError(LograftError):
    code = "TOPIC_ALREADY_EXISTS"
    kafka_code = 36


@_register
class InvalidTopicError(LograftError):
    code = "INVALID_TOPIC_EXCEPTION"
    kafka_code = 17


@_register
class InvalidPartitionsError(LograftError):
    code = "INVALID_PARTITIONS"
    kafka_code = 37


@_register
class InvalidReplicationFactorError(LograftError):
    code = "INVALID_REPLICATION_FACTOR"
    kafka_code = 38


@_register
class InternalTopicProtectedError(LograftError):
    """An admin change that would break the internal topic `__consumer_offsets`:
    deleting it, adding partitions, or making it anything but compacted. Kafka
    has no such code (it allows all three); `details` name the topic and the
    refused operation."""

    code = "INTERNAL_TOPIC_PROTECTED"


@_register
class ResourceNotFoundError(LograftError):
    """A named security resource that does not exist: deleting a user (or
    one mechanism of a user) that has no SCRAM credential. Kafka's
    RESOURCE_NOT_FOUND, as AlterUserScramCredentials answers it."""

    code = "RESOURCE_NOT_FOUND"
    kafka_code = 91


# --- storage faults ------------------------------------------------------------


@_register
class StorageError(LograftError):
    """The disk failed under us (I/O error, disk full). The log stays consistent
    up to the last complete batch; the request may succeed once space is freed."""

    code = "KAFKA_STORAGE_ERROR"
    kafka_code = 56
    retriable = True


@_register
class LogClosedError(LograftError):
    code = "LOG_CLOSED"
    retriable = True


# --- replication and cluster errors (mostly retriable) ---------------------------


@_register
class NotLeaderOrFollowerError(LograftError):
    code = "NOT_LEADER_OR_FOLLOWER"
    kafka_code = 6
    retriable = True


@_register
class NotControllerError(LograftError):
    code = "NOT_CONTROLLER"
    kafka_code = 41
    retriable = True


@_register
class NotEnoughReplicasError(LograftError):
    code = "NOT_ENOUGH_REPLICAS"
    kafka_code = 19
    retriable = True


@_register
class NotEnoughReplicasAfterAppendError(LograftError):
    code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    kafka_code = 20
    retriable = True


@_register
class RequestTimedOutError(LograftError):
    code = "REQUEST_TIMED_OUT"
    kafka_code = 7
    retriable = True


@_register
class FencedLeaderEpochError(LograftError):
    code = "FENCED_LEADER_EPOCH"
    kafka_code = 74
    retriable = True


@_register
class FetchSessionIdNotFoundError(LograftError):
    """An incremental fetch names a session the leader does not hold (never
    created, evicted, or lost in a restart): fetch in full again."""

    code = "FETCH_SESSION_ID_NOT_FOUND"
    kafka_code = 70
    retriable = True


@_register
class InvalidFetchSessionEpochError(LograftError):
    """An incremental fetch carries another epoch than its session's next:
    fetch in full again."""

    code = "INVALID_FETCH_SESSION_EPOCH"
    kafka_code = 71
    retriable = True


@_register
class UnknownLeaderEpochError(LograftError):
    code = "UNKNOWN_LEADER_EPOCH"
    kafka_code = 75
    retriable = True


@_register
class LeaderNotAvailableError(LograftError):
    code = "LEADER_NOT_AVAILABLE"
    kafka_code = 5
    retriable = True


@_register
class BrokerNotAvailableError(LograftError):
    code = "BROKER_NOT_AVAILABLE"
    kafka_code = 8
    retriable = True


class PeerUnreachableError(BrokerNotAvailableError):
    """A node-to-node call got no answer from its peer: the connection failed
    or timed out, the peer has no address yet, or its answer broke the bounds.
    Not registered: on the wire it is BROKER_NOT_AVAILABLE; the class lets a
    caller tell "the peer did not answer" from "the peer answered with an
    error" (which is raised as the peer raised it)."""


class PeerAddressUnknownError(PeerUnreachableError):
    """The peer has no address to call (a broker not registered yet)."""


class PeerAnswerUnreadableError(BrokerNotAvailableError):
    """A peer answered a node-to-node call with a status other than 2xx and a
    body that is no lograft error (a proxy's page, a node stopping); `status`
    in its details. Not registered: BROKER_NOT_AVAILABLE on the wire."""


@_register
class StaleBrokerEpochError(LograftError):
    code = "STALE_BROKER_EPOCH"
    kafka_code = 77


@_register
class InvalidUpdateVersionError(LograftError):
    """AlterPartition with a stale partition epoch."""

    code = "INVALID_UPDATE_VERSION"
    kafka_code = 95


@_register
class IneligibleReplicaError(LograftError):
    code = "INELIGIBLE_REPLICA"
    kafka_code = 107


@_register
class OutOfOrderSequenceError(LograftError):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    kafka_code = 45


@_register
class InvalidProducerEpochError(LograftError):
    code = "INVALID_PRODUCER_EPOCH"
    kafka_code = 47


@_register
class UnknownProducerIdError(LograftError):
    code = "UNKNOWN_PRODUCER_ID"
    kafka_code = 59


@_register
class ProducerIdNotAllocatedError(LograftError):
    """A batch names a producer id the cluster has not handed out. Retriable:
    a leader whose metadata is behind may not yet know of a block of ids
    allocated a moment ago; an id that was never allocated keeps failing."""

    code = "PRODUCER_ID_NOT_ALLOCATED"
    retriable = True


# --- Raft quorum adapter (lograft.quorum.raft.adapter) ----------------------------------


@_register
class RaftCommitOutcomeUnknownError(LograftError):
    """The append may or may not have been committed (the leader changed while
    the entry was in flight). Retry only if the entry is idempotent or after
    reading the log back."""

    code = "RAFT_COMMIT_OUTCOME_UNKNOWN"
    retriable = True


@_register
class RaftQueueFullError(LograftError):
    """Too many appends are in flight on this node (`max_pending_appends`)."""

    code = "RAFT_QUEUE_FULL"
    retriable = True


@_register
class RaftStoppedError(LograftError):
    """The Raft adapter is not running (not started, stopped, or failed)."""

    code = "RAFT_STOPPED"
    retriable = True


@_register
class RaftStartupError(LograftError):
    """The Raft adapter could not start: port taken, unreadable snapshot."""

    code = "RAFT_STARTUP_FAILED"


# --- metadata quorum errors ------------------------------------------------------


@_register
class MetadataRecordError(LograftError):
    """A metadata record or batch that cannot be decoded, or whose replay would
    break an invariant of the metadata image (a controller bug, never user input)."""

    code = "INVALID_METADATA_RECORD"


@_register
class UnknownMetadataRecordTypeError(MetadataRecordError):
    code = "UNKNOWN_METADATA_RECORD_TYPE"


@_register
class UnsupportedMetadataRecordVersionError(MetadataRecordError):
    code = "UNSUPPORTED_METADATA_RECORD_VERSION"


@_register
class DuplicateBrokerRegistrationError(LograftError):
    """Another incarnation of this broker id still holds a live session. Retriable:
    the registration succeeds once that session expires."""

    code = "DUPLICATE_BROKER_REGISTRATION"
    kafka_code = 101
    retriable = True


@_register
class BrokerIdNotRegisteredError(LograftError):
    code = "BROKER_ID_NOT_REGISTERED"
    kafka_code = 102


@_register
class IsrWithoutLeaderError(InvalidRequestError):
    """AlterPartition proposed an ISR that does not contain the leader (Kafka
    answers INVALID_REQUEST; we keep its number but give the case its own code)."""

    code = "ISR_WITHOUT_LEADER"
    kafka_code = 42


# --- consumer groups (lograft.brokers.group_*) -----------------------------------


@_register
class CoordinatorLoadInProgressError(LograftError):
    """The coordinator is still replaying its `__consumer_offsets` partition."""

    code = "COORDINATOR_LOAD_IN_PROGRESS"
    kafka_code = 14
    retriable = True


@_register
class CoordinatorNotAvailableError(LograftError):
    """The group's `__consumer_offsets` partition has no leader (or does not exist yet)."""

    code = "COORDINATOR_NOT_AVAILABLE"
    kafka_code = 15
    retriable = True


@_register
class NotCoordinatorError(LograftError):
    """This broker does not lead the group's `__consumer_offsets` partition."""

    code = "NOT_COORDINATOR"
    kafka_code = 16
    retriable = True


@_register
class InvalidGroupIdError(LograftError):
    code = "INVALID_GROUP_ID"
    kafka_code = 24


@_register
class UnknownMemberIdError(LograftError):
    """The member id is not (or no longer) a member of the group: it was removed
    (left, session expired) or never joined. The client must drop its partitions
    and join again with member epoch 0."""

    code = "UNKNOWN_MEMBER_ID"
    kafka_code = 25


@_register
class OffsetMetadataTooLargeError(LograftError):
    code = "OFFSET_METADATA_TOO_LARGE"
    kafka_code = 12


@_register
class NonEmptyGroupError(LograftError):
    """The operation needs a group without members (delete, reset offsets)."""

    code = "NON_EMPTY_GROUP"
    kafka_code = 68


@_register
class GroupIdNotFoundError(LograftError):
    code = "GROUP_ID_NOT_FOUND"
    kafka_code = 69


@_register
class GroupMaxSizeReachedError(LograftError):
    code = "GROUP_MAX_SIZE_REACHED"
    kafka_code = 81


@_register
class FencedMemberEpochError(LograftError):
    """A heartbeat's member epoch is not one the coordinator can accept. The
    client must drop its partitions and join again with member epoch 0."""

    code = "FENCED_MEMBER_EPOCH"
    kafka_code = 110


@_register
class UnsupportedAssignorError(LograftError):
    code = "UNSUPPORTED_ASSIGNOR"
    kafka_code = 112


@_register
class StaleMemberEpochError(LograftError):
    """An offset commit carries an older member epoch than the member's current
    one (a zombie, or a commit that raced a rebalance). Retrying the same request
    cannot succeed; the client heartbeats, then commits with the new epoch."""

    code = "STALE_MEMBER_EPOCH"
    kafka_code = 113


@_register
class NoOffsetError(LograftError):
    """No committed offset and `auto_offset_reset=none` (Kafka's client-side
    NoOffsetForPartitionException; no wire code in Kafka)."""

    code = "NO_OFFSET"


@_register
class GroupsLimitReachedError(LograftError):
    """This coordinator already holds `groups_max` groups."""

    code = "GROUPS_LIMIT_REACHED"


@_register
class GroupSubscriptionTooLargeError(InvalidRequestError):
    """A subscription would make a group's assignment cover more than
    `group_assigned_partitions_max` partitions (or more topics than allowed)."""

    code = "GROUP_SUBSCRIPTION_TOO_LARGE"
    kafka_code = 42


@_register
class GroupRecordError(LograftError):
    """A `__consumer_offsets` record that cannot be decoded, or whose replay would
    break an invariant of the coordinator state (a coordinator bug, never user
    input)."""

    code = "INVALID_GROUP_RECORD"


@_register
class OutOfOrderHeartbeatError(LograftError):
    """A heartbeat whose `sequence` is not above the last one the coordinator
    processed for the member: a delayed duplicate of a request the client has
    since given up on. Processing it would act on partitions the member
    reported owning in the past, so it is refused."""

    code = "OUT_OF_ORDER_HEARTBEAT"


@_register
class StreamsLimitReachedError(LograftError):
    """This node already serves `streams_max` streaming consumes (Server-Sent
    Events); another node, or this one a little later, can take the stream."""

    code = "STREAMS_LIMIT_REACHED"
    retriable = True


@_register
class ConnectionsLimitReachedError(LograftError):
    """A new connection would exceed the node's connection cap (`[http]
    connections_max`, or `connections_per_ip_max` for the caller's address);
    the node answers this and closes before reading a request."""

    code = "CONNECTIONS_LIMIT_REACHED"
    retriable = True


@_register
class RequestBytesInflightLimitReachedError(LograftError):
    """The request bodies this node holds at once already fill
    `[http] request_bytes_inflight_max`, and no room came free within
    `request_bytes_inflight_wait_ms`; the body was not read. Retry later or
    use another node."""

    code = "REQUEST_BYTES_INFLIGHT_LIMIT_REACHED"
    retriable = True


@_register
class RequestBodyTimeoutError(LograftError):
    """A request's body did not arrive whole within `[http]
    body_read_timeout_ms` of the node starting to read it; nothing of it was
    processed."""

    code = "REQUEST_BODY_TIMEOUT"
    retriable = True


@_register
class UnsupportedContentEncodingError(LograftError):
    """A request body with a `Content-Encoding` (gzip, br, ...): the node
    takes bodies only as they are. Compress records inside their batches
    (`compression_type`), as Kafka does."""

    code = "UNSUPPORTED_CONTENT_ENCODING"


@_register
class SaslAuthenticationFailedError(LograftError):
    """The caller did not prove who it is: no credential of a kind the node
    accepts, or one that was refused (a bad or expired token, a wrong
    password, an unmapped client certificate; on an internal endpoint, no or
    a wrong cluster secret). `details.reason` is the stable reason
    (`lograft.security.failures.AuthFailure`: `missing_credentials`,
    `expired`, `bad_credentials`, ...). Kafka's SASL_AUTHENTICATION_FAILED.
    Nodes before issue 12 answered an internal call without the secret with
    CLUSTER_AUTHORIZATION_FAILED (401); that code now means a 403 of
    authorization."""

    code = "SASL_AUTHENTICATION_FAILED"
    kafka_code = 58


# --- authorization (lograft/api/access.py): the caller is known, and may not ---


@_register
class TopicAuthorizationFailedError(LograftError):
    """The caller may not perform the operation on the topic (no ACL allows
    it, or one denies it). Answered before any check of the topic's
    existence, so it says nothing about whether the topic exists."""

    code = "TOPIC_AUTHORIZATION_FAILED"
    kafka_code = 29


@_register
class GroupAuthorizationFailedError(LograftError):
    """The caller may not perform the operation on the consumer group."""

    code = "GROUP_AUTHORIZATION_FAILED"
    kafka_code = 30


@_register
class ClusterAuthorizationFailedError(LograftError):
    """The caller may not perform the operation on the cluster (topic
    creation without a topic ACL, ACL/user/quota administration, ...), or the
    route has no authorization decision (refused: it fails closed)."""

    code = "CLUSTER_AUTHORIZATION_FAILED"
    kafka_code = 31


# --- quotas (lograft/api/quota_gate.py) ---------------------------------------


@_register
class ThrottlingQuotaExceededError(LograftError):
    """The caller is over a client quota (producer_byte_rate,
    consumer_byte_rate) by more than the node delays an answer for
    (`[quotas] throttle_max_ms`): refused, nothing written or read. Retry
    after `details.retry_after_ms` (the answer's Retry-After, in whole
    seconds). Kafka's THROTTLING_QUOTA_EXCEEDED; retriable, as there."""

    code = "THROTTLING_QUOTA_EXCEEDED"
    kafka_code = 89
    retriable = True


@_register
class NotFoundError(LograftError):
    """No such route (HTTP 404 for a path the API does not have)."""

    code = "NOT_FOUND"


@_register
class MethodNotAllowedError(LograftError):
    code = "METHOD_NOT_ALLOWED"

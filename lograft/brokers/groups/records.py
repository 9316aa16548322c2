"""Records of the compacted `__consumer_offsets` topic: the coordinator's only
durable state.

Every change to a group that must survive a coordinator failover is one of the
records below, written to the group's `__consumer_offsets` partition; a new
coordinator rebuilds its state by replaying that partition
(`group_state.CoordinatorState.replay`). A record is a key and a value; a value
of None is a tombstone, so compaction keeps only the latest value per key and
eventually drops deleted keys.

Key bytes (big-endian, Kafka's layout: an int16 key type, which Kafka calls
the key version, then the fields; a string is an int16 byte length + UTF-8):

    type 1  OffsetCommitKey              group, topic, partition(int32)
    type 3  GroupMetadataKey             group
    type 4  GroupPartitionMetadataKey    group
    type 5  MemberMetadataKey            group, member_id
    type 6  TargetAssignmentMetadataKey  group
    type 7  TargetAssignmentMemberKey    group, member_id
    type 8  CurrentMemberAssignmentKey   group, member_id

The key types and key layouts are Kafka's (OffsetCommitKey v1, and KIP-848's
ConsumerGroup*Key records), so equal keys are equal bytes and compaction works
per group, member and partition.

Value bytes start with an int16 value version.

- OffsetCommitValue is Kafka's OffsetCommitValue v3, byte for byte: version
  3, offset int64, leader_epoch int32, metadata string, commit_timestamp
  int64 (wall-clock ms).
- The group values (types 3 to 8) are lograft's own: version 1, then a UTF-8
  JSON object (sorted keys) holding every field of the value, where a set of
  partitions is {topic: [partition, ...]} sorted and a topic list is
  {topic: partition count}. They are not Kafka's binary ConsumerGroup*Value
  schemas.

Keys and values are msgspec Structs (`lograft.typed.Record`). A value whose
JSON form is its fields decodes straight into its Struct; the three holding
partition sets or counts decode into a Struct of their JSON shape
(`_JSON_SHAPES`) and are converted. Bytes written before the Structs
(tests/fixtures/golden) decode to the same values and re-encode to the same
bytes.

Decoding is strict: an unknown key type, an unknown value version, trailing
bytes, a missing or extra JSON field or a field of the wrong type raise
`GroupRecordError`; a decoder never guesses. A change of fields or meaning
needs a new version number, and the upgrade of older values goes in
`_decode_value`.

Invariants checked on construction (so no record breaking them can be built,
encoded or decoded): epochs are non-negative (the previous member epoch may be
-1: none), offsets are non-negative, partitions are non-negative, a member's
assigned partitions and partitions pending revocation are disjoint,
subscriptions and topic lists are sorted and unique.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import msgspec

from lograft import typed
from lograft.errors import GroupRecordError
from lograft.protocol.topic_partition import TopicPartition

Partitions = frozenset[TopicPartition]
NO_PARTITIONS: Partitions = frozenset()

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_VALUE_HEAD = struct.Struct(">hqi")
_STRING_BYTES_MAX = 32_767


class MemberState(enum.StrEnum):
    """Where a member is in reconciling towards its target assignment (KIP-848)."""

    # At its target epoch, holding its whole target.
    STABLE = "stable"
    # Asked to give up partitions; waits until its heartbeat no longer lists them.
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    # At the target epoch, waiting for other members to release partitions of its target.
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class _GroupRecordStruct(typed.Record, kw_only=False, frozen=True, gc=False):
    """Base of keys and values: positional, immutable, hashable; `gc=False`
    because they hold only strings, ints and frozensets, never a cycle."""


# --- keys ----------------------------------------------------------------------------


class OffsetCommitKey(_GroupRecordStruct):
    TYPE: ClassVar[int] = 1

    group_id: str
    topic: str
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class GroupMetadataKey(_GroupRecordStruct):
    TYPE: ClassVar[int] = 3

    group_id: str


class GroupPartitionMetadataKey(_GroupRecordStruct):
    TYPE: ClassVar[int] = 4

    group_id: str


class MemberMetadataKey(_GroupRecordStruct):
    TYPE: ClassVar[int] = 5

    group_id: str
    member_id: str


class TargetAssignmentMetadataKey(_GroupRecordStruct):
    TYPE: ClassVar[int] = 6

    group_id: str


class TargetAssignmentMemberKey(_GroupRecordStruct):
    TYPE: ClassVar[int] = 7

    group_id: str
    member_id: str


class CurrentMemberAssignmentKey(_GroupRecordStruct):
    TYPE: ClassVar[int] = 8

    group_id: str
    member_id: str


GroupKey = (
    OffsetCommitKey
    | GroupMetadataKey
    | GroupPartitionMetadataKey
    | MemberMetadataKey
    | TargetAssignmentMetadataKey
    | TargetAssignmentMemberKey
    | CurrentMemberAssignmentKey
)


# --- values --------------------------------------------------------------------------


def _check_partitions(parts: Partitions, what: str) -> None:
    for tp in parts:
        if not tp.topic or tp.partition < 0:
            raise GroupRecordError(f"{what}: invalid partition {tp}")


class OffsetCommitValue(_GroupRecordStruct):
    VERSION: ClassVar[int] = 3

    offset: int
    # The leader epoch of the committed record, -1 when the client gives none.
    leader_epoch: int
    metadata: str
    # Wall-clock ms: persisted, compared across nodes (offset retention).
    commit_timestamp_ms: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.leader_epoch < -1:
            raise GroupRecordError(f"invalid offset commit {self}")


class GroupMetadataValue(_GroupRecordStruct):
    VERSION: ClassVar[int] = 1

    # Bumped on every change of membership, subscriptions or partition counts.
    epoch: int

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise GroupRecordError(f"negative group epoch {self.epoch}")


class GroupPartitionMetadataValue(_GroupRecordStruct):
    """Partition counts of the subscribed topics the target was computed from
    (existing topics only), sorted by topic name."""

    VERSION: ClassVar[int] = 1

    topics: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        names = [t for t, _ in self.topics]
        if names != sorted(set(names)) or any(n <= 0 for _, n in self.topics):
            raise GroupRecordError("topics must be sorted, unique, with positive counts")

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> GroupPartitionMetadataValue:
        return cls(tuple(sorted(counts.items())))

    def counts(self) -> dict[str, int]:
        return dict(self.topics)


class MemberMetadataValue(_GroupRecordStruct):
    VERSION: ClassVar[int] = 1

    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    # The server-side assignor the member asks for; None: the group's default.
    assignor: str | None
    rebalance_timeout_ms: int

    def __post_init__(self) -> None:
        topics = list(self.subscribed_topics)
        if topics != sorted(set(topics)) or any(not t for t in topics):
            raise GroupRecordError("subscribed topics must be sorted, unique and non-empty")
        if self.rebalance_timeout_ms <= 0:
            raise GroupRecordError("rebalance_timeout_ms must be positive")


class TargetAssignmentMetadataValue(_GroupRecordStruct):
    VERSION: ClassVar[int] = 1

    # The group epoch the target assignment was computed for.
    assignment_epoch: int

    def __post_init__(self) -> None:
        if self.assignment_epoch < 0:
            raise GroupRecordError(f"negative assignment epoch {self.assignment_epoch}")


class TargetAssignmentMemberValue(_GroupRecordStruct):
    VERSION: ClassVar[int] = 1

    partitions: Partitions

    def __post_init__(self) -> None:
        _check_partitions(self.partitions, "target assignment")


class CurrentMemberAssignmentValue(_GroupRecordStruct):
    """A member's place in reconciliation. The member OWNS `assigned` and
    `pending_revocation` as far as the coordinator knows: no other member may be
    given any of them."""

    VERSION: ClassVar[int] = 1

    member_epoch: int
    # The epoch before the last bump: a heartbeat with it is still accepted
    # when its owned partitions are within `assigned` (the response that
    # bumped the epoch may have been lost).
    previous_member_epoch: int
    state: MemberState
    assigned: Partitions
    pending_revocation: Partitions

    def __post_init__(self) -> None:
        if self.member_epoch < 0 or self.previous_member_epoch < -1:
            raise GroupRecordError(f"invalid member epochs {self}")
        if self.previous_member_epoch > self.member_epoch:
            raise GroupRecordError("previous member epoch above the member epoch")
        if not self.assigned.isdisjoint(self.pending_revocation):
            raise GroupRecordError("a partition both assigned and pending revocation")
        if self.pending_revocation and self.state is not MemberState.UNREVOKED_PARTITIONS:
            raise GroupRecordError("partitions pending revocation outside UNREVOKED_PARTITIONS")
        _check_partitions(self.assigned, "assigned")
        _check_partitions(self.pending_revocation, "pending revocation")

    @property
    def owned(self) -> Partitions:
        return self.assigned | self.pending_revocation


GroupValue = (
    OffsetCommitValue
    | GroupMetadataValue
    | GroupPartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
)

_VALUE_FOR_KEY: dict[type[GroupKey], type[GroupValue]] = {
    OffsetCommitKey: OffsetCommitValue,
    GroupMetadataKey: GroupMetadataValue,
    GroupPartitionMetadataKey: GroupPartitionMetadataValue,
    MemberMetadataKey: MemberMetadataValue,
    TargetAssignmentMetadataKey: TargetAssignmentMetadataValue,
    TargetAssignmentMemberKey: TargetAssignmentMemberValue,
    CurrentMemberAssignmentKey: CurrentMemberAssignmentValue,
}
_KEY_BY_TYPE: dict[int, type] = {k.TYPE: k for k in _VALUE_FOR_KEY}


class GroupRecord(typed.Record, kw_only=False, frozen=True, gc=False):
    """One `__consumer_offsets` record; `value` None is a tombstone."""

    key: GroupKey
    value: GroupValue | None

    def __post_init__(self) -> None:
        expected = _VALUE_FOR_KEY.get(type(self.key))
        if expected is None:
            raise GroupRecordError(f"not a group record key: {self.key!r}")
        if self.value is not None and type(self.value) is not expected:
            raise GroupRecordError(
                f"{type(self.key).__name__} takes {expected.__name__}, "
                f"not {type(self.value).__name__}"
            )

    @classmethod
    def tombstone(cls, key: GroupKey) -> GroupRecord:
        return cls(key, None)


# --- encoding ------------------------------------------------------------------------


def _put_string(out: bytearray, s: str) -> None:
    data = s.encode("utf-8")
    if len(data) > _STRING_BYTES_MAX:
        raise GroupRecordError(f"string of {len(data)} bytes does not fit an int16 length")
    out += _I16.pack(len(data))
    out += data


def encode_key(key: GroupKey) -> bytes:
    out = bytearray(_I16.pack(key.TYPE))
    _put_string(out, key.group_id)
    if isinstance(key, OffsetCommitKey):
        _put_string(out, key.topic)
        out += _I32.pack(key.partition)
    elif isinstance(
        key, MemberMetadataKey | TargetAssignmentMemberKey | CurrentMemberAssignmentKey
    ):
        _put_string(out, key.member_id)
    return bytes(out)


def _partitions_json(parts: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for tp in parts:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(ps) for t, ps in by_topic.items()}


# The values whose JSON object is not their fields: the object's shape as a
# Struct, and the conversions both ways. The other values are their own shape.
class _TopicCountsJson(typed.Record, frozen=True):
    topics: dict[str, int]


class _TargetMemberJson(typed.Record, frozen=True):
    partitions: dict[str, list[int]]


class _CurrentAssignmentJson(typed.Record, frozen=True):
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: dict[str, list[int]]
    pending_revocation: dict[str, list[int]]


def _partitions_from(shape: dict[str, list[int]], what: str) -> Partitions:
    out = frozenset(TopicPartition(t, p) for t, ps in shape.items() for p in ps)
    if len(out) != sum(len(ps) for ps in shape.values()):
        raise GroupRecordError(f"{what}: a partition is listed twice")
    return out


def _topic_counts_to(value: GroupPartitionMetadataValue) -> _TopicCountsJson:
    return _TopicCountsJson(topics=dict(value.topics))


def _topic_counts_from(shape: _TopicCountsJson) -> GroupPartitionMetadataValue:
    return GroupPartitionMetadataValue(tuple(sorted(shape.topics.items())))


def _target_member_to(value: TargetAssignmentMemberValue) -> _TargetMemberJson:
    return _TargetMemberJson(partitions=_partitions_json(value.partitions))


def _target_member_from(shape: _TargetMemberJson) -> TargetAssignmentMemberValue:
    return TargetAssignmentMemberValue(
        _partitions_from(shape.partitions, "TargetAssignmentMemberValue")
    )


def _current_to(value: CurrentMemberAssignmentValue) -> _CurrentAssignmentJson:
    return _CurrentAssignmentJson(
        member_epoch=value.member_epoch,
        previous_member_epoch=value.previous_member_epoch,
        state=value.state,
        assigned=_partitions_json(value.assigned),
        pending_revocation=_partitions_json(value.pending_revocation),
    )


def _current_from(shape: _CurrentAssignmentJson) -> CurrentMemberAssignmentValue:
    what = "CurrentMemberAssignmentValue"
    return CurrentMemberAssignmentValue(
        shape.member_epoch,
        shape.previous_member_epoch,
        shape.state,
        _partitions_from(shape.assigned, what),
        _partitions_from(shape.pending_revocation, what),
    )


_JSON_SHAPES: dict[type, tuple[type, Callable[[Any], Any], Callable[[Any], GroupValue]]] = {
    GroupPartitionMetadataValue: (_TopicCountsJson, _topic_counts_to, _topic_counts_from),
    TargetAssignmentMemberValue: (_TargetMemberJson, _target_member_to, _target_member_from),
    CurrentMemberAssignmentValue: (_CurrentAssignmentJson, _current_to, _current_from),
}
# Sorted keys at every level: equal values are equal bytes.
_JSON_ENCODER = msgspec.json.Encoder(order="sorted")
_JSON_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {
    cls: msgspec.json.Decoder(_JSON_SHAPES[cls][0] if cls in _JSON_SHAPES else cls)
    for cls in _VALUE_FOR_KEY.values()
    if cls is not OffsetCommitValue
}


def encode_value(value: GroupValue) -> bytes:
    if isinstance(value, OffsetCommitValue):
        out = bytearray(_OFFSET_VALUE_HEAD.pack(value.VERSION, value.offset, value.leader_epoch))
        _put_string(out, value.metadata)
        out += _I64.pack(value.commit_timestamp_ms)
        return bytes(out)
    shape = _JSON_SHAPES.get(type(value))
    body = _JSON_ENCODER.encode(value if shape is None else shape[1](value))
    return _I16.pack(value.VERSION) + body


def encode_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone)."""
    value = None if record.value is None else encode_value(record.value)
    return encode_key(record.key), value


# --- decoding ------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise GroupRecordError("record truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise GroupRecordError("null string where a string is required")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise GroupRecordError(f"string is not UTF-8: {e}") from None

    def rest(self) -> bytes:
        chunk = self.data[self.pos :]
        self.pos = len(self.data)
        return chunk

    def done(self) -> None:
        if self.pos != len(self.data):
            raise GroupRecordError(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> GroupKey:
    r = _Reader(data)
    key_type = r.i16()
    cls = _KEY_BY_TYPE.get(key_type)
    if cls is None:
        raise GroupRecordError(f"unknown __consumer_offsets key type {key_type}")
    group_id = r.string()
    key: GroupKey
    if cls is OffsetCommitKey:
        topic = r.string()
        key = OffsetCommitKey(group_id, topic, r.i32())
    elif cls in (MemberMetadataKey, TargetAssignmentMemberKey, CurrentMemberAssignmentKey):
        key = cls(group_id, r.string())
    else:
        key = cls(group_id)
    r.done()
    return key


def _decode_value(cls: type[GroupValue], data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if version != cls.VERSION:
        raise GroupRecordError(f"{cls.__name__} version {version} is not supported")
    if cls is OffsetCommitValue:
        offset, leader_epoch = r.i64(), r.i32()
        metadata = r.string()
        value = OffsetCommitValue(offset, leader_epoch, metadata, r.i64())
        r.done()
        return value
    try:
        decoded = _JSON_DECODERS[cls].decode(r.rest())
    except msgspec.ValidationError as e:
        raise GroupRecordError(f"{cls.__name__}: {e}") from None
    except msgspec.DecodeError as e:
        raise GroupRecordError(f"{cls.__name__}: bad JSON: {e}") from None
    shape = _JSON_SHAPES.get(cls)
    return decoded if shape is None else shape[2](decoded)


def decode_record(key: bytes, value: bytes | None) -> GroupRecord:
    """The record a `__consumer_offsets` (key, value) pair holds."""
    decoded_key = decode_key(key)
    if value is None:
        return GroupRecord(decoded_key, None)
    return GroupRecord(decoded_key, _decode_value(_VALUE_FOR_KEY[type(decoded_key)], value))

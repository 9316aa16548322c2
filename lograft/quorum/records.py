"""Metadata records: the only things the metadata log holds.

Every change to cluster metadata is one of the frozen dataclasses below, and a
controller decision is an atomic *batch* of them: the Raft adapter replicates
the bytes of `encode_batch(records)` as one log entry, and every node replays
the decoded records, in order, into its `MetadataImage`.

Encoded form (UTF-8 JSON via orjson; never pickle, so a node can only ever
apply data, never code):

    record: {"type": "<TypeName>", "version": <int>, "<field>": <value>, ...}
    batch:  {"batch_version": 1, "records": [<record>, ...]}

Field values are JSON scalars, lists of ints (replica lists, in order) or, for
broker endpoints, an object {listener name: "host:port" or URL}. Every field is
present in every record (None becomes null): a record is self-describing, and
a missing or extra field is a decode error, not a silent default.

Versioning: each type carries its own `VERSION`. A change of fields or meaning
means a new version number; a decoder that meets a version it does not know
fails with `UnsupportedMetadataRecordVersionError` instead of guessing. When a
version 2 appears, put the upgrade of older dicts next to `_decode_record`.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from lograft.errors import (
    MetadataRecordError,
    UnknownMetadataRecordTypeError,
    UnsupportedMetadataRecordVersionError,
)

BATCH_VERSION = 1

# (listener name, address) pairs sorted by name: a mapping that is hashable,
# immutable and has one canonical form, so equal registrations compare equal.
Endpoints = tuple[tuple[str, str], ...]


def endpoints_from(mapping: Mapping[str, str]) -> Endpoints:
    """Canonical `Endpoints` from a {listener name: address} mapping."""
    return tuple(sorted(mapping.items()))


class BrokerAction(enum.StrEnum):
    """What a `BrokerRegistrationChange` does to a registered broker."""

    FENCE = "fence"
    UNFENCE = "unfence"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


class ConfigResourceType(enum.StrEnum):
    TOPIC = "topic"
    # Cluster-wide defaults; their resource name is "" (as Kafka's default broker).
    CLUSTER = "cluster"


# --- brokers ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker incarnation registers (or replaces its previous incarnation).

    `fenced` is True for every registration the controller makes: a new
    incarnation must first catch up with the metadata log. Snapshots write the
    current fenced state.
    """

    TYPE: ClassVar[str] = "RegisterBroker"
    VERSION: ClassVar[int] = 1

    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: Endpoints
    rack: str | None
    fenced: bool = True

    def __post_init__(self) -> None:
        names = [name for name, _ in self.endpoints]
        if names != sorted(set(names)):
            raise ValueError("endpoints must be unique and sorted by name; use endpoints_from()")


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChange:
    TYPE: ClassVar[str] = "BrokerRegistrationChange"
    VERSION: ClassVar[int] = 1

    broker_id: int
    # The epoch this change was decided for: replay refuses a change aimed at
    # an older incarnation of the same broker id.
    broker_epoch: int
    action: BrokerAction


@dataclass(frozen=True, slots=True)
class UnregisterBroker:
    TYPE: ClassVar[str] = "UnregisterBroker"
    VERSION: ClassVar[int] = 1

    broker_id: int
    broker_epoch: int


# --- topics and partitions ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Topic:
    TYPE: ClassVar[str] = "Topic"
    VERSION: ClassVar[int] = 1

    name: str
    topic_id: str  # a UUID in its canonical hyphenated text form


@dataclass(frozen=True, slots=True)
class Partition:
    """The full state of one partition: written at creation and in snapshots."""

    TYPE: ClassVar[str] = "Partition"
    VERSION: ClassVar[int] = 1

    topic_id: str
    partition: int
    replicas: tuple[int, ...]  # preferred order: replicas[0] is the preferred leader
    isr: tuple[int, ...]
    leader: int  # -1: offline
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A delta on one partition; None means "unchanged".

    Epochs are not fields: replay derives them (leader epoch +1 when the leader
    changes, partition epoch +1 on every change), so a record can never carry
    an epoch that disagrees with the state it is applied to.
    """

    TYPE: ClassVar[str] = "PartitionChange"
    VERSION: ClassVar[int] = 1

    topic_id: str
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopic:
    TYPE: ClassVar[str] = "RemoveTopic"
    VERSION: ClassVar[int] = 1

    topic_id: str


# --- configs and producer ids --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """Set (value is a string) or delete (value is None) one config key."""

    TYPE: ClassVar[str] = "Config"
    VERSION: ClassVar[int] = 1

    resource_type: ConfigResourceType
    resource_name: str  # the topic name, or "" for the cluster
    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class ProducerIds:
    """A block of producer ids was handed to a broker.

    As Kafka's ProducerIdsRecord, `next_producer_id` is the first id *after* the
    block just allocated: the next block starts there. Snapshots write it with
    broker_id = broker_epoch = -1 (no broker owns the snapshot).
    """

    TYPE: ClassVar[str] = "ProducerIds"
    VERSION: ClassVar[int] = 1

    broker_id: int
    broker_epoch: int
    next_producer_id: int


# --- ACLs --------------------------------------------------------------------------
# Reserved for later: access-control entries will be records here (names below),
# replayed into an `acls` part of the image. Until then, meeting one is an error
# rather than a silently ignored record.
RESERVED_RECORD_TYPES = frozenset({"AccessControlEntry", "RemoveAccessControlEntry"})


Record = (
    RegisterBroker
    | BrokerRegistrationChange
    | UnregisterBroker
    | Topic
    | Partition
    | PartitionChange
    | RemoveTopic
    | Config
    | ProducerIds
)

RECORD_CLASSES: tuple[type[Record], ...] = typing.get_args(Record)


# --- codec -------------------------------------------------------------------------

Convert = Callable[[Any, str], Any]


def _fail(where: str, expected: str, value: Any) -> typing.NoReturn:
    raise MetadataRecordError(
        f"{where}: expected {expected}, got {type(value).__name__}", field=where
    )


def _int(value: Any, where: str) -> int:
    # bool is a subclass of int; a JSON true must never pass for a broker id.
    if type(value) is not int:
        _fail(where, "int", value)
    return value


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        _fail(where, "bool", value)
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is not str:
        _fail(where, "str", value)
    return value


def _int_tuple_decode(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        _fail(where, "list of int", value)
    return tuple(_int(item, where) for item in value)


def _int_tuple_encode(value: Any, where: str) -> list[int]:
    # A list would encode fine but decode as a tuple, and the round trip would
    # not give back an equal record: insist on the declared type.
    if not isinstance(value, tuple):
        _fail(where, "tuple of int", value)
    return [_int(item, where) for item in value]


def _endpoints_decode(value: Any, where: str) -> Endpoints:
    if not isinstance(value, dict):
        _fail(where, "object", value)
    return tuple(sorted((_str(k, where), _str(v, where)) for k, v in value.items()))


def _endpoints_encode(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, tuple):
        _fail(where, "endpoints tuple", value)
    return {_str(k, where): _str(v, where) for k, v in value}


def _enum_codecs(enum_type: type[enum.StrEnum]) -> tuple[Convert, Convert]:
    def decode(value: Any, where: str) -> enum.StrEnum:
        try:
            return enum_type(_str(value, where))
        except ValueError:
            raise MetadataRecordError(f"{where}: unknown value {value!r}", field=where) from None

    def encode(value: Any, where: str) -> str:
        if not isinstance(value, enum_type):
            _fail(where, enum_type.__name__, value)
        return value.value

    return encode, decode


def _optional(codecs: tuple[Convert, Convert]) -> tuple[Convert, Convert]:
    encode, decode = codecs
    return (
        lambda v, where: None if v is None else encode(v, where),
        lambda v, where: None if v is None else decode(v, where),
    )


def _codecs_for(annotation: Any) -> tuple[Convert, Convert]:
    """(encode, decode) for one field annotation; both check the type."""
    args = typing.get_args(annotation)
    if type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return _optional(_codecs_for(inner))
    simple: dict[Any, Convert] = {int: _int, bool: _bool, str: _str}
    if annotation in simple:
        return simple[annotation], simple[annotation]
    if annotation == tuple[int, ...]:
        return _int_tuple_encode, _int_tuple_decode
    if annotation == Endpoints:
        return _endpoints_encode, _endpoints_decode
    if isinstance(annotation, type) and issubclass(annotation, enum.StrEnum):
        return _enum_codecs(annotation)
    raise TypeError(f"no codec for field type {annotation!r}")


@dataclass(frozen=True, slots=True)
class _FieldCodec:
    name: str
    encode: Convert
    decode: Convert


def _field_codecs(cls: type) -> tuple[_FieldCodec, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(_FieldCodec(f.name, *_codecs_for(hints[f.name])) for f in dataclasses.fields(cls))


# Built once at import: a field type without a codec fails here, not at runtime.
_CODECS: dict[str, tuple[type[Record], tuple[_FieldCodec, ...]]] = {
    cls.TYPE: (cls, _field_codecs(cls)) for cls in RECORD_CLASSES
}


def record_to_dict(record: Record) -> dict[str, Any]:
    entry = _CODECS.get(getattr(record, "TYPE", ""))
    if entry is None or type(record) is not entry[0]:
        raise TypeError(f"not a metadata record: {record!r}")
    out: dict[str, Any] = {"type": record.TYPE, "version": record.VERSION}
    for codec in entry[1]:
        where = f"{record.TYPE}.{codec.name}"
        out[codec.name] = codec.encode(getattr(record, codec.name), where)
    return out


def record_from_dict(data: Any) -> Record:
    if not isinstance(data, dict):
        _fail("record", "object", data)
    type_name = data.get("type")
    if type_name in RESERVED_RECORD_TYPES:
        raise UnknownMetadataRecordTypeError(
            f"record type {type_name!r} is reserved and not implemented yet", type=type_name
        )
    entry = _CODECS.get(type_name) if isinstance(type_name, str) else None
    if entry is None:
        raise UnknownMetadataRecordTypeError(f"unknown record type {type_name!r}", type=type_name)
    cls, codecs = entry
    version = data.get("version")
    if type(version) is not int or version != cls.VERSION:
        raise UnsupportedMetadataRecordVersionError(
            f"{cls.TYPE} version {version!r} is not supported (this node knows {cls.VERSION})",
            type=cls.TYPE,
            version=version,
        )
    expected = {"type", "version", *(c.name for c in codecs)}
    if set(data) != expected:
        raise MetadataRecordError(
            f"{cls.TYPE} v{version}: fields {sorted(set(data) ^ expected)} are missing or unknown",
            type=cls.TYPE,
        )
    values = {c.name: c.decode(data[c.name], f"{cls.TYPE}.{c.name}") for c in codecs}
    try:
        return cls(**values)
    except ValueError as exc:
        raise MetadataRecordError(f"{cls.TYPE}: {exc}", type=cls.TYPE) from exc


def encode_batch(records: Iterable[Record]) -> bytes:
    """The bytes of one atomic batch, as the Raft adapter replicates them."""
    body = {"batch_version": BATCH_VERSION, "records": [record_to_dict(r) for r in records]}
    return orjson.dumps(body)


def decode_batch(data: bytes) -> list[Record]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MetadataRecordError(f"metadata batch is not valid JSON: {exc}") from exc
    if not isinstance(body, dict) or set(body) != {"batch_version", "records"}:
        raise MetadataRecordError("metadata batch must be {batch_version, records}")
    batch_version = body["batch_version"]
    if type(batch_version) is not int or batch_version != BATCH_VERSION:
        raise UnsupportedMetadataRecordVersionError(
            f"batch version {batch_version!r} is not supported", version=batch_version
        )
    if not isinstance(body["records"], list):
        _fail("records", "list", body["records"])
    return [record_from_dict(item) for item in body["records"]]

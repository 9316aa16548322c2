"""Metadata records: the only things the metadata log holds.

Every change to cluster metadata is one of the records below, and a
controller decision is an atomic *batch* of them: the Raft adapter replicates
the bytes of `encode_batch(records)` as one log entry, and every node replays
the decoded records, in order, into its `MetadataImage`.

The records are msgspec Structs (`lograft.typed.Record`: frozen, unknown fields
refused) forming one tagged union on their `type` field, so a batch decodes in
one typed pass with no per-field Python code. Encoded form (UTF-8 JSON; never
pickle, so a node can only ever apply data, never code):

    record: {"type": "<TypeName>", "<field>": <value>, ..., "version": <int>}
    batch:  {"batch_version": 1, "records": [<record>, ...]}

Field values are JSON scalars, lists of ints (replica lists, in order), for
broker endpoints an object {listener name: "host:port" or URL}, bytes as
base64 text (SCRAM salts and keys), and a quota entity as a list of
{"entity_type", "entity_name"} objects. The encoder
writes every field (None becomes null), so a record is self-describing.
Decoding refuses unknown fields, missing required fields and values of the
wrong type (a JSON true is not an int, 1.0 is not an int). A field with a
default (`PartitionChange`'s deltas, `RegisterBroker.fenced`) that is absent
takes its default: no encoder has ever left one out.

The codec before msgspec wrote "version" second instead of last; JSON objects
are unordered and both codecs read both orders (tests/fixtures/golden holds
bytes it wrote, and the tests decode them).

Versioning: each type carries its own `VERSION` and a `version` field typed
`Literal[VERSION]`. A change of fields or meaning means a new version number;
a decoder that meets a version it does not know fails with
`UnsupportedMetadataRecordVersionError` instead of guessing. When a version 2
appears, widen that type's `version` Literal and put the upgrade of older
records in `_upgraded`.

Version 2 of `Partition` and `PartitionChange` (eligible leader replicas,
docs/quorum.md "Eligible leader replicas") added `elr` and
`last_known_leader`, both defaulted: a version 1 record decodes with no ELR
and no last known leader (what it meant) and is upgraded to version 2 as it
is decoded, so every node holds and re-encodes only version 2. A node that
knows only version 1 refuses a version 2 batch (unsupported version) rather
than dropping the fields.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Literal

import msgspec

from lograft import typed
from lograft.errors import (
    MetadataRecordError,
    UnknownMetadataRecordTypeError,
    UnsupportedMetadataRecordVersionError,
)
from lograft.security.acls import AclOperation, AclPermission, PatternType, ResourceType
from lograft.security.passwords import ScramMechanism
from lograft.security.quotas import QuotaKey

BATCH_VERSION = 1


class Endpoints(Mapping[str, str]):
    """A broker's {listener name: address}: immutable, hashable, and held sorted
    by name (its one canonical form), so equal registrations compare equal and
    encode to equal bytes."""

    __slots__ = ("_map",)

    def __init__(self, mapping: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        items = dict(mapping)
        for name, address in items.items():
            if type(name) is not str or type(address) is not str:
                raise TypeError(f"endpoint {name!r}: names and addresses must be strings")
        self._map: dict[str, str] = dict(sorted(items.items()))

    def __getitem__(self, name: str) -> str:
        return self._map[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Endpoints):
            return self._map == other._map
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._map.items()))

    def __repr__(self) -> str:
        return f"Endpoints({self._map!r})"


def endpoints_from(mapping: Mapping[str, str]) -> Endpoints:
    """Canonical `Endpoints` from a {listener name: address} mapping."""
    return Endpoints(mapping)


class BrokerAction(enum.StrEnum):
    """What a `BrokerRegistrationChange` does to a registered broker."""

    FENCE = "fence"
    UNFENCE = "unfence"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


class ConfigResourceType(enum.StrEnum):
    TOPIC = "topic"
    # Cluster-wide defaults; their resource name is "" (as Kafka's default broker).
    CLUSTER = "cluster"


class MetadataRecord(typed.Record, tag_field="type", tag=True, kw_only=True, frozen=True, gc=False):
    """Base of the records: the tag is the class name (`TYPE`).

    `version` is keyword-only, so it is encoded last and every record's own
    fields stay positional. `gc=False`: records hold only scalars, bytes, tuples,
    `Endpoints` and `QuotaEntityPart`s, never a cycle, and a snapshot decodes 100k of them.
    """

    TYPE: ClassVar[str]
    VERSION: ClassVar[int] = 1

    version: Literal[1] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.TYPE = cls.__name__


# --- brokers ---------------------------------------------------------------------


class RegisterBroker(MetadataRecord):
    """A broker incarnation registers (or replaces its previous incarnation).

    `fenced` is True for every registration the controller makes: a new
    incarnation must first catch up with the metadata log. Snapshots write the
    current fenced state.
    """

    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: Endpoints
    rack: str | None
    fenced: bool = True

    def __post_init__(self) -> None:
        # msgspec does not check types on construction; a tuple of pairs here
        # would encode as a JSON array that no decoder reads.
        if type(self.endpoints) is not Endpoints:
            raise TypeError("endpoints must be Endpoints; use endpoints_from()")


class BrokerRegistrationChange(MetadataRecord):
    broker_id: int
    # The epoch this change was decided for: replay refuses a change aimed at
    # an older incarnation of the same broker id.
    broker_epoch: int
    action: BrokerAction


class UnregisterBroker(MetadataRecord):
    broker_id: int
    broker_epoch: int


# --- topics and partitions ---------------------------------------------------------


class Topic(MetadataRecord):
    name: str
    topic_id: str  # a UUID in its canonical hyphenated text form


class _PartitionFields(MetadataRecord):
    topic_id: str
    partition: int
    replicas: tuple[int, ...]  # preferred order: replicas[0] is the preferred leader
    isr: tuple[int, ...]  # empty only while the partition is offline
    leader: int  # -1: offline
    leader_epoch: int
    partition_epoch: int
    # Version 2 (KIP-966): replicas outside the ISR that hold every committed
    # record (eligible leader replicas), and the last leader of a partition
    # that went offline (-1: none). Version 1 records had neither.
    elr: tuple[int, ...] = ()
    last_known_leader: int = -1


class Partition(_PartitionFields, kw_only=True):
    """The full state of one partition: written at creation and in snapshots."""

    VERSION: ClassVar[int] = 2
    version: Literal[1, 2] = 2  # type: ignore[assignment]  # widened: version 1 is read


class _PartitionChangeFields(MetadataRecord):
    topic_id: str
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    elr: tuple[int, ...] | None = None  # version 2
    last_known_leader: int | None = None  # version 2


class PartitionChange(_PartitionChangeFields, kw_only=True):
    """A delta on one partition; None means "unchanged".

    Epochs are not fields: replay derives them (leader epoch +1 when the leader
    changes, partition epoch +1 on every change), so a record can never carry
    an epoch that disagrees with the state it is applied to. A change of the
    ELR or of the last known leader alone moves only the partition epoch.
    """

    VERSION: ClassVar[int] = 2
    version: Literal[1, 2] = 2  # type: ignore[assignment]  # widened: version 1 is read


class RemoveTopic(MetadataRecord):
    topic_id: str


# --- configs and producer ids --------------------------------------------------------


class Config(MetadataRecord):
    """Set (value is a string) or delete (value is None) one config key."""

    resource_type: ConfigResourceType
    resource_name: str  # the topic name, or "" for the cluster
    key: str
    value: str | None


class ProducerIds(MetadataRecord):
    """A block of producer ids was handed to a broker.

    As Kafka's ProducerIdsRecord, `next_producer_id` is the first id *after* the
    block just allocated: the next block starts there. Snapshots write it with
    broker_id = broker_epoch = -1 (no broker owns the snapshot).
    """

    broker_id: int
    broker_epoch: int
    next_producer_id: int


# --- security: ACLs, SCRAM credentials, client quotas -----------------------------------
# Kafka's AccessControlEntryRecord, UserScramCredentialRecord and ClientQuotaRecord
# (and their removals), replayed into image.acls, image.scram_credentials and
# image.client_quotas. Values are checked on replay by the lograft.security
# types they become (AclBinding, ScramCredential, QuotaSetting): a record that
# does not make one is a controller bug and refused on every node alike.


class AccessControlEntry(MetadataRecord):
    """One ACL binding added (Kafka's AccessControlEntryRecord).

    Unlike Kafka's record there is no `id`: a binding is its own identity (the
    image holds a set, and the controller refuses a duplicate), so a removal
    names the binding's fields and replay needs no id index."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission


class RemoveAccessControlEntry(MetadataRecord):
    """One ACL binding removed (Kafka's RemoveAccessControlEntryRecord), named
    by all its fields."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission


class UserScramCredential(MetadataRecord):
    """A user's credential for one mechanism, set or replaced (Kafka's
    UserScramCredentialRecord). Bytes travel as base64 text in the JSON; the
    password itself is never in any record."""

    name: str
    mechanism: ScramMechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:
        # The keys are as good as a password hash to crack: never in logs.
        return (
            f"UserScramCredential(name={self.name!r}, mechanism={self.mechanism.value}, "
            f"iterations={self.iterations})"
        )


class RemoveUserScramCredential(MetadataRecord):
    """A user's credential for one mechanism removed (Kafka's
    RemoveUserScramCredentialRecord)."""

    name: str
    mechanism: ScramMechanism


class QuotaEntityType(enum.StrEnum):
    USER = "user"
    CLIENT_ID = "client_id"


class QuotaEntityPart(typed.Record, frozen=True, gc=False):
    """One part of a quota entity (Kafka's ClientQuotaRecord.EntityData):
    its type and its name, None for the default entity of that type."""

    entity_type: QuotaEntityType
    entity_name: str | None


class ClientQuota(MetadataRecord):
    """One quota of one entity set or removed (Kafka's ClientQuotaRecord).

    `entity` lists the parts in the order user, client_id (at least one, each
    type once). With `remove` true the key is removed and `value` is 0.0."""

    entity: tuple[QuotaEntityPart, ...]
    key: QuotaKey
    value: float
    remove: bool = False


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
    | AccessControlEntry
    | RemoveAccessControlEntry
    | UserScramCredential
    | RemoveUserScramCredential
    | ClientQuota
)

RECORD_CLASSES: tuple[type[Record], ...] = typing.get_args(Record)


# --- codec -------------------------------------------------------------------------

_BY_TYPE: dict[str, type[Record]] = {cls.TYPE: cls for cls in RECORD_CLASSES}


class _Batch(typed.Record, frozen=True, gc=False):
    batch_version: Literal[1]
    records: list[Record]


def _enc_hook(value: Any) -> Any:
    if isinstance(value, Endpoints):
        return value._map
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def _dec_hook(into: type, value: Any) -> Any:
    if into is Endpoints:
        if not isinstance(value, dict):
            raise TypeError(f"Expected `object`, got `{type(value).__name__}`")
        return Endpoints(value)
    raise NotImplementedError(f"cannot decode {into!r}")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.json.Decoder(_Batch, dec_hook=_dec_hook)


def record_to_dict(record: Record) -> dict[str, Any]:
    """The JSON object of one record, as builtins."""
    if type(record) not in _BY_TYPE.values():
        raise TypeError(f"not a metadata record: {record!r}")
    return msgspec.to_builtins(record, enc_hook=_enc_hook)  # type: ignore[no-any-return]


def record_from_dict(data: Any) -> Record:
    """One record from its JSON object (builtins), checked as `decode_batch` does."""
    if not isinstance(data, dict):
        raise MetadataRecordError(
            f"record: expected object, got {type(data).__name__}", field="record"
        )
    type_name = data.get("type")
    cls = _BY_TYPE.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise UnknownMetadataRecordTypeError(f"unknown record type {type_name!r}", type=type_name)
    version = data.get("version")
    if type(version) is not int or not 1 <= version <= cls.VERSION:
        raise UnsupportedMetadataRecordVersionError(
            f"{cls.TYPE} version {version!r} is not supported (this node knows {cls.VERSION})",
            type=cls.TYPE,
            version=version,
        )
    try:
        return _upgraded(msgspec.convert(data, cls, dec_hook=_dec_hook))
    except msgspec.ValidationError as exc:
        path = typed.field_path(exc)
        reason = str(exc).split(" - at `$", 1)[0]
        where = f"{cls.TYPE}.{path}" if path else cls.TYPE
        raise MetadataRecordError(
            f"{where} v{version}: {reason}", type=cls.TYPE, field=path
        ) from None


def encode_batch(records: Iterable[Record]) -> bytes:
    """The bytes of one atomic batch, as the Raft adapter replicates them.

    The batch is decoded again before it is returned: msgspec does not check
    field types on construction, and a batch that no node can decode (a list
    where a tuple belongs, a str where an int does) must fail here, on the
    controller, not halt every node that replays it.
    """
    batch = _Batch(batch_version=1, records=list(records))
    for record in batch.records:
        if type(record) not in _BY_TYPE.values():
            raise TypeError(f"not a metadata record: {record!r}")
    data = _ENCODER.encode(batch)
    if decode_batch(data) != batch.records:
        raise MetadataRecordError(_first_difference(batch.records, decode_batch(data)))
    return data


def _first_difference(records: list[Record], decoded: list[Record]) -> str:
    for record, back in zip(records, decoded, strict=True):
        for name in record.__struct_fields__:
            if getattr(record, name) != getattr(back, name):
                value = getattr(record, name)
                return (
                    f"{record.TYPE}.{name}: {value!r} ({type(value).__name__}) does not round-trip"
                )
    return "batch does not round-trip"  # pragma: no cover - some field differs


def decode_batch(data: bytes) -> list[Record]:
    try:
        records = _DECODER.decode(data).records
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _decode_error(data, exc) from None
    return [_upgraded(r) for r in records]


def _upgraded(record: Record) -> Record:
    """`record` as its type's current version. Version 1 `Partition` and
    `PartitionChange` records have no ELR fields: their defaults (none) are
    what they meant, so only the version number changes."""
    if record.version == record.VERSION:
        return record
    return msgspec.structs.replace(record, version=record.VERSION)


def _decode_error(data: bytes, exc: Exception) -> MetadataRecordError:
    """The error a batch that failed the typed decode deserves: its checks in
    the order the batch is read, so an unknown type or version is named as such
    rather than as a field mismatch. Only bad batches come here."""
    try:
        body = msgspec.json.decode(data)
    except msgspec.DecodeError as bad:
        return MetadataRecordError(f"metadata batch is not valid JSON: {bad}")
    if not isinstance(body, dict) or set(body) != {"batch_version", "records"}:
        return MetadataRecordError("metadata batch must be {batch_version, records}")
    batch_version = body["batch_version"]
    if type(batch_version) is not int or batch_version != BATCH_VERSION:
        return UnsupportedMetadataRecordVersionError(
            f"batch version {batch_version!r} is not supported", version=batch_version
        )
    items = body["records"]
    if not isinstance(items, list):
        return MetadataRecordError(
            f"records: expected list, got {type(items).__name__}", field="records"
        )
    for item in items:
        try:
            record_from_dict(item)
        except MetadataRecordError as error:
            return error
    return MetadataRecordError(f"metadata batch does not decode: {exc}")  # pragma: no cover

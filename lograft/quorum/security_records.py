"""Security metadata records <-> the lograft.security values they stand for.

The records (lograft/quorum/records.py) are flat, versioned wire shapes; the
image holds the checked values (`AclBinding`, `ScramCredential`,
`QuotaEntity` with its quotas). Going from a record to a value runs every
check the value's type has (lengths, canonical host, supported operations,
key sizes, quota bounds): a record that fails one is a controller bug, and
replay refuses it with `MetadataRecordError` on every node alike.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from lograft import typed
from lograft.errors import MetadataRecordError
from lograft.quorum.records import (
    AccessControlEntry,
    ClientQuota,
    QuotaEntityPart,
    QuotaEntityType,
    RemoveAccessControlEntry,
    UserScramCredential,
)
from lograft.security.acls import AclBinding
from lograft.security.passwords import ScramCredential
from lograft.security.quotas import QuotaEntity, QuotaKey, QuotaSetting

_ACL_FIELDS = (
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission",
)


def acl_of(record: AccessControlEntry | RemoveAccessControlEntry) -> AclBinding:
    """The binding a record names, checked as a request's binding is."""
    fields = {name: getattr(record, name) for name in _ACL_FIELDS}
    return typed.build(
        fields, AclBinding, error=MetadataRecordError, where=record.TYPE, detail="field"
    )


def acl_record(acl: AclBinding) -> AccessControlEntry:
    return AccessControlEntry(**{name: getattr(acl, name) for name in _ACL_FIELDS})


def remove_acl_record(acl: AclBinding) -> RemoveAccessControlEntry:
    return RemoveAccessControlEntry(**{name: getattr(acl, name) for name in _ACL_FIELDS})


def acl_sort_key(acl: AclBinding) -> tuple[str, ...]:
    """A total order on bindings (snapshots and listings are deterministic)."""
    return tuple(str(getattr(acl, name)) for name in _ACL_FIELDS)


def credential_of(record: UserScramCredential) -> ScramCredential:
    """The credential a record holds, checked; a refusal names the field, never its value."""
    fields: dict[str, Any] = {
        "name": record.name,
        "mechanism": record.mechanism,
        "salt": record.salt,
        "iterations": record.iterations,
        "stored_key": record.stored_key,
        "server_key": record.server_key,
    }
    try:
        return typed.build(
            fields, ScramCredential, error=MetadataRecordError, where=record.TYPE, detail="field"
        )
    except MetadataRecordError as exc:
        field = str(exc.details.get("field", ""))
        if not field.endswith(_SECRET_FIELDS):
            raise
        # The message would show the bad value: a salt or key stays out of logs.
        raise MetadataRecordError(
            f"{field}: not a valid {field.rsplit('.', 1)[-1]} for user {record.name!r}",
            type=record.TYPE,
            field=field,
        ) from None


_SECRET_FIELDS = ("salt", "stored_key", "server_key")


def credential_record(credential: ScramCredential) -> UserScramCredential:
    return UserScramCredential(
        name=credential.name,
        mechanism=credential.mechanism,
        salt=credential.salt,
        iterations=credential.iterations,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
    )


def entity_parts(entity: QuotaEntity) -> tuple[QuotaEntityPart, ...]:
    """The record form of an entity: its parts, user first."""
    parts = []
    if entity.user is not UNSET:
        parts.append(QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name=entity.user))
    if entity.client_id is not UNSET:
        parts.append(
            QuotaEntityPart(entity_type=QuotaEntityType.CLIENT_ID, entity_name=entity.client_id)
        )
    return tuple(parts)


def entity_of(parts: tuple[QuotaEntityPart, ...]) -> QuotaEntity:
    """The entity a record's parts name: at least one, user before
    client_id, each type once (the one canonical form, so equal entities
    encode equally)."""
    types = [part.entity_type for part in parts]
    if not types or types not in (
        [QuotaEntityType.USER],
        [QuotaEntityType.CLIENT_ID],
        [QuotaEntityType.USER, QuotaEntityType.CLIENT_ID],
    ):
        raise MetadataRecordError(
            "ClientQuota.entity: one user part, one client_id part or both, in that order",
            type=ClientQuota.TYPE,
            field="entity",
        )
    fields = {part.entity_type.value: part.entity_name for part in parts}
    return typed.build(fields, QuotaEntity, error=MetadataRecordError, where="ClientQuota.entity")


def quota_record(entity: QuotaEntity, key: QuotaKey, value: float | None) -> ClientQuota:
    """Set `key` of `entity` to `value`, or remove it (None)."""
    if value is None:
        return ClientQuota(entity=entity_parts(entity), key=key, value=0.0, remove=True)
    return ClientQuota(entity=entity_parts(entity), key=key, value=float(value))


def check_quota_value(entity: QuotaEntity, key: QuotaKey, value: float) -> None:
    """MetadataRecordError unless `value` is a quota `key` may have."""
    typed.build(
        {"entity": typed.to_builtins(entity), "key": key.value, "value": value},
        QuotaSetting,
        error=MetadataRecordError,
        where=ClientQuota.TYPE,
    )


def entity_sort_key(entity: QuotaEntity) -> tuple[tuple[int, str], tuple[int, str]]:
    """A total order on entities: absent < default < named, per part."""

    def part(value: object) -> tuple[int, str]:
        if value is UNSET:
            return (0, "")
        return (1, "") if value is None else (2, str(value))

    return (part(entity.user), part(entity.client_id))

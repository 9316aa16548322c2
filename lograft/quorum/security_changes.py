"""Controller handlers for the security metadata: ACLs, SCRAM credentials,
client quotas (issue 12). Pure, as every handler: image in, records out.

Every check runs before a record is returned, so a refused request commits
nothing. Refusals are `InvalidRequestError` whose `field` detail names the
bad part of the request (and `limit` the bound, when one is exceeded), except
deleting a credential that does not exist: RESOURCE_NOT_FOUND, as Kafka's
AlterUserScramCredentials answers it.

Kafka's semantics kept: creating an ACL that exists is a success that adds
nothing (AclControlManager skips duplicates); removing a quota key that is not
set is no change; a credential upsert replaces the user's credential for that
mechanism.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lograft.errors import InvalidRequestError, ResourceNotFoundError
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.image import MetadataImage
from lograft.quorum.records import Record, RemoveUserScramCredential
from lograft.quorum.result import ControllerResult
from lograft.quorum.security_records import (
    acl_record,
    acl_sort_key,
    credential_record,
    quota_record,
    remove_acl_record,
)
from lograft.security.acl_filters import AclFilter
from lograft.security.acls import AclBinding
from lograft.security.passwords import ScramCredential, ScramMechanism
from lograft.security.quotas import QuotaEntity, QuotaKey, QuotaSetting

__all__ = [
    "CreatedAcls",
    "alter_client_quotas",
    "create_acls",
    "delete_acls",
    "delete_scram_credential",
    "upsert_scram_credential",
]


@dataclass(frozen=True, slots=True)
class CreatedAcls:
    created: tuple[AclBinding, ...]  # added by this request, in request order
    existing: tuple[AclBinding, ...]  # already present: nothing to add


def create_acls(
    image: MetadataImage, acls: Iterable[AclBinding], config: ControllerConfig
) -> ControllerResult[CreatedAcls]:
    wanted = list(acls)
    if not wanted:
        raise InvalidRequestError("give at least one ACL binding", field="acls")
    if len(wanted) > config.acls_per_request_max:
        raise InvalidRequestError(
            f"{len(wanted)} ACL bindings in one request; at most "
            f"{config.acls_per_request_max} ([controller] acls_per_request_max)",
            field="acls",
            limit=config.acls_per_request_max,
        )
    created: list[AclBinding] = []
    existing: list[AclBinding] = []
    seen: set[AclBinding] = set()
    for acl in wanted:
        if acl in seen:
            continue
        seen.add(acl)
        (existing if acl in image.acls else created).append(acl)
    total = len(image.acls) + len(created)
    if total > config.acls_max:
        raise InvalidRequestError(
            f"the cluster would hold {total} ACL bindings; at most {config.acls_max} "
            "([controller] acls_max): remove some first",
            field="acls",
            limit=config.acls_max,
        )
    records = tuple(acl_record(acl) for acl in created)
    return ControllerResult(records, CreatedAcls(tuple(created), tuple(existing)))


def delete_acls(
    image: MetadataImage, acl_filter: AclFilter, config: ControllerConfig
) -> ControllerResult[tuple[AclBinding, ...]]:
    """Remove every binding the filter matches (none is not an error)."""
    matched = sorted((a for a in image.acls if acl_filter.matches(a)), key=acl_sort_key)
    if len(matched) > config.acls_per_request_max:
        raise InvalidRequestError(
            f"the filter matches {len(matched)} ACL bindings; at most "
            f"{config.acls_per_request_max} are removed in one request "
            "([controller] acls_per_request_max): narrow the filter",
            field="filter",
            limit=config.acls_per_request_max,
        )
    records = tuple(remove_acl_record(acl) for acl in matched)
    return ControllerResult(records, tuple(matched))


def upsert_scram_credential(
    image: MetadataImage, credential: ScramCredential, config: ControllerConfig
) -> ControllerResult[None]:
    """Add or replace `credential.name`'s credential for its mechanism."""
    users = image.scram_credentials
    if credential.name not in users and len(users) >= config.scram_users_max:
        raise InvalidRequestError(
            f"the cluster has {len(users)} users; at most {config.scram_users_max} "
            "([controller] scram_users_max): delete some first",
            field="name",
            limit=config.scram_users_max,
        )
    return ControllerResult((credential_record(credential),), None)


def delete_scram_credential(
    image: MetadataImage, name: str, mechanism: ScramMechanism | None
) -> ControllerResult[tuple[ScramMechanism, ...]]:
    """Remove `name`'s credential for `mechanism`, or all of them (None)."""
    held = image.scram_credentials.get(name, {})
    if mechanism is not None and mechanism not in held:
        raise ResourceNotFoundError(
            f"user {name!r} has no {mechanism} credential", user=name, mechanism=mechanism.value
        )
    if not held:
        raise ResourceNotFoundError(f"user {name!r} has no credential", user=name)
    removed = (mechanism,) if mechanism is not None else tuple(sorted(held))
    records = tuple(RemoveUserScramCredential(name=name, mechanism=m) for m in removed)
    return ControllerResult(records, removed)


def alter_client_quotas(
    image: MetadataImage,
    entity: QuotaEntity,
    values: Mapping[QuotaKey, float],
    remove: Iterable[QuotaKey],
    config: ControllerConfig,
) -> ControllerResult[Mapping[QuotaKey, float]]:
    """Set `values` and remove the `remove` keys of `entity`'s quotas in one
    batch. Answers the entity's quotas afterwards."""
    removed = list(dict.fromkeys(remove))
    both = sorted(set(values) & set(removed))
    if both:
        raise InvalidRequestError(
            f"{', '.join(both)}: both set and removed", field=f"remove.{both[0]}"
        )
    if not values and not removed:
        raise InvalidRequestError("give at least one quota to set or remove", field="set")
    for key, value in values.items():
        try:
            QuotaSetting(entity=entity, key=key, value=value)
        except ValueError as exc:  # typed.FieldError: the value's rule
            rule = getattr(exc, "rule", str(exc))
            raise InvalidRequestError(f"set.{key}: {rule}", field=f"set.{key}") from None
    current = image.client_quotas.get(entity, {})
    if not current and values and len(image.client_quotas) >= config.quota_entities_max:
        raise InvalidRequestError(
            f"{len(image.client_quotas)} entities have quotas; at most "
            f"{config.quota_entities_max} ([controller] quota_entities_max)",
            field="entity",
            limit=config.quota_entities_max,
        )
    records: list[Record] = [quota_record(entity, key, values[key]) for key in sorted(values)]
    records.extend(quota_record(entity, key, None) for key in sorted(removed) if key in current)
    after = {k: v for k, v in current.items() if k not in removed}
    after.update({key: float(value) for key, value in values.items()})
    return ControllerResult(tuple(records), after)

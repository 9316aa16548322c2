"""The ACL model, named as Kafka names it.

An `AclBinding` says: `principal` connecting from `host` is allowed (or denied)
`operation` on the resources of `resource_type` that `resource_name` matches
under `pattern_type`. It is Kafka's `AclBinding` / `StandardAcl` (and the
fields of its `AccessControlEntryRecord` metadata record), with snake-case
names and lower-case enum values:

- principal: `Type:name` (`User:alice`); `User:*` is every principal, of
  any type (Kafka's `StandardAuthorizerData.WILDCARD_PRINCIPAL`; `Group:*`
  is no wildcard). The type is letters,
  digits, `_` and `-`; the name may be anything printable.
- host: `*` (any host) or an IP address, kept in its canonical text form so it
  compares equal to the address a server reads from its socket (Kafka compares
  `InetAddress.getHostAddress()` strings).
- resource_type: topic, group, cluster, transactional_id (reserved: lograft
  has no transactions yet, but the type exists so stored bindings stay valid).
- pattern_type: literal (the name exactly; the literal name `*` matches every
  name) or prefixed (every name starting with it).
- operation: read, write, create, delete, alter, describe, describe_configs,
  alter_configs, cluster_action, or all (every operation).
- permission: allow or deny.

Validation follows Kafka's `AclControlManager.validateNewAcl` (a concrete
resource type, pattern type, operation and permission; a non-empty resource
name) and `kafka-acls`' `AclCommand` check that the operation is one the
resource type supports (`AclEntry.supportedOperations`, plus ALL). lograft
adds bounds Kafka does not have: names are bounded in length and hold no
control characters, so a binding is safe to log and cheap to index. A cluster
binding names the cluster resource `kafka-cluster` (Kafka's
`Resource.CLUSTER_NAME`, the name its clients send) or `*`, literally.

Bad input is `InvalidRequestError` (code INVALID_REQUEST, as Kafka answers a
bad CreateAcls) whose `field` detail is the path of the bad field, e.g.
`{"field": "principal"}`; no new error class is needed.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from typing import Annotated, Any

import msgspec

from lograft import typed
from lograft.errors import InvalidRequestError

__all__ = [
    "ALL_OPERATIONS",
    "CLUSTER_RESOURCE_NAME",
    "HOST_CHARS_MAX",
    "PRINCIPAL_CHARS_MAX",
    "RESOURCE_NAME_CHARS_MAX",
    "SUPPORTED_OPERATIONS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclOperation",
    "AclPermission",
    "PatternType",
    "ResourceType",
    "canonical_host",
    "check_printable",
    "parse_acl",
    "parse_principal",
]

# The resource name, host and principal name that match anything.
WILDCARD = "*"
# The principal that matches every principal, whatever its type (Kafka's one
# wildcard: `Group:*` is just a principal named `*`).
WILDCARD_PRINCIPAL = "User:*"
# The one cluster resource's name, as Kafka's clients send it.
CLUSTER_RESOURCE_NAME = "kafka-cluster"

# Bounds, in characters. A resource name holds a topic name (at most 249
# characters) or a group id (at most 255 bytes), so 255 covers both; a
# principal may carry a certificate subject, hence longer; the longest IP
# address text (IPv6 with an embedded IPv4 and a zone) is under 64.
RESOURCE_NAME_CHARS_MAX = 255
PRINCIPAL_CHARS_MAX = 1024
HOST_CHARS_MAX = 64

# No C0 or C1 control characters, no DEL, no Unicode line or paragraph
# separators: a name is printed in logs and CLI tables as it is.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

ResourceName = Annotated[str, msgspec.Meta(min_length=1, max_length=RESOURCE_NAME_CHARS_MAX)]
Principal = Annotated[str, msgspec.Meta(min_length=3, max_length=PRINCIPAL_CHARS_MAX)]
Host = Annotated[str, msgspec.Meta(min_length=1, max_length=HOST_CHARS_MAX)]

_PRINCIPAL_TYPE = re.compile(r"[A-Za-z0-9_-]+")


class ResourceType(enum.StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    # Reserved: no transactions yet; accepted so bindings survive the day they come.
    TRANSACTIONAL_ID = "transactional_id"


class PatternType(enum.StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class AclOperation(enum.StrEnum):
    ALL = "all"
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    CLUSTER_ACTION = "cluster_action"
    DESCRIBE_CONFIGS = "describe_configs"
    ALTER_CONFIGS = "alter_configs"


class AclPermission(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"


ALL_OPERATIONS: frozenset[AclOperation] = frozenset(AclOperation)

_O = AclOperation
# Kafka's AclEntry.supportedOperations, without the operations lograft has no
# use for (IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS); ALL is always valid.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER}
        | {_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL}
    ),
    ResourceType.GROUP: frozenset(
        {_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL}
    ),
    ResourceType.CLUSTER: frozenset(
        {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALTER}
        | {_O.DESCRIBE, _O.ALL}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.ALL}),
}


class AclBinding(typed.Record):
    """One ACL: a resource pattern and an access control entry (Kafka's
    `AclBinding` = `ResourcePattern` + `AccessControlEntry`).

    Length and character bounds are checked when built from data (`parse_acl`);
    the rules between fields (`__post_init__`) are checked however it is made.
    Frozen and hashable: a set of bindings has no duplicates, as Kafka's
    AclControlManager refuses to store the same ACL twice.
    """

    resource_type: ResourceType
    resource_name: ResourceName
    pattern_type: PatternType
    principal: Principal
    host: Host
    operation: AclOperation
    permission: AclPermission

    def __post_init__(self) -> None:
        check_printable("resource_name", self.resource_name)
        parse_principal(self.principal)
        host = canonical_host(self.host)
        if host != self.host:
            # Frozen: the canonical spelling replaces the given one once, here.
            msgspec.structs.force_setattr(self, "host", host)
        if self.operation not in SUPPORTED_OPERATIONS[self.resource_type]:
            allowed = ", ".join(sorted(SUPPORTED_OPERATIONS[self.resource_type]))
            raise typed.FieldError(
                "operation",
                f"resource type {self.resource_type} supports only: {allowed}",
            )
        if self.resource_type is ResourceType.CLUSTER and (
            self.pattern_type is not PatternType.LITERAL
            or self.resource_name not in (CLUSTER_RESOURCE_NAME, WILDCARD)
        ):
            raise typed.FieldError(
                "resource_name",
                f"a cluster binding names the literal resource {CLUSTER_RESOURCE_NAME!r} (or '*')",
            )


def check_printable(field: str, text: str) -> None:
    """`typed.FieldError` on `field` when `text` holds a control character."""
    found = _CONTROL.search(text)
    if found is not None:
        shown = f"{found.group()!r} at {found.start()}"
        raise typed.FieldError(field, f"must not contain control characters (found {shown})")


def parse_principal(text: str) -> tuple[str, str]:
    """`Type:name` as (type, name), as Kafka's `SecurityUtils.parseKafkaPrincipal`
    splits it (at the first colon), or `typed.FieldError` on `principal`."""
    check_printable("principal", text)
    kind, colon, name = text.partition(":")
    if not colon or not name or _PRINCIPAL_TYPE.fullmatch(kind) is None:
        raise typed.FieldError(
            "principal",
            "must be Type:name, e.g. User:alice (the type: letters, digits, _ or -)",
        )
    return kind, name


def canonical_host(host: str) -> str:
    """`*`, or the address in the one text form a socket reports (`::1`, not
    `0:0::1`), or `typed.FieldError` on `host`. Hostnames are refused: Kafka
    matches addresses, and resolving names here would make a decision depend
    on DNS."""
    if host == WILDCARD:
        return host
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise typed.FieldError("host", "must be '*' or an IP address") from None


def parse_acl(value: Any, *, where: str = "") -> AclBinding:
    """An `AclBinding` from decoded JSON (a dict), or `InvalidRequestError`
    naming the bad field in its message and in the `field` detail."""
    return typed.build(value, AclBinding, error=InvalidRequestError, where=where, detail="field")

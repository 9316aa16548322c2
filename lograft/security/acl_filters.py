"""ACL filters: which bindings a listing shows or a deletion removes.

Kafka's `AclBindingFilter` (`ResourcePatternFilter` + `AccessControlEntryFilter`)
with lograft's names: a field left out (None) matches anything (Kafka's null
name, ANY type/operation/permission). `pattern_type`:

- `any` (the default): bindings of any pattern type whose resource name is
  exactly `resource_name`;
- `literal` / `prefixed`: only bindings of that pattern type, name exactly;
- `match`: every binding that applies to the resource `resource_name`: a
  literal binding on that name or on `*`, and every prefixed binding whose
  prefix starts the name (Kafka's PatternType.MATCH).

`operation` and `permission` match exactly (`all` matches only bindings of
operation ALL, as in Kafka). Principal and host are compared in the binding's
canonical form (the host as an address's one text form).
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from lograft import typed
from lograft.errors import InvalidRequestError
from lograft.security.acls import (
    WILDCARD,
    AclBinding,
    AclOperation,
    AclPermission,
    Host,
    PatternType,
    Principal,
    ResourceName,
    ResourceType,
    canonical_host,
    check_printable,
    parse_principal,
)

__all__ = ["AclFilter", "FilterPatternType", "parse_acl_filter"]


class FilterPatternType(enum.StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"
    ANY = "any"
    MATCH = "match"


class AclFilter(typed.Record, omit_defaults=True):
    resource_type: ResourceType | None = None
    resource_name: ResourceName | None = None
    pattern_type: FilterPatternType = FilterPatternType.ANY
    principal: Principal | None = None
    host: Host | None = None
    operation: AclOperation | None = None
    permission: AclPermission | None = None

    def __post_init__(self) -> None:
        if self.resource_name is not None:
            check_printable("resource_name", self.resource_name)
        if self.principal is not None:
            parse_principal(self.principal)
        if self.host is not None:
            host = canonical_host(self.host)
            if host != self.host:
                msgspec.structs.force_setattr(self, "host", host)

    def matches(self, acl: AclBinding) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type is not None and self.resource_type is not acl.resource_type:
            return False
        kind = self.pattern_type
        exact = kind in (FilterPatternType.ANY, FilterPatternType.MATCH)
        if not exact and kind.value != acl.pattern_type.value:
            return False
        name = self.resource_name
        if name is None:
            return True
        if kind is not FilterPatternType.MATCH:
            return name == acl.resource_name
        if acl.pattern_type is PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        return name.startswith(acl.resource_name)

    def _matches_entry(self, acl: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and (self.operation is None or self.operation is acl.operation)
            and (self.permission is None or self.permission is acl.permission)
        )


def parse_acl_filter(value: Any, *, where: str = "") -> AclFilter:
    """An `AclFilter` from decoded JSON or query parameters (a dict of
    strings), or `InvalidRequestError` naming the bad field."""
    return typed.build(value, AclFilter, error=InvalidRequestError, where=where, detail="field")

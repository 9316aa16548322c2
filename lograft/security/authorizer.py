"""Kafka's StandardAuthorizer decision rules, over an indexed set of ACL bindings.

Followed from Apache Kafka's
`metadata/src/main/java/org/apache/kafka/metadata/authorizer/StandardAuthorizerData.java`
(`authorize`, `findAclRule`, `checkSection`, `findResult`, `MatchingRuleBuilder`)
at commit 1eb7644349cb07139d6a3c1ad1986979647cac99; the code here is our own.
A request by `principal` from `host` to perform `operation` on the resource
(`resource_type`, `resource_name`) is decided so:

1. A super user (`super_users` holds its principal string) is allowed
   everything, before any ACL is looked at.
2. The ACLs that apply to the resource are those of its type whose pattern
   matches its name: a literal binding with exactly that name, a literal
   binding named `*`, and every prefixed binding whose name is a prefix of it.
3. Of those, an ACL matches the request when its principal is the caller's or
   `User:*`, its host is `*` or the caller's address, and its operation
   covers the request's: ALL covers every operation; an ALLOW of READ, WRITE,
   DELETE or ALTER also covers DESCRIBE, an ALLOW of ALTER_CONFIGS also covers
   DESCRIBE_CONFIGS; a DENY covers only its own operation (a DENY of READ does
   not deny DESCRIBE), or every operation when it is ALL.
4. Any matching DENY: denied (deny wins, however many ALLOWs match). Else any
   matching ALLOW: allowed. Else, when no ACL at all applies to the resource
   (step 2 found nothing, whoever it names): the default result,
   `allow_everyone_if_no_acl_found` (false unless configured). Else denied.

The index: literal bindings in a dict keyed by (resource type, name); prefixed
bindings per resource type under their names kept sorted, where the prefixes
of a name are found by walking down from the greatest name not after it: each
step (a binary search) either finds a prefix, or cuts the name to the part it
shares with the name found, as Kafka's `checkSection` jumps to "the first
divergence point" in its sorted set. Inside one resource pattern, bindings are
grouped by principal, so a decision reads only the caller's and the
wildcard's. A decision costs a few dict lookups, O(log n) per walk step (at
most two per character of the resource name, in practice a handful) and the
two principals' bindings on the matching patterns; not the total number of
bindings (scripts/bench_authorizer.py measures it with 10,000).

Not thread-safe: mutate and decide on one thread (the node's event loop).
Kafka swaps an immutable AclCache for concurrent readers; a node that decides
on several threads will need the same.
"""

from __future__ import annotations

import enum
from bisect import bisect_right, insort
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from lograft.security.acls import (
    ALL_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

__all__ = [
    "HARDCODED_RESOURCE_NAME",
    "AuthorizationResult",
    "Authorizer",
    "Decision",
    "Rule",
    "covered_operations",
]

_O = AclOperation

# What an ALLOW of an operation also allows (Kafka's IMPLIES_DESCRIBE and
# IMPLIES_DESCRIBE_CONFIGS, read from the other side).
_ALLOW_IMPLIES: dict[AclOperation, frozenset[AclOperation]] = {
    _O.READ: frozenset({_O.READ, _O.DESCRIBE}),
    _O.WRITE: frozenset({_O.WRITE, _O.DESCRIBE}),
    _O.DELETE: frozenset({_O.DELETE, _O.DESCRIBE}),
    _O.ALTER: frozenset({_O.ALTER, _O.DESCRIBE}),
    _O.ALTER_CONFIGS: frozenset({_O.ALTER_CONFIGS, _O.DESCRIBE_CONFIGS}),
}


def covered_operations(binding: AclBinding) -> frozenset[AclOperation]:
    """The requested operations `binding` applies to (rule 3 above)."""
    if binding.operation is _O.ALL:
        return ALL_OPERATIONS
    if binding.permission is AclPermission.ALLOW:
        return _ALLOW_IMPLIES.get(binding.operation, frozenset({binding.operation}))
    return frozenset({binding.operation})


class AuthorizationResult(enum.StrEnum):
    ALLOWED = "allowed"
    DENIED = "denied"


class Rule(enum.StrEnum):
    """Why a decision came out as it did (Kafka's MatchingRule, for audit logs)."""

    SUPER_USER = "super_user"
    MATCHING_ACL = "matching_acl"  # `Decision.acl` is the binding
    NO_ACL_DEFAULT = "no_acl_default"  # no ACL applies to the resource: the default
    NO_MATCHING_ACL = "no_matching_acl"  # ACLs apply, none matches: denied


@dataclass(frozen=True, slots=True)
class Decision:
    result: AuthorizationResult
    rule: Rule
    acl: AclBinding | None = None

    @property
    def allowed(self) -> bool:
        return self.result is AuthorizationResult.ALLOWED


# The name Kafka's `Authorizer.authorizeByResourceType` first decides a
# resource of the type under, so that super users (and the no-ACL default)
# answer as they would for any one resource.
HARDCODED_RESOURCE_NAME = "hardcode"

_SUPER_USER = Decision(AuthorizationResult.ALLOWED, Rule.SUPER_USER)
_NO_MATCHING_ACL = Decision(AuthorizationResult.DENIED, Rule.NO_MATCHING_ACL)

# One binding as a decision reads it: (host, covered operations, is allow, binding).
_Ace = tuple[str, frozenset[AclOperation], bool, AclBinding]
# The bindings of one resource pattern, by principal.
_Entry = dict[str, list[_Ace]]


class _PrefixIndex:
    """The prefixed patterns of one resource type: their names kept sorted (a
    plain list searched with the C `bisect`: a decision does a few searches,
    while bindings change only when an administrator changes them, where an
    O(n) insertion into a list of pointers costs microseconds) and their
    bindings by name."""

    __slots__ = ("entries", "names")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.entries: dict[str, _Entry] = {}

    def setdefault(self, name: str) -> _Entry:
        entry = self.entries.get(name)
        if entry is None:
            entry = self.entries[name] = {}
            insort(self.names, name)
        return entry

    def remove(self, name: str) -> None:
        del self.entries[name]
        del self.names[bisect_right(self.names, name) - 1]


class Authorizer:
    """A set of ACL bindings and the decisions they give (see the module doc)."""

    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users: frozenset[str] = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._default = Decision(
            AuthorizationResult.ALLOWED
            if allow_everyone_if_no_acl_found
            else AuthorizationResult.DENIED,
            Rule.NO_ACL_DEFAULT,
        )
        self._literal: dict[tuple[ResourceType, str], _Entry] = {}
        self._prefixed: dict[ResourceType, _PrefixIndex] = {t: _PrefixIndex() for t in ResourceType}
        self._count = 0
        for acl in acls:
            self.add(acl)

    # --- the set of bindings ---------------------------------------------------

    def add(self, acl: AclBinding) -> bool:
        """Add `acl`; False when it is already there (a set: no duplicates)."""
        entry = self._entry(acl, create=True)
        assert entry is not None
        aces = entry.setdefault(acl.principal, [])
        if any(ace[3] == acl for ace in aces):
            return False
        aces.append((acl.host, covered_operations(acl), acl.permission is AclPermission.ALLOW, acl))
        self._count += 1
        return True

    def remove(self, acl: AclBinding) -> bool:
        """Remove `acl`; False when it is not there."""
        entry = self._entry(acl, create=False)
        aces = entry.get(acl.principal) if entry is not None else None
        if not aces:
            return False
        kept = [ace for ace in aces if ace[3] != acl]
        if len(kept) == len(aces):
            return False
        self._count -= 1
        if kept:
            entry[acl.principal] = kept  # type: ignore[index]
            return True
        del entry[acl.principal]  # type: ignore[union-attr]
        if not entry:
            # An empty pattern must go: its presence alone would count as
            # "an ACL applies to the resource" (rule 4).
            if acl.pattern_type is PatternType.LITERAL:
                del self._literal[(acl.resource_type, acl.resource_name)]
            else:
                self._prefixed[acl.resource_type].remove(acl.resource_name)
        return True

    def __len__(self) -> int:
        return self._count

    def __contains__(self, acl: object) -> bool:
        if not isinstance(acl, AclBinding):
            return False
        entry = self._entry(acl, create=False)
        return entry is not None and any(ace[3] == acl for ace in entry.get(acl.principal, ()))

    def __iter__(self) -> Iterator[AclBinding]:
        """Every binding: literal ones first, then prefixed ones by name."""
        for entry in self._literal.values():
            yield from _bindings(entry)
        for prefixed in self._prefixed.values():
            for name in prefixed.names:
                yield from _bindings(prefixed.entries[name])

    def _entry(self, acl: AclBinding, *, create: bool) -> _Entry | None:
        if acl.pattern_type is PatternType.LITERAL:
            key = (acl.resource_type, acl.resource_name)
            if create:
                return self._literal.setdefault(key, {})
            return self._literal.get(key)
        prefixed = self._prefixed[acl.resource_type]
        if create:
            return prefixed.setdefault(acl.resource_name)
        return prefixed.entries.get(acl.resource_name)

    # --- decisions -------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        """Whether `principal` from `host` may perform `operation` on the
        resource. `host` is the caller's address in canonical text form (as a
        socket reports it and `acls.canonical_host` writes it)."""
        return self.explain(principal, host, operation, resource_type, resource_name).allowed

    def explain(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> Decision:
        """The decision with the rule that made it (for an audit log)."""
        if principal in self.super_users:
            return _SUPER_USER
        principals = (
            (principal,) if principal == WILDCARD_PRINCIPAL else (principal, WILDCARD_PRINCIPAL)
        )
        applies = False
        allowed_by: AclBinding | None = None
        for entry in self._applicable(resource_type, resource_name):
            applies = True
            for who in principals:
                for ace_host, covered, is_allow, acl in entry.get(who, ()):
                    if operation in covered and ace_host in (WILDCARD, host):
                        if not is_allow:
                            return Decision(AuthorizationResult.DENIED, Rule.MATCHING_ACL, acl)
                        allowed_by = acl
        if allowed_by is not None:
            return Decision(AuthorizationResult.ALLOWED, Rule.MATCHING_ACL, allowed_by)
        return _NO_MATCHING_ACL if applies else self._default

    def authorize_by_resource_type(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Whether `principal` from `host` may perform `operation` on at least
        one resource of the type (Kafka's KIP-679 `authorizeByResourceType`,
        which lets a producer with WRITE on any topic ask for a producer id).

        As Kafka's default implementation decides it: allowed when a resource
        named `hardcode` would be (a super user; the no-ACL default); else
        allowed when an ALLOW of the operation (or ALL) for the caller (or
        `User:*`) from its host names `*` literally, or names a literal or
        prefixed pattern that no DENY covers: a literal DENY of the same name
        or a prefixed DENY of one of its prefixes. A literal DENY of `*`
        denies. Looks at every pattern of the type (the caller's and the
        wildcard's bindings on each): for rare calls (one per producer), not
        for every request; api/access.py remembers the answers."""
        if self.authorize(principal, host, operation, resource_type, HARDCODED_RESOURCE_NAME):
            return True
        principals = (
            (principal,) if principal == WILDCARD_PRINCIPAL else (principal, WILDCARD_PRINCIPAL)
        )
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False
        for acl in self._bindings_of(resource_type, principals):
            if acl.host not in (WILDCARD, host):
                continue
            if acl.operation is not operation and acl.operation is not _O.ALL:
                continue
            literal = acl.pattern_type is PatternType.LITERAL
            if acl.permission is AclPermission.DENY:
                if literal and acl.resource_name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(acl.resource_name)
            elif literal and acl.resource_name == WILDCARD:
                wildcard_allow = True  # wins over every deny but a wildcard one
            else:
                allow.append((acl.pattern_type, acl.resource_name))
        if wildcard_allow:
            return True
        for pattern_type, name in allow:
            if pattern_type is PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:end] in deny_prefixed for end in range(1, len(name) + 1)):
                return True
        return False

    def _bindings_of(
        self, resource_type: ResourceType, principals: tuple[str, ...]
    ) -> Iterator[AclBinding]:
        """The bindings of the type that name one of `principals`."""
        entries = [e for (kind, _name), e in self._literal.items() if kind is resource_type]
        entries += self._prefixed[resource_type].entries.values()
        for entry in entries:
            for who in principals:
                for ace in entry.get(who, ()):
                    yield ace[3]

    def _applicable(self, resource_type: ResourceType, name: str) -> Iterator[_Entry]:
        """The bindings, grouped by pattern, that apply to the resource (rule 2)."""
        literal = self._literal
        entry = literal.get((resource_type, name))
        if entry is not None:
            yield entry
        if name != WILDCARD:
            entry = literal.get((resource_type, WILDCARD))
            if entry is not None:
                yield entry
        prefixed = self._prefixed[resource_type]
        names = prefixed.names
        if not names:
            return
        entries = prefixed.entries
        target = name
        while target:
            at = bisect_right(names, target)
            if at == 0:
                return
            key = names[at - 1]
            if target.startswith(key):
                # `key` is a prefix of the name; shorter ones sort before it.
                yield entries[key]
                target = key[:-1]
            else:
                # No stored prefix of the name is longer than what `key` and
                # the name share: any longer one would sort between them.
                target = target[: _shared_prefix_length(key, target)]


def _shared_prefix_length(key: str, target: str) -> int:
    """How many leading characters `key` and `target` share (key is not a
    prefix of target); a binary search of C-speed comparisons."""
    # Invariant: key[:low] is shared, key[:high] is not (not all of
    # min(len) is shared: key <= target, so target is no prefix of key).
    low, high = 0, min(len(key), len(target))
    while high - low > 1:
        mid = (low + high) // 2
        if target.startswith(key[:mid]):
            low = mid
        else:
            high = mid
    return low


def _bindings(entry: _Entry) -> Iterator[AclBinding]:
    for aces in entry.values():
        for ace in aces:
            yield ace[3]

"""The indexed authorizer decides as a linear scan of Kafka's rules does, on
random bindings (names from a tiny alphabet, so prefixes and wildcards collide)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.security.acls import (
    CLUSTER_RESOURCE_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from lograft.security.authorizer import Authorizer

Op = AclOperation
PRINCIPALS = ["User:a", "User:b", "User:*", "Group:a"]
HOSTS = ["*", "10.0.0.1", "10.0.0.2"]
names = st.one_of(st.just("*"), st.text(alphabet="ab*", min_size=1, max_size=4))


@st.composite
def bindings(draw: st.DrawFn) -> AclBinding:
    resource_type = draw(st.sampled_from(list(ResourceType)))
    if resource_type is ResourceType.CLUSTER:
        name = draw(st.sampled_from([CLUSTER_RESOURCE_NAME, "*"]))
        pattern = PatternType.LITERAL
    else:
        name = draw(names)
        pattern = draw(st.sampled_from(list(PatternType)))
    return AclBinding(
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern,
        principal=draw(st.sampled_from(PRINCIPALS)),
        host=draw(st.sampled_from(HOSTS)),
        operation=draw(st.sampled_from(sorted(SUPPORTED_OPERATIONS[resource_type]))),
        permission=draw(st.sampled_from(list(AclPermission))),
    )


requests = st.tuples(
    st.sampled_from(["User:a", "User:b", "User:c", "Group:a", "User:*"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
    st.sampled_from(list(AclOperation)),
    st.sampled_from(list(ResourceType)),
    st.one_of(names, st.just(CLUSTER_RESOURCE_NAME)),
)


def covers(acl: AclBinding, operation: AclOperation) -> bool:
    """Kafka's findResult operation switch, transcribed."""
    if acl.operation is Op.ALL:
        return True
    if acl.permission is AclPermission.ALLOW:
        if operation is Op.DESCRIBE:
            return acl.operation in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
        if operation is Op.DESCRIBE_CONFIGS:
            return acl.operation in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
    return acl.operation is operation


def reference(
    acls: set[AclBinding],
    super_users: set[str],
    allow_if_none: bool,
    request: tuple[str, str, AclOperation, ResourceType, str],
) -> bool:
    principal, host, operation, resource_type, name = request
    if principal in super_users:
        return True
    applicable = [
        acl
        for acl in acls
        if acl.resource_type is resource_type
        and (
            (acl.pattern_type is PatternType.LITERAL and acl.resource_name in (name, "*"))
            or (acl.pattern_type is PatternType.PREFIXED and name.startswith(acl.resource_name))
        )
    ]
    if not applicable:
        return allow_if_none
    matching = [
        acl
        for acl in applicable
        if acl.principal in (principal, "User:*")
        and acl.host in ("*", host)
        and covers(acl, operation)
    ]
    if any(acl.permission is AclPermission.DENY for acl in matching):
        return False
    return any(acl.permission is AclPermission.ALLOW for acl in matching)


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(bindings(), max_size=40),
    removed=st.lists(st.integers(min_value=0, max_value=39), max_size=10),
    super_users=st.sets(st.sampled_from(["User:a", "Group:a"]), max_size=1),
    allow_if_none=st.booleans(),
    asked=st.lists(requests, min_size=1, max_size=20),
)
def test_decisions_match_a_linear_scan(
    acls: list[AclBinding],
    removed: list[int],
    super_users: set[str],
    allow_if_none: bool,
    asked: list[tuple[str, str, AclOperation, ResourceType, str]],
) -> None:
    authorizer = Authorizer(
        acls, super_users=super_users, allow_everyone_if_no_acl_found=allow_if_none
    )
    kept = set(acls)
    for index in removed:
        if index < len(acls):
            assert authorizer.remove(acls[index]) == (acls[index] in kept)
            kept.discard(acls[index])
    assert len(authorizer) == len(kept)
    assert set(authorizer) == kept
    for request in asked:
        assert authorizer.authorize(*request) == reference(
            kept, super_users, allow_if_none, request
        ), request


@settings(max_examples=200, deadline=None)
@given(acls=st.lists(bindings(), max_size=40), name=names)
def test_every_explained_acl_applies_to_the_resource(acls: list[AclBinding], name: str) -> None:
    authorizer = Authorizer(acls)
    for principal in ("User:a", "User:b"):
        decision = authorizer.explain(principal, "10.0.0.1", Op.READ, ResourceType.TOPIC, name)
        if decision.acl is not None:
            acl = decision.acl
            assert acl.resource_type is ResourceType.TOPIC
            assert acl.principal in (principal, "User:*")
            if acl.pattern_type is PatternType.LITERAL:
                assert acl.resource_name in (name, "*")
            else:
                assert name.startswith(acl.resource_name)


@st.composite
def topic_bindings(draw: st.DrawFn) -> AclBinding:
    """Topic bindings from a denser space: nested prefixes of few names, for
    one principal and the wildcard, so several patterns apply to one name."""
    return AclBinding(
        resource_type=ResourceType.TOPIC,
        resource_name=draw(st.text(alphabet="ab", min_size=1, max_size=3)),
        pattern_type=draw(st.sampled_from(list(PatternType))),
        principal=draw(st.sampled_from(["User:a", "User:*"])),
        host="*",
        operation=draw(st.sampled_from([Op.READ, Op.DESCRIBE, Op.ALL])),
        permission=draw(st.sampled_from(list(AclPermission))),
    )


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(topic_bindings(), max_size=12),
    name=st.text(alphabet="ab", min_size=1, max_size=4),
    operation=st.sampled_from([Op.READ, Op.DESCRIBE, Op.WRITE]),
)
def test_nested_prefixes_decide_as_a_linear_scan(
    acls: list[AclBinding], name: str, operation: AclOperation
) -> None:
    authorizer = Authorizer(acls)
    for principal in ("User:a", "User:b"):
        request = (principal, "10.0.0.1", operation, ResourceType.TOPIC, name)
        assert authorizer.authorize(*request) == reference(set(acls), set(), False, request)

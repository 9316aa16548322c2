"""`Authorizer.authorize_by_resource_type`: may the caller perform an
operation on at least one resource of a type (Kafka's KIP-679, as
`AuthorizerInterfaceDefaultTest` / `AuthorizerTest.testAuthorizeByResourceType*`
decide it)."""

from __future__ import annotations

from lograft.security.acls import AclOperation, AclPermission, PatternType, ResourceType
from lograft.security.authorizer import Authorizer
from tests.unit.security.test_authorizer import acl

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
WRITE, READ, ALL = AclOperation.WRITE, AclOperation.READ, AclOperation.ALL
ALICE = "User:alice"
HOST = "10.0.0.1"


def topic_acl(name, pattern=LITERAL, permission=ALLOW, operation=WRITE, principal=ALICE, host="*"):
    return acl(TOPIC, name, pattern, principal, host, operation, permission)


def may(authorizer: Authorizer, principal: str = ALICE, operation=WRITE, host=HOST) -> bool:
    return authorizer.authorize_by_resource_type(principal, host, operation, TOPIC)


def test_no_acl_follows_the_default() -> None:
    assert not may(Authorizer())
    assert may(Authorizer(allow_everyone_if_no_acl_found=True))


def test_a_super_user_may_even_when_denied_everything() -> None:
    authorizer = Authorizer([topic_acl("*", permission=DENY)], super_users=[ALICE])
    assert may(authorizer)


def test_one_literal_allow_is_enough_unless_the_same_name_is_denied() -> None:
    assert may(Authorizer([topic_acl("t1")]))
    assert not may(Authorizer([topic_acl("t1"), topic_acl("t1", permission=DENY)]))
    assert may(Authorizer([topic_acl("t1"), topic_acl("t2", permission=DENY)]))


def test_a_prefixed_deny_dominates_the_allows_it_covers() -> None:
    assert not may(Authorizer([topic_acl("foo_bar"), topic_acl("foo", PREFIXED, DENY)]))
    assert may(Authorizer([topic_acl("foo_bar"), topic_acl("fox", PREFIXED, DENY)]))
    assert not may(Authorizer([topic_acl("foo", PREFIXED), topic_acl("fo", PREFIXED, DENY)]))
    # A longer prefixed deny does not cover every name of a shorter allow.
    assert may(Authorizer([topic_acl("fo", PREFIXED), topic_acl("foo", PREFIXED, DENY)]))
    # A literal deny does not dominate a prefixed allow.
    assert may(Authorizer([topic_acl("foo", PREFIXED), topic_acl("foo", LITERAL, DENY)]))


def test_wildcards() -> None:
    assert may(Authorizer([topic_acl("*"), topic_acl("t", PREFIXED, DENY)]))
    assert not may(Authorizer([topic_acl("*"), topic_acl("*", permission=DENY)]))
    assert not may(Authorizer([topic_acl("t1"), topic_acl("*", permission=DENY)]))


def test_principal_host_and_operation_must_match() -> None:
    assert not may(Authorizer([topic_acl("t1", principal="User:bob")]))
    assert may(Authorizer([topic_acl("t1", principal="User:*")]))
    assert not may(Authorizer([topic_acl("t1", host="10.0.0.2")]))
    assert may(Authorizer([topic_acl("t1", host=HOST)]))
    assert not may(Authorizer([topic_acl("t1", operation=READ)]))
    assert may(Authorizer([topic_acl("t1", operation=ALL)]))
    # A DENY of another operation does not deny this one.
    assert may(Authorizer([topic_acl("t1"), topic_acl("t1", permission=DENY, operation=READ)]))


def test_other_resource_types_do_not_count() -> None:
    group_allow = acl(GROUP, "g", LITERAL, ALICE, "*", READ, ALLOW)
    authorizer = Authorizer([group_allow])
    assert not authorizer.authorize_by_resource_type(ALICE, HOST, READ, TOPIC)
    assert authorizer.authorize_by_resource_type(ALICE, HOST, READ, GROUP)


def test_the_default_applies_through_the_hardcoded_name_as_in_kafka() -> None:
    """Kafka first decides a resource named `hardcode`: with the no-ACL
    default on and no ACL naming it, the caller may, whatever else is denied."""
    authorizer = Authorizer([topic_acl("t1", permission=DENY)], allow_everyone_if_no_acl_found=True)
    assert may(authorizer)

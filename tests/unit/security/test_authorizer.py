"""The authorizer's decisions, case by case as Kafka's StandardAuthorizerTest
(metadata/src/test/java/org/apache/kafka/metadata/authorizer/) decides them."""

from __future__ import annotations

import pytest

from lograft.security.acls import (
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from lograft.security.authorizer import AuthorizationResult, Authorizer, Rule

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
Op = AclOperation
LOCAL = "127.0.0.1"


def acl(
    resource_type: ResourceType,
    name: str,
    pattern: PatternType,
    principal: str,
    host: str,
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding:
    return AclBinding(
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission=permission,
    )


def foo_acl(operation: AclOperation, permission: AclPermission) -> AclBinding:
    """Kafka's newFooAcl: topics prefixed foo_, for User:bob from anywhere."""
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", "*", operation, permission)


def bar_acl(operation: AclOperation, permission: AclPermission) -> AclBinding:
    """Kafka's newBarAcl: the group bar, for everyone from anywhere."""
    return acl(GROUP, "bar", LITERAL, "User:*", "*", operation, permission)


def decide(
    authorizer: Authorizer,
    user: str,
    actions: list[tuple[AclOperation, ResourceType, str]],
    host: str = LOCAL,
) -> list[bool]:
    return [authorizer.authorize(f"User:{user}", host, *action) for action in actions]


# --- findResult: one ACL against one request ------------------------------------


@pytest.mark.parametrize("granted", [Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL])
def test_these_allows_imply_describe(granted: AclOperation) -> None:
    authorizer = Authorizer([foo_acl(granted, ALLOW)])
    assert decide(authorizer, "bob", [(Op.DESCRIBE, TOPIC, "foo_bar")]) == [True]


def test_create_does_not_imply_describe() -> None:
    authorizer = Authorizer([foo_acl(Op.CREATE, ALLOW)])
    decision = authorizer.explain("User:bob", LOCAL, Op.DESCRIBE, TOPIC, "foo_bar")
    assert decision.result is AuthorizationResult.DENIED
    assert decision.rule is Rule.NO_MATCHING_ACL


@pytest.mark.parametrize("denied", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_denies_imply_nothing(denied: AclOperation) -> None:
    authorizer = Authorizer([foo_acl(denied, DENY), foo_acl(Op.DESCRIBE, ALLOW)])
    assert decide(
        authorizer, "bob", [(Op.DESCRIBE, TOPIC, "foo_bar"), (denied, TOPIC, "foo_x")]
    ) == [
        True,
        False,
    ]


def test_an_exact_deny_denies() -> None:
    authorizer = Authorizer([foo_acl(Op.DESCRIBE, DENY), foo_acl(Op.READ, ALLOW)])
    decision = authorizer.explain("User:bob", LOCAL, Op.DESCRIBE, TOPIC, "foo_bar")
    assert (decision.result, decision.rule, decision.acl) == (
        AuthorizationResult.DENIED,
        Rule.MATCHING_ACL,
        foo_acl(Op.DESCRIBE, DENY),
    )


@pytest.mark.parametrize("granted", [Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
def test_these_allows_imply_describe_configs(granted: AclOperation) -> None:
    authorizer = Authorizer([foo_acl(granted, ALLOW)])
    assert decide(authorizer, "bob", [(Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")]) == [True]


def test_a_deny_of_alter_configs_does_not_deny_describe_configs() -> None:
    authorizer = Authorizer([foo_acl(Op.ALTER_CONFIGS, DENY), foo_acl(Op.DESCRIBE_CONFIGS, ALLOW)])
    assert decide(
        authorizer,
        "bob",
        [(Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar"), (Op.ALTER_CONFIGS, TOPIC, "foo_bar")],
    ) == [True, False]


def test_principal_matching() -> None:
    authorizer = Authorizer([foo_acl(Op.READ, ALLOW), bar_acl(Op.READ, DENY)])
    assert decide(authorizer, "bob", [(Op.READ, TOPIC, "foo_bar")]) == [True]
    assert decide(authorizer, "alice", [(Op.READ, TOPIC, "foo_bar")]) == [False]
    # The wildcard principal matches anyone.
    assert decide(authorizer, "alice", [(Op.READ, GROUP, "bar")]) == [False]


def test_user_star_is_the_one_wildcard_and_matches_every_principal() -> None:
    # Kafka's matchingPrincipals is {the caller, User:*} whatever the caller's type.
    authorizer = Authorizer(
        [
            acl(TOPIC, "t", LITERAL, "User:*", "*", Op.READ, ALLOW),
            acl(TOPIC, "g", LITERAL, "Group:*", "*", Op.READ, ALLOW),
        ]
    )
    assert authorizer.authorize("User:anyone", LOCAL, Op.READ, TOPIC, "t")
    assert authorizer.authorize("Group:anyone", LOCAL, Op.READ, TOPIC, "t")
    assert not authorizer.authorize("Group:anyone", LOCAL, Op.READ, TOPIC, "g")
    assert authorizer.authorize("Group:*", LOCAL, Op.READ, TOPIC, "g")


# --- StandardAuthorizer.authorize: whole sets -----------------------------------


def test_simple_authorizations() -> None:
    authorizer = Authorizer(
        [
            foo_acl(Op.READ, ALLOW),
            foo_acl(Op.WRITE, ALLOW),
            bar_acl(Op.DESCRIBE_CONFIGS, ALLOW),
            bar_acl(Op.ALTER_CONFIGS, ALLOW),
        ]
    )
    assert decide(authorizer, "bob", [(Op.READ, TOPIC, "foo_")]) == [True]
    assert decide(authorizer, "fred", [(Op.ALTER_CONFIGS, GROUP, "bar")]) == [True]


def test_deny_precedence_with_operation_all() -> None:
    authorizer = Authorizer(
        [
            acl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.ALL, DENY),
            acl(TOPIC, "foo", PREFIXED, "User:alice", "*", Op.READ, ALLOW),
            acl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, DENY),
            acl(TOPIC, "foo", PREFIXED, "User:*", "*", Op.DESCRIBE, ALLOW),
        ]
    )
    assert decide(
        authorizer,
        "alice",
        [
            (Op.WRITE, TOPIC, "foo"),
            (Op.READ, TOPIC, "foo"),
            (Op.DESCRIBE, TOPIC, "foo"),
            (Op.READ, TOPIC, "foobar"),
        ],
    ) == [False, False, False, True]
    assert decide(
        authorizer,
        "bob",
        [
            (Op.DESCRIBE, TOPIC, "foo"),
            (Op.READ, TOPIC, "foo"),
            (Op.WRITE, TOPIC, "foo"),
            (Op.DESCRIBE, TOPIC, "foobaz"),
            (Op.READ, TOPIC, "foobaz"),
        ],
    ) == [False, False, False, True, False]


def test_topic_acl_with_operation_all() -> None:
    authorizer = Authorizer(
        [
            acl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, ALLOW),
            acl(TOPIC, "bar", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
            acl(TOPIC, "baz", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
        ]
    )
    assert decide(
        authorizer,
        "alice",
        [
            (Op.WRITE, TOPIC, "foo"),
            (Op.DESCRIBE_CONFIGS, TOPIC, "bar"),
            (Op.DESCRIBE, TOPIC, "baz"),
        ],
    ) == [True, True, False]
    assert decide(
        authorizer,
        "bob",
        [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "baz")],
    ) == [True, False, True]
    assert decide(
        authorizer,
        "malory",
        [(Op.DESCRIBE, TOPIC, "foo"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")],
    ) == [True, False, False]


def test_host_address_acls() -> None:
    host1, host2 = "192.168.1.1", "192.168.1.2"
    authorizer = Authorizer(
        [
            acl(TOPIC, "foo", LITERAL, "User:alice", host1, Op.READ, DENY),
            acl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.READ, ALLOW),
            acl(TOPIC, "bar", LITERAL, "User:bob", host2, Op.READ, ALLOW),
            acl(TOPIC, "bar", LITERAL, "User:*", LOCAL, Op.DESCRIBE, ALLOW),
        ]
    )
    actions = [(Op.READ, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "bar")]
    assert decide(authorizer, "alice", actions, LOCAL) == [True, False, True]
    assert decide(authorizer, "alice", actions, host1) == [False, False, False]
    assert decide(authorizer, "alice", actions, host2) == [True, False, False]
    assert decide(authorizer, "bob", actions, LOCAL) == [False, False, True]
    assert decide(authorizer, "bob", actions, host1) == [False, False, False]
    assert decide(authorizer, "bob", actions, host2) == [False, True, True]


def many_acls() -> list[AclBinding]:
    """Kafka's addManyAcls, with READ where it grants WRITE on groups (lograft,
    as kafka-acls, refuses an operation a resource type does not support)."""
    return [
        acl(TOPIC, "green2", LITERAL, "User:*", "*", Op.READ, ALLOW),
        acl(TOPIC, "green", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "betamax4", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "betamax", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(TOPIC, "beta", PREFIXED, "User:*", "*", Op.READ, ALLOW),
        acl(TOPIC, "alpha", PREFIXED, "User:*", "*", Op.READ, ALLOW),
        acl(TOPIC, "alp", PREFIXED, "User:bob", "*", Op.READ, DENY),
        acl(GROUP, "*", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        acl(GROUP, "wheel", LITERAL, "User:*", "*", Op.READ, DENY),
    ]


def test_authorization_with_many_acls() -> None:
    authorizer = Authorizer(many_acls())
    assert decide(authorizer, "bob", [(Op.READ, TOPIC, "green1"), (Op.READ, GROUP, "wheel")]) == [
        True,
        False,
    ]
    assert decide(
        authorizer,
        "bob",
        [(Op.READ, TOPIC, "alpha"), (Op.READ, GROUP, "arbitrary"), (Op.READ, TOPIC, "ala")],
    ) == [False, True, False]
    # Literal names that are prefixes of the resource do not apply to it.
    assert decide(
        authorizer, "bob", [(Op.READ, TOPIC, "betamax4"), (Op.READ, TOPIC, "betamax5")]
    ) == [
        True,
        True,  # by the prefixed beta ACL for everyone
    ]
    assert decide(authorizer, "carol", [(Op.READ, TOPIC, "green1")]) == [False]


def test_prefix_acls() -> None:
    authorizer = Authorizer(
        [
            acl(TOPIC, "fooa", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
            acl(TOPIC, "foobar", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
            acl(TOPIC, "f", PREFIXED, "User:bob", "*", Op.ALL, ALLOW),
        ]
    )
    assert decide(
        authorizer,
        "bob",
        [(Op.WRITE, TOPIC, "foobarr"), (Op.READ, TOPIC, "goobar"), (Op.READ, TOPIC, "fooa")],
    ) == [True, False, True]
    assert decide(
        authorizer,
        "alice",
        [(Op.DESCRIBE, TOPIC, "fooa"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")],
    ) == [True, False, False]


def test_a_prefix_equal_to_the_name_applies() -> None:
    authorizer = Authorizer([acl(TOPIC, "orders", PREFIXED, "User:bob", "*", Op.READ, ALLOW)])
    assert decide(authorizer, "bob", [(Op.READ, TOPIC, "orders"), (Op.READ, TOPIC, "order")]) == [
        True,
        False,
    ]


def test_the_literal_wildcard_resource_applies_to_every_name_of_its_type() -> None:
    authorizer = Authorizer([acl(TOPIC, "*", LITERAL, "User:bob", "*", Op.WRITE, ALLOW)])
    assert decide(
        authorizer,
        "bob",
        [(Op.WRITE, TOPIC, "anything"), (Op.WRITE, TOPIC, "*"), (Op.READ, GROUP, "anything")],
    ) == [True, True, False]


def test_a_prefixed_star_is_only_a_prefix() -> None:
    authorizer = Authorizer([acl(TOPIC, "*", PREFIXED, "User:bob", "*", Op.WRITE, ALLOW)])
    assert decide(authorizer, "bob", [(Op.WRITE, TOPIC, "orders"), (Op.WRITE, TOPIC, "*x")]) == [
        False,
        True,
    ]


def test_resource_types_do_not_mix() -> None:
    authorizer = Authorizer([acl(GROUP, "orders", LITERAL, "User:bob", "*", Op.READ, ALLOW)])
    decision = authorizer.explain("User:bob", LOCAL, Op.READ, TOPIC, "orders")
    assert decision.rule is Rule.NO_ACL_DEFAULT and not decision.allowed


def test_cluster_actions() -> None:
    authorizer = Authorizer(
        [acl(CLUSTER, "kafka-cluster", LITERAL, "User:admin", "*", Op.CREATE, ALLOW)]
    )
    assert authorizer.authorize("User:admin", LOCAL, Op.CREATE, CLUSTER, "kafka-cluster")
    assert not authorizer.authorize("User:admin", LOCAL, Op.ALTER, CLUSTER, "kafka-cluster")


# --- super users and the default ------------------------------------------------


def test_super_users_are_allowed_everything_even_when_denied() -> None:
    authorizer = Authorizer(
        [acl(TOPIC, "*", LITERAL, "User:*", "*", Op.ALL, DENY)],
        super_users=["User:alice", "User:chris"],
    )
    decision = authorizer.explain("User:alice", LOCAL, Op.DELETE, TOPIC, "orders")
    assert decision.allowed and decision.rule is Rule.SUPER_USER
    assert not authorizer.authorize("User:bob", LOCAL, Op.DELETE, TOPIC, "orders")
    # A principal of another type with the same name is someone else.
    assert not authorizer.authorize("Group:alice", LOCAL, Op.DELETE, TOPIC, "orders")


def test_allow_everyone_if_no_acl_found_enabled() -> None:
    authorizer = Authorizer(
        [acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", Op.READ, ALLOW)],
        super_users=["User:alice", "User:chris"],
        allow_everyone_if_no_acl_found=True,
    )
    # An ACL applies to topic1 (for someone else): denied, not the default.
    assert decide(authorizer, "Bob", [(Op.READ, TOPIC, "topic1")]) == [False]
    assert decide(authorizer, "Bob", [(Op.READ, TOPIC, "topic2")]) == [True]


def test_allow_everyone_if_no_acl_found_disabled_is_the_default() -> None:
    authorizer = Authorizer(
        [acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", Op.READ, ALLOW)],
        super_users=["User:alice", "User:chris"],
    )
    assert not authorizer.allow_everyone_if_no_acl_found
    assert decide(authorizer, "Bob", [(Op.READ, TOPIC, "topic1"), (Op.READ, TOPIC, "topic2")]) == [
        False,
        False,
    ]
    assert Authorizer().explain("User:x", LOCAL, Op.READ, TOPIC, "t").rule is Rule.NO_ACL_DEFAULT


def test_a_prefixed_acl_for_someone_else_also_counts_as_an_acl_found() -> None:
    authorizer = Authorizer(
        [acl(TOPIC, "team-a.", PREFIXED, "User:alice", "*", Op.READ, ALLOW)],
        allow_everyone_if_no_acl_found=True,
    )
    assert decide(authorizer, "bob", [(Op.READ, TOPIC, "team-a.orders")]) == [False]
    assert decide(authorizer, "bob", [(Op.READ, TOPIC, "team-b.orders")]) == [True]


# --- the set of bindings ----------------------------------------------------------


def test_add_remove_and_list() -> None:
    authorizer = Authorizer()
    first, second = foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW)
    assert authorizer.add(first) and authorizer.add(second)
    assert not authorizer.add(first)
    assert len(authorizer) == 2 and first in authorizer
    assert set(authorizer) == {first, second}
    assert authorizer.remove(second)
    assert not authorizer.remove(second)
    assert not authorizer.remove(bar_acl(Op.READ, ALLOW))
    assert list(authorizer) == [first]
    assert second not in authorizer and "not an acl" not in authorizer


def test_removing_the_last_binding_of_a_pattern_restores_the_default() -> None:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    for binding in (
        acl(TOPIC, "orders", LITERAL, "User:alice", "*", Op.READ, ALLOW),
        acl(TOPIC, "ord", PREFIXED, "User:alice", "*", Op.READ, ALLOW),
    ):
        authorizer.add(binding)
        assert not authorizer.authorize("User:bob", LOCAL, Op.READ, TOPIC, "orders")
        authorizer.remove(binding)
        assert authorizer.authorize("User:bob", LOCAL, Op.READ, TOPIC, "orders")
        assert len(authorizer) == 0

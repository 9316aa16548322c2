"""The ACL model: what a binding may hold, and the stable error for what it may not."""

from __future__ import annotations

from typing import Any

import pytest

from lograft import typed
from lograft.errors import InvalidRequestError
from lograft.security.acls import (
    CLUSTER_RESOURCE_NAME,
    PRINCIPAL_CHARS_MAX,
    RESOURCE_NAME_CHARS_MAX,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    parse_acl,
    parse_principal,
)


def acl_dict(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "resource_type": "topic",
        "resource_name": "orders",
        "pattern_type": "literal",
        "principal": "User:alice",
        "host": "*",
        "operation": "read",
        "permission": "allow",
    }
    value.update(changes)
    return value


def test_a_binding_parses_into_kafka_vocabulary() -> None:
    acl = parse_acl(acl_dict())
    assert acl == AclBinding(
        resource_type=ResourceType.TOPIC,
        resource_name="orders",
        pattern_type=PatternType.LITERAL,
        principal="User:alice",
        host="*",
        operation=AclOperation.READ,
        permission=AclPermission.ALLOW,
    )
    assert typed.to_builtins(acl) == acl_dict()


def test_bindings_are_values_so_a_set_has_no_duplicates() -> None:
    assert len({parse_acl(acl_dict()), parse_acl(acl_dict())}) == 1


@pytest.mark.parametrize(
    ("given", "stored"),
    [("*", "*"), ("192.168.1.1", "192.168.1.1"), ("0:0::1", "::1"), ("FE80::1", "fe80::1")],
)
def test_hosts_are_kept_in_the_canonical_form_a_socket_reports(given: str, stored: str) -> None:
    assert parse_acl(acl_dict(host=given)).host == stored


def test_the_wildcard_principal_and_other_principal_types_are_accepted() -> None:
    assert parse_acl(acl_dict(principal="User:*")).principal == "User:*"
    assert parse_acl(acl_dict(principal="Group:ops")).principal == "Group:ops"
    # Kafka splits at the first colon: the name may hold more colons.
    assert parse_principal("User:CN=a:b") == ("User", "CN=a:b")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"principal": "alice"}, "principal"),
        ({"principal": "User:"}, "principal"),
        ({"principal": ":alice"}, "principal"),
        ({"principal": "Us er:alice"}, "principal"),
        ({"principal": "User:al\x00ice"}, "principal"),
        ({"principal": "User:" + "a" * PRINCIPAL_CHARS_MAX}, "principal"),
        ({"host": "example.com"}, "host"),
        ({"host": "10.0.0.300"}, "host"),
        ({"host": ""}, "host"),
        ({"resource_name": ""}, "resource_name"),
        ({"resource_name": "a" * (RESOURCE_NAME_CHARS_MAX + 1)}, "resource_name"),
        ({"resource_name": "bad\nname"}, "resource_name"),
        ({"resource_name": "bad\x7fname"}, "resource_name"),
        ({"resource_name": "bad\u2028name"}, "resource_name"),
        ({"resource_type": "any"}, "resource_type"),
        ({"resource_type": "delegation_token"}, "resource_type"),
        ({"pattern_type": "match"}, "pattern_type"),
        ({"pattern_type": "any"}, "pattern_type"),
        ({"operation": "any"}, "operation"),
        ({"operation": "idempotent_write"}, "operation"),
        ({"permission": "any"}, "permission"),
        ({"operation": "cluster_action"}, "operation"),  # not a topic operation
        ({"resource_type": "group", "operation": "write"}, "operation"),
        (
            {"resource_type": "cluster", "resource_name": "orders", "operation": "alter"},
            "resource_name",
        ),
        (
            {
                "resource_type": "cluster",
                "resource_name": "kafka",
                "pattern_type": "prefixed",
                "operation": "alter",
            },
            "resource_name",
        ),
        ({"surprise": 1}, "surprise"),
        ({"resource_name": 7}, "resource_name"),
    ],
)
def test_bad_bindings_are_invalid_requests_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_acl(acl_dict(**changes))
    assert caught.value.code == "INVALID_REQUEST"
    assert caught.value.details == {"field": field}
    assert caught.value.message.startswith(f"{field}: ")


def test_a_missing_field_is_named() -> None:
    value = acl_dict()
    del value["permission"]
    with pytest.raises(InvalidRequestError) as caught:
        parse_acl(value)
    assert caught.value.details == {"field": "permission"}


def test_the_error_path_can_be_placed_inside_a_request() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_acl(acl_dict(host="nowhere"), where="acls[3]")
    assert caught.value.details == {"field": "acls[3].host"}


def test_cluster_bindings_name_the_cluster_resource_literally() -> None:
    for name in (CLUSTER_RESOURCE_NAME, "*"):
        acl = parse_acl(
            acl_dict(resource_type="cluster", resource_name=name, operation="cluster_action")
        )
        assert acl.resource_name == name


def test_every_resource_type_allows_all_and_its_supported_operations() -> None:
    for resource_type, operations in SUPPORTED_OPERATIONS.items():
        name = CLUSTER_RESOURCE_NAME if resource_type is ResourceType.CLUSTER else "x"
        assert AclOperation.ALL in operations
        for operation in operations:
            parse_acl(
                acl_dict(resource_type=resource_type.value, resource_name=name, operation=operation)
            )


def test_rules_between_fields_hold_for_code_built_bindings_too() -> None:
    with pytest.raises(typed.FieldError):
        AclBinding(
            resource_type=ResourceType.GROUP,
            resource_name="g",
            pattern_type=PatternType.LITERAL,
            principal="User:alice",
            host="*",
            operation=AclOperation.WRITE,
            permission=AclPermission.ALLOW,
        )

"""ACL filters: Kafka's AclBindingFilter matching (ANY, LITERAL, PREFIXED, MATCH)."""

from __future__ import annotations

import pytest

from lograft.errors import InvalidRequestError
from lograft.security.acl_filters import AclFilter, parse_acl_filter
from lograft.security.acls import AclBinding, parse_acl


def acl(name: str, pattern: str = "literal", **fields: str) -> AclBinding:
    base = {
        "resource_type": "topic",
        "resource_name": name,
        "pattern_type": pattern,
        "principal": "User:alice",
        "host": "*",
        "operation": "read",
        "permission": "allow",
    }
    return parse_acl({**base, **fields})


ORDERS = acl("orders")
EVERY = acl("*")
PREFIX = acl("ord", "prefixed")
OTHER_PREFIX = acl("pay", "prefixed")
GROUP = acl("orders", resource_type="group")
BOB_WRITE = acl("orders", principal="User:bob", operation="write", host="10.0.0.1")
ALL = [ORDERS, EVERY, PREFIX, OTHER_PREFIX, GROUP, BOB_WRITE]


def matched(**query: str) -> set[AclBinding]:
    f = parse_acl_filter(query)
    return {a for a in ALL if f.matches(a)}


def test_an_empty_filter_matches_everything() -> None:
    assert matched() == set(ALL)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"resource_name": "orders"}, {ORDERS, GROUP, BOB_WRITE}),
        ({"resource_name": "orders", "pattern_type": "literal"}, {ORDERS, GROUP, BOB_WRITE}),
        ({"resource_name": "ord", "pattern_type": "prefixed"}, {PREFIX}),
        ({"pattern_type": "prefixed"}, {PREFIX, OTHER_PREFIX}),
        (
            {"resource_type": "topic", "resource_name": "orders", "pattern_type": "match"},
            {ORDERS, EVERY, PREFIX, BOB_WRITE},
        ),
        ({"principal": "User:bob"}, {BOB_WRITE}),
        ({"host": "10.0.0.1"}, {BOB_WRITE}),
        ({"operation": "write"}, {BOB_WRITE}),
        ({"permission": "deny"}, set()),
        ({"resource_type": "group"}, {GROUP}),
    ],
)
def test_filters(query: dict[str, str], expected: set[AclBinding]) -> None:
    assert matched(**query) == expected


def test_hosts_compare_in_canonical_form() -> None:
    v6 = acl("orders", host="::1")
    assert AclFilter(host="0:0::1").matches(v6)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"pattern_type": "fuzzy"}, "pattern_type"),
        ({"principal": "alice"}, "principal"),
        ({"host": "example.com"}, "host"),
        ({"operation": "fly"}, "operation"),
        ({"resource_name": "a\nb"}, "resource_name"),
        ({"resource_name": "x" * 300}, "resource_name"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_filters_name_the_field(query: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_acl_filter(query)
    assert caught.value.details["field"] == field

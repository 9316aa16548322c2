"""Controller handlers for ACLs, SCRAM credentials and client quotas: what
they commit, and that every refusal commits nothing and names the field."""

from __future__ import annotations

import pytest

from lograft.errors import InvalidRequestError, ResourceNotFoundError
from lograft.quorum import controller as c
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.image import MetadataImage
from lograft.quorum.records import (
    AccessControlEntry,
    ClientQuota,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UserScramCredential,
)
from lograft.security.acl_filters import AclFilter, FilterPatternType
from lograft.security.acls import AclBinding, parse_acl
from lograft.security.passwords import ScramMechanism, make_credential
from lograft.security.quotas import QuotaEntity, QuotaKey

CONFIG = ControllerConfig()


def acl(name: str, principal: str = "User:alice") -> AclBinding:
    return parse_acl(
        {
            "resource_type": "topic",
            "resource_name": name,
            "pattern_type": "literal",
            "principal": principal,
            "host": "*",
            "operation": "read",
            "permission": "allow",
        }
    )


def applied(image: MetadataImage, result: c.ControllerResult[object]) -> MetadataImage:
    return image.apply_batch(image.offset + 1, result.records)


def test_create_acls_adds_new_ones_and_skips_existing() -> None:
    image = MetadataImage.empty()
    first = c.create_acls(image, [acl("a"), acl("b"), acl("a")], CONFIG)
    assert [type(r) for r in first.records] == [AccessControlEntry, AccessControlEntry]
    assert first.response.created == (acl("a"), acl("b"))
    image = applied(image, first)
    again = c.create_acls(image, [acl("b"), acl("c")], CONFIG)
    assert again.response.created == (acl("c"),)
    assert again.response.existing == (acl("b"),)
    assert len(again.records) == 1


def test_create_acls_bounds() -> None:
    small = ControllerConfig(acls_per_request_max=2, acls_max=3)
    with pytest.raises(InvalidRequestError) as caught:
        c.create_acls(MetadataImage.empty(), [acl("a"), acl("b"), acl("c")], small)
    assert caught.value.details == {"field": "acls", "limit": 2}
    image = applied(MetadataImage.empty(), c.create_acls(MetadataImage.empty(), [acl("a")], small))
    image = applied(image, c.create_acls(image, [acl("b"), acl("c")], small))
    with pytest.raises(InvalidRequestError, match="acls_max") as caught:
        c.create_acls(image, [acl("d")], small)
    assert caught.value.details["limit"] == 3
    with pytest.raises(InvalidRequestError):
        c.create_acls(image, [], small)


def test_delete_acls_by_filter() -> None:
    image = MetadataImage.empty()
    image = applied(image, c.create_acls(image, [acl("a"), acl("b"), acl("a", "User:bob")], CONFIG))
    result = c.delete_acls(image, AclFilter(principal="User:alice"), CONFIG)
    assert all(type(r) is RemoveAccessControlEntry for r in result.records)
    assert set(result.response) == {acl("a"), acl("b")}
    image = applied(image, result)
    assert image.acls == frozenset({acl("a", "User:bob")})
    nothing = c.delete_acls(image, AclFilter(resource_name="zzz"), CONFIG)
    assert nothing.records == () and nothing.response == ()


def test_a_delete_matching_too_many_is_refused() -> None:
    image = MetadataImage.empty()
    image = applied(image, c.create_acls(image, [acl("a"), acl("b"), acl("c")], CONFIG))
    with pytest.raises(InvalidRequestError, match="narrow the filter") as caught:
        c.delete_acls(image, AclFilter(), ControllerConfig(acls_per_request_max=2))
    assert caught.value.details["field"] == "filter"
    matching = AclFilter(resource_name="b", pattern_type=FilterPatternType.MATCH)
    assert c.delete_acls(image, matching, ControllerConfig(acls_per_request_max=1)).response == (
        acl("b"),
    )


ALICE = make_credential("alice", "pw-1")
ALICE_256 = make_credential("alice", "pw-1", mechanism=ScramMechanism.SCRAM_SHA_256)


def test_upsert_and_delete_scram_credentials() -> None:
    image = MetadataImage.empty()
    result = c.upsert_scram_credential(image, ALICE, CONFIG)
    assert [type(r) for r in result.records] == [UserScramCredential]
    image = applied(image, result)
    image = applied(image, c.upsert_scram_credential(image, ALICE_256, CONFIG))
    one = c.delete_scram_credential(image, "alice", ScramMechanism.SCRAM_SHA_256)
    assert one.response == (ScramMechanism.SCRAM_SHA_256,)
    every = c.delete_scram_credential(image, "alice", None)
    assert [type(r) for r in every.records] == [RemoveUserScramCredential] * 2
    image = applied(image, every)
    assert "alice" not in image.scram_credentials


def test_deleting_a_missing_credential_is_resource_not_found() -> None:
    image = applied(
        MetadataImage.empty(), c.upsert_scram_credential(MetadataImage.empty(), ALICE, CONFIG)
    )
    with pytest.raises(ResourceNotFoundError):
        c.delete_scram_credential(image, "bob", None)
    with pytest.raises(ResourceNotFoundError, match="SCRAM-SHA-256"):
        c.delete_scram_credential(image, "alice", ScramMechanism.SCRAM_SHA_256)


def test_the_user_count_is_bounded_but_replacing_is_not() -> None:
    one = ControllerConfig(scram_users_max=1)
    image = applied(
        MetadataImage.empty(), c.upsert_scram_credential(MetadataImage.empty(), ALICE, one)
    )
    assert c.upsert_scram_credential(image, ALICE_256, one).records
    with pytest.raises(InvalidRequestError, match="scram_users_max") as caught:
        c.upsert_scram_credential(image, make_credential("bob", "pw"), one)
    assert caught.value.details == {"field": "name", "limit": 1}


ALICE_Q = QuotaEntity(user="alice")
P, C, R = QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE


def test_alter_client_quotas_sets_and_removes_in_one_batch() -> None:
    image = MetadataImage.empty()
    result = c.alter_client_quotas(image, ALICE_Q, {P: 1024, C: 2048}, [], CONFIG)
    assert result.response == {P: 1024.0, C: 2048.0}
    image = applied(image, result)
    result = c.alter_client_quotas(
        image, ALICE_Q, {R: 50.5}, [P, QuotaKey.PRODUCER_BYTE_RATE], CONFIG
    )
    assert all(type(r) is ClientQuota for r in result.records)
    assert result.response == {C: 2048.0, R: 50.5}
    image = applied(image, result)
    assert dict(image.client_quotas[ALICE_Q]) == {C: 2048.0, R: 50.5}


@pytest.mark.parametrize(
    ("values", "remove", "field"),
    [
        ({P: 1.5}, [], "set.producer_byte_rate"),
        ({P: 0}, [], "set.producer_byte_rate"),
        ({R: -1}, [], "set.request_percentage"),
        ({R: float("nan")}, [], "set.request_percentage"),
        ({P: 1}, [P], "remove.producer_byte_rate"),
        ({}, [], "set"),
    ],
)
def test_bad_quota_changes_name_the_field(values, remove, field) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        c.alter_client_quotas(MetadataImage.empty(), ALICE_Q, values, remove, CONFIG)
    assert caught.value.details["field"] == field


def test_the_quota_entity_count_is_bounded() -> None:
    one = ControllerConfig(quota_entities_max=1)
    image = applied(
        MetadataImage.empty(),
        c.alter_client_quotas(MetadataImage.empty(), ALICE_Q, {P: 1}, [], one),
    )
    # The same entity may change; a new one may not be added.
    assert c.alter_client_quotas(image, ALICE_Q, {C: 1}, [], one).records
    with pytest.raises(InvalidRequestError, match="quota_entities_max"):
        c.alter_client_quotas(image, QuotaEntity(user=None), {P: 1}, [], one)

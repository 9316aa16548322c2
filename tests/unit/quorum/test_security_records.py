"""ACL, SCRAM credential and client quota records: codec, replay into the
image (copy on write), and snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from lograft.errors import MetadataRecordError
from lograft.quorum.image import MetadataImage
from lograft.quorum.records import (
    ClientQuota,
    QuotaEntityPart,
    QuotaEntityType,
    RemoveUserScramCredential,
    Topic,
    UserScramCredential,
    decode_batch,
    encode_batch,
)
from lograft.quorum.security_records import (
    acl_record,
    credential_record,
    quota_record,
    remove_acl_record,
)
from lograft.security.acls import AclOperation, parse_acl
from lograft.security.passwords import ScramMechanism, make_credential
from lograft.security.quotas import QuotaEntity, QuotaKey
from tests.unit.quorum.golden_security import ACL, CREDENTIAL, EVERY_SECURITY_TYPE

GOLDEN = Path(__file__).parents[2] / "fixtures" / "golden" / "security_records.jsonl"

READ_ORDERS = parse_acl(
    {
        "resource_type": "topic",
        "resource_name": "orders",
        "pattern_type": "literal",
        "principal": "User:alice",
        "host": "*",
        "operation": "read",
        "permission": "allow",
    }
)
ALICE = make_credential("alice", "secret-1", iterations=4096)
ALICE_256 = make_credential(
    "alice", "secret-1", mechanism=ScramMechanism.SCRAM_SHA_256, iterations=4096
)


def test_golden_batch_decodes_and_encodes_to_the_same_bytes() -> None:
    data = GOLDEN.read_bytes().strip()
    assert decode_batch(data) == EVERY_SECURITY_TYPE
    assert encode_batch(EVERY_SECURITY_TYPE) == data


def test_golden_batch_replays() -> None:
    image = MetadataImage.empty().apply_batch(1, EVERY_SECURITY_TYPE)
    assert len(image.acls) == 1
    (acl,) = image.acls
    assert (acl.principal, acl.resource_name, acl.operation) == (
        ACL.principal,
        ACL.resource_name,
        AclOperation.READ,
    )
    assert set(image.scram_credentials) == {"alice"}
    credential = image.scram_credentials["alice"][ScramMechanism.SCRAM_SHA_256]
    assert credential.stored_key == CREDENTIAL.stored_key
    assert dict(image.client_quotas) == {
        QuotaEntity(user=None, client_id="etl"): {QuotaKey.REQUEST_PERCENTAGE: 12.5}
    }


def _image(*records: object) -> MetadataImage:
    return MetadataImage.empty().apply_batch(1, records)  # type: ignore[arg-type]


def test_acl_add_and_remove() -> None:
    image = _image(acl_record(READ_ORDERS))
    assert image.acls == frozenset({READ_ORDERS})
    after = image.apply_batch(2, [remove_acl_record(READ_ORDERS)])
    assert after.acls == frozenset()
    assert isinstance(after.acls, frozenset)


def test_duplicate_acl_and_unknown_removal_are_refused() -> None:
    image = _image(acl_record(READ_ORDERS))
    with pytest.raises(MetadataRecordError, match="already exists"):
        image.apply_batch(2, [acl_record(READ_ORDERS)])
    with pytest.raises(MetadataRecordError, match="does not exist"):
        MetadataImage.empty().apply_batch(1, [remove_acl_record(READ_ORDERS)])


def test_an_acl_record_that_makes_no_binding_is_refused() -> None:
    bad = acl_record(READ_ORDERS)
    for field, value in (("principal", "alice"), ("host", "example.com"), ("resource_name", "")):
        fields = {name: getattr(bad, name) for name in bad.__struct_fields__}
        fields[field] = value
        with pytest.raises(MetadataRecordError, match=field):
            MetadataImage.empty().apply_batch(1, [type(bad)(**fields)])


def test_credentials_per_mechanism() -> None:
    image = _image(credential_record(ALICE), credential_record(ALICE_256))
    assert set(image.scram_credentials["alice"]) == set(ScramMechanism)
    replaced = make_credential("alice", "secret-2", iterations=8192)
    image = image.apply_batch(2, [credential_record(replaced)])
    assert image.scram_credentials["alice"][ScramMechanism.SCRAM_SHA_512] == replaced
    image = image.apply_batch(
        3, [RemoveUserScramCredential(name="alice", mechanism=ScramMechanism.SCRAM_SHA_512)]
    )
    assert set(image.scram_credentials["alice"]) == {ScramMechanism.SCRAM_SHA_256}
    image = image.apply_batch(
        4, [RemoveUserScramCredential(name="alice", mechanism=ScramMechanism.SCRAM_SHA_256)]
    )
    assert "alice" not in image.scram_credentials


def test_removing_a_missing_credential_is_refused() -> None:
    with pytest.raises(MetadataRecordError, match="no SCRAM-SHA-512"):
        _image(RemoveUserScramCredential(name="nobody", mechanism=ScramMechanism.SCRAM_SHA_512))


def test_a_credential_with_bad_keys_is_refused() -> None:
    record = credential_record(ALICE)
    short = UserScramCredential(
        name=record.name,
        mechanism=record.mechanism,
        salt=record.salt,
        iterations=record.iterations,
        stored_key=record.stored_key[:32],  # 32 bytes for SHA-512
        server_key=record.server_key,
    )
    with pytest.raises(MetadataRecordError, match="stored_key"):
        _image(short)
    too_few = UserScramCredential(
        name=record.name,
        mechanism=record.mechanism,
        salt=record.salt,
        iterations=10,
        stored_key=record.stored_key,
        server_key=record.server_key,
    )
    with pytest.raises(MetadataRecordError, match="iterations"):
        _image(too_few)


def test_quota_set_replace_remove() -> None:
    alice = QuotaEntity(user="alice")
    image = _image(
        quota_record(alice, QuotaKey.PRODUCER_BYTE_RATE, 1000),
        quota_record(alice, QuotaKey.CONSUMER_BYTE_RATE, 2000),
    )
    assert dict(image.client_quotas[alice]) == {
        QuotaKey.PRODUCER_BYTE_RATE: 1000.0,
        QuotaKey.CONSUMER_BYTE_RATE: 2000.0,
    }
    image = image.apply_batch(2, [quota_record(alice, QuotaKey.PRODUCER_BYTE_RATE, 5000)])
    assert image.client_quotas[alice][QuotaKey.PRODUCER_BYTE_RATE] == 5000.0
    image = image.apply_batch(
        3,
        [
            quota_record(alice, QuotaKey.PRODUCER_BYTE_RATE, None),
            quota_record(alice, QuotaKey.CONSUMER_BYTE_RATE, None),
            # Removing what is not there is no change (as Kafka's replay).
            quota_record(alice, QuotaKey.REQUEST_PERCENTAGE, None),
        ],
    )
    assert alice not in image.client_quotas


@pytest.mark.parametrize(
    ("parts", "key", "value", "problem"),
    [
        ((), QuotaKey.PRODUCER_BYTE_RATE, 1.0, "entity"),
        (
            (
                QuotaEntityPart(entity_type=QuotaEntityType.CLIENT_ID, entity_name="c"),
                QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name="u"),
            ),
            QuotaKey.PRODUCER_BYTE_RATE,
            1.0,
            "entity",
        ),
        (
            (QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name=""),),
            QuotaKey.PRODUCER_BYTE_RATE,
            1.0,
            "user",
        ),
        (
            (QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name="u"),),
            QuotaKey.PRODUCER_BYTE_RATE,
            1.5,
            "value",
        ),
        (
            (QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name="u"),),
            QuotaKey.REQUEST_PERCENTAGE,
            -1.0,
            "value",
        ),
    ],
)
def test_bad_quota_records_are_refused(parts, key, value, problem) -> None:
    with pytest.raises(MetadataRecordError, match=problem):
        _image(ClientQuota(entity=parts, key=key, value=value))


def test_unchanged_security_parts_are_the_same_objects() -> None:
    alice = QuotaEntity(user="alice")
    image = _image(
        acl_record(READ_ORDERS),
        credential_record(ALICE),
        quota_record(alice, QuotaKey.PRODUCER_BYTE_RATE, 1000),
    )
    other = image.apply_batch(2, [Topic(name="t", topic_id="id-1")])
    assert other.acls is image.acls
    assert other.scram_credentials is image.scram_credentials
    assert other.client_quotas is image.client_quotas
    changed = other.apply_batch(3, [credential_record(ALICE_256)])
    assert changed.scram_credentials is not other.scram_credentials
    assert changed.acls is other.acls and changed.client_quotas is other.client_quotas
    # The base image saw nothing of it.
    assert set(other.scram_credentials["alice"]) == {ScramMechanism.SCRAM_SHA_512}


def test_a_failed_batch_changes_nothing() -> None:
    image = _image(acl_record(READ_ORDERS))
    with pytest.raises(MetadataRecordError):
        image.apply_batch(2, [remove_acl_record(READ_ORDERS), remove_acl_record(READ_ORDERS)])
    assert image.acls == frozenset({READ_ORDERS})


def test_snapshot_holds_the_security_parts() -> None:
    image = MetadataImage.empty().apply_batch(1, EVERY_SECURITY_TYPE)
    image = image.apply_batch(
        2,
        [
            credential_record(ALICE),
            quota_record(QuotaEntity(user="alice"), QuotaKey.CONSUMER_BYTE_RATE, 10),
            quota_record(QuotaEntity(client_id=None), QuotaKey.PRODUCER_BYTE_RATE, 10),
        ],
    )
    records = image.to_records()
    restored = MetadataImage.empty().apply_batch(image.offset, decode_batch(encode_batch(records)))
    assert restored.acls == image.acls
    assert restored.scram_credentials == image.scram_credentials
    assert restored.client_quotas == image.client_quotas
    assert restored.to_records() == records


def test_a_refused_credential_record_never_shows_its_bytes() -> None:
    record = credential_record(ALICE)
    short = UserScramCredential(
        name=record.name,
        mechanism=record.mechanism,
        salt=b"\xab" * 8,  # too short
        iterations=record.iterations,
        stored_key=record.stored_key,
        server_key=record.server_key,
    )
    with pytest.raises(MetadataRecordError) as caught:
        _image(short)
    assert "salt" in caught.value.message
    assert "\\xab" not in caught.value.message and "q6ur" not in caught.value.message

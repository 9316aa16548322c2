from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.errors import (
    MetadataRecordError,
    UnknownMetadataRecordTypeError,
    UnsupportedMetadataRecordVersionError,
)
from lograft.quorum.records import (
    RECORD_CLASSES,
    AccessControlEntry,
    BrokerAction,
    BrokerRegistrationChange,
    ClientQuota,
    Config,
    ConfigResourceType,
    Partition,
    PartitionChange,
    ProducerIds,
    QuotaEntityPart,
    QuotaEntityType,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveTopic,
    RemoveUserScramCredential,
    Topic,
    UnregisterBroker,
    UserScramCredential,
    decode_batch,
    encode_batch,
    endpoints_from,
    record_from_dict,
    record_to_dict,
)
from lograft.security.acls import AclOperation, AclPermission, PatternType, ResourceType
from lograft.security.passwords import ScramMechanism
from lograft.security.quotas import QuotaKey

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ids = st.integers(min_value=-1, max_value=10_000)
texts = st.text(max_size=40)
uuids = st.uuids().map(str)
replica_lists = st.lists(st.integers(min_value=0, max_value=1000), max_size=8).map(tuple)
endpoints = st.dictionaries(st.text(min_size=1, max_size=10), texts, max_size=4).map(endpoints_from)

RECORD_STRATEGIES = {
    RegisterBroker: st.builds(
        RegisterBroker, ids, uuids, ints, endpoints, st.none() | texts, st.booleans()
    ),
    BrokerRegistrationChange: st.builds(
        BrokerRegistrationChange, ids, ints, st.sampled_from(BrokerAction)
    ),
    UnregisterBroker: st.builds(UnregisterBroker, ids, ints),
    Topic: st.builds(Topic, texts, uuids),
    Partition: st.builds(Partition, uuids, ids, replica_lists, replica_lists, ids, ints, ints),
    PartitionChange: st.builds(
        PartitionChange,
        uuids,
        ids,
        st.none() | replica_lists,
        st.none() | ids,
        st.none() | replica_lists,
    ),
    RemoveTopic: st.builds(RemoveTopic, uuids),
    Config: st.builds(Config, st.sampled_from(ConfigResourceType), texts, texts, st.none() | texts),
    ProducerIds: st.builds(ProducerIds, ids, ints, ints),
    AccessControlEntry: st.builds(
        AccessControlEntry,
        st.sampled_from(ResourceType),
        texts,
        st.sampled_from(PatternType),
        texts,
        texts,
        st.sampled_from(AclOperation),
        st.sampled_from(AclPermission),
    ),
    RemoveAccessControlEntry: st.builds(
        RemoveAccessControlEntry,
        st.sampled_from(ResourceType),
        texts,
        st.sampled_from(PatternType),
        texts,
        texts,
        st.sampled_from(AclOperation),
        st.sampled_from(AclPermission),
    ),
    UserScramCredential: st.builds(
        UserScramCredential,
        texts,
        st.sampled_from(ScramMechanism),
        st.binary(max_size=64),
        ints,
        st.binary(max_size=64),
        st.binary(max_size=64),
    ),
    RemoveUserScramCredential: st.builds(
        RemoveUserScramCredential, texts, st.sampled_from(ScramMechanism)
    ),
    ClientQuota: st.builds(
        ClientQuota,
        st.lists(
            st.builds(
                QuotaEntityPart,
                entity_type=st.sampled_from(QuotaEntityType),
                entity_name=st.none() | texts,
            ),
            max_size=3,
        ).map(tuple),
        st.sampled_from(QuotaKey),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
    ),
}
any_record = st.one_of(*RECORD_STRATEGIES.values())


def test_every_record_type_has_a_strategy():
    assert set(RECORD_STRATEGIES) == set(RECORD_CLASSES)


@pytest.mark.parametrize("cls", RECORD_CLASSES, ids=lambda c: c.TYPE)
@given(data=st.data())
def test_record_round_trip(cls, data):
    record = data.draw(RECORD_STRATEGIES[cls])
    encoded = record_to_dict(record)
    assert encoded["type"] == cls.TYPE
    assert encoded["version"] == cls.VERSION
    # Every field is present, even the None ones.
    assert set(encoded) == {"type", *cls.__struct_fields__}
    decoded = record_from_dict(orjson.loads(orjson.dumps(encoded)))
    assert decoded == record
    assert type(decoded) is cls


@given(st.lists(any_record, max_size=20))
def test_batch_round_trip(records):
    assert decode_batch(encode_batch(records)) == records


def test_encoded_form_is_plain_json():
    record = RegisterBroker(7, "inc", 3, endpoints_from({"raft": "h:2", "http": "h:1"}), "r1")
    body = orjson.loads(encode_batch([record]))
    assert body == {
        "batch_version": 1,
        "records": [
            {
                "type": "RegisterBroker",
                "version": 1,
                "broker_id": 7,
                "incarnation_id": "inc",
                "broker_epoch": 3,
                "endpoints": {"http": "h:1", "raft": "h:2"},
                "rack": "r1",
                "fenced": True,
            }
        ],
    }


def _batch_of(*items: object) -> bytes:
    return orjson.dumps({"batch_version": 1, "records": list(items)})


def _valid_topic_dict() -> dict:
    return record_to_dict(Topic("t", "00000000-0000-0000-0000-000000000001"))


def test_unknown_type_is_a_clear_error():
    with pytest.raises(UnknownMetadataRecordTypeError, match="Nope"):
        decode_batch(_batch_of({"type": "Nope", "version": 1}))


def test_a_credential_record_never_shows_its_keys():
    record = UserScramCredential(
        "alice", ScramMechanism.SCRAM_SHA_256, b"salt" * 8, 4096, b"k" * 32, b"s" * 32
    )
    assert "kkkk" not in repr(record) and "sss" not in repr(record)
    assert "salt" not in repr(record).replace("UserScramCredential", "")


def test_bytes_travel_as_base64_and_bad_base64_is_refused():
    record = UserScramCredential(
        "alice", ScramMechanism.SCRAM_SHA_256, b"\x00" * 16, 4096, b"\x01" * 32, b"\x02" * 32
    )
    item = record_to_dict(record)
    assert item["salt"] == "AAAAAAAAAAAAAAAAAAAAAA=="
    item["salt"] = "not base64!"
    with pytest.raises(MetadataRecordError, match="salt"):
        decode_batch(_batch_of(item))


def test_quota_entity_parts_refuse_unknown_fields():
    record = ClientQuota(
        (QuotaEntityPart(entity_type=QuotaEntityType.USER, entity_name=None),),
        QuotaKey.PRODUCER_BYTE_RATE,
        1024.0,
    )
    item = orjson.loads(orjson.dumps(record_to_dict(record)))
    assert item["entity"] == [{"entity_type": "user", "entity_name": None}]
    item["entity"][0]["colour"] = "blue"
    with pytest.raises(MetadataRecordError, match="colour"):
        decode_batch(_batch_of(item))


@pytest.mark.parametrize("version", [0, 2, "1", None, True])
def test_unsupported_version_is_a_clear_error(version):
    item = {**_valid_topic_dict(), "version": version}
    with pytest.raises(UnsupportedMetadataRecordVersionError):
        decode_batch(_batch_of(item))


@pytest.mark.parametrize("batch_version", [0, 2, True])
def test_unsupported_batch_version(batch_version):
    data = orjson.dumps({"batch_version": batch_version, "records": []})
    with pytest.raises(UnsupportedMetadataRecordVersionError):
        decode_batch(data)


def test_missing_and_extra_fields_are_rejected():
    missing = _valid_topic_dict()
    del missing["topic_id"]
    extra = {**_valid_topic_dict(), "colour": "blue"}
    for item, message in ((missing, "missing required field `topic_id`"), (extra, "colour")):
        with pytest.raises(MetadataRecordError, match=message):
            decode_batch(_batch_of(item))


def test_a_defaulted_field_left_out_takes_its_default():
    # No encoder leaves one out; a reader that did would still get the record.
    item = record_to_dict(PartitionChange("t", 0, leader=1))
    del item["isr"]
    assert decode_batch(_batch_of(item)) == [PartitionChange("t", 0, leader=1)]


def test_old_key_order_decodes():
    # The codec before msgspec wrote "version" second; objects are unordered.
    data = b'{"batch_version":1,"records":[{"type":"Topic","version":1,"name":"t","topic_id":"x"}]}'
    assert decode_batch(data) == [Topic("t", "x")]


@pytest.mark.parametrize(
    ("field", "value"),
    [("broker_id", True), ("broker_id", "1"), ("broker_id", 1.0), ("fenced", 1), ("rack", 5)],
)
def test_field_types_are_checked(field, value):
    item = record_to_dict(RegisterBroker(1, "i", 1, endpoints_from({}), None))
    item[field] = value
    with pytest.raises(MetadataRecordError, match=field):
        decode_batch(_batch_of(item))


def test_enum_values_are_checked():
    item = record_to_dict(BrokerRegistrationChange(1, 1, BrokerAction.FENCE))
    item["action"] = "explode"
    with pytest.raises(MetadataRecordError, match="explode"):
        decode_batch(_batch_of(item))


@pytest.mark.parametrize(
    "data", [b"", b"not json", b"[]", b'{"records": []}', b'{"batch_version": 1, "records": {}}']
)
def test_malformed_batches(data):
    with pytest.raises(MetadataRecordError):
        decode_batch(data)


def test_empty_batch_round_trips():
    assert decode_batch(encode_batch([])) == []


def test_endpoints_are_canonical():
    a = endpoints_from({"raft": "h:2", "http": "h:1"})
    b = endpoints_from({"http": "h:1", "raft": "h:2"})
    assert a == b and hash(a) == hash(b) and list(a) == ["http", "raft"]
    with pytest.raises(TypeError, match="endpoints_from"):
        RegisterBroker(1, "i", 1, (("http", "h:1"),), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="strings"):
        endpoints_from({"http": 1})  # type: ignore[dict-item]


@pytest.mark.parametrize("value", [[], {"http": 1}, "x"])
def test_endpoints_are_checked_on_decode(value):
    item = record_to_dict(RegisterBroker(1, "i", 1, endpoints_from({}), None))
    item["endpoints"] = value
    with pytest.raises(MetadataRecordError, match="endpoints"):
        decode_batch(_batch_of(item))


def test_encoding_rejects_non_records_and_wrong_field_types():
    with pytest.raises(TypeError):
        encode_batch([object()])  # type: ignore[list-item]
    with pytest.raises(MetadataRecordError, match="replicas"):
        encode_batch([Partition("t", 0, [1, 2], (1,), 1, 0, 0)])  # type: ignore[arg-type]
    with pytest.raises(MetadataRecordError, match="leader"):
        encode_batch([Partition("t", 0, (1,), (1,), "1", 0, 0)])  # type: ignore[arg-type]
    with pytest.raises(UnsupportedMetadataRecordVersionError):
        encode_batch([Topic("t", "x", version=2)])  # type: ignore[arg-type]

"""`__consumer_offsets` records: byte layouts (Kafka's for keys and offset
commit values), round trips of every type, and strict decoding."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.brokers.groups.records import (
    CurrentMemberAssignmentKey,
    CurrentMemberAssignmentValue,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupPartitionMetadataKey,
    GroupPartitionMetadataValue,
    GroupRecord,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    TargetAssignmentMemberKey,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataKey,
    TargetAssignmentMetadataValue,
    decode_key,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
)
from lograft.errors import GroupRecordError
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.brokers.group_harness import tps


def _kstr(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_commit_key_is_kafkas_v1_layout() -> None:
    key = encode_key(OffsetCommitKey("grp", "orders", 7))
    assert key == b"\x00\x01" + _kstr("grp") + _kstr("orders") + b"\x00\x00\x00\x07"


def test_offset_commit_value_is_kafkas_v3_layout() -> None:
    value = encode_value(OffsetCommitValue(1234, 5, "meta", 1_700_000_000_000))
    assert value == (
        b"\x00\x03"
        + struct.pack(">q", 1234)
        + struct.pack(">i", 5)
        + _kstr("meta")
        + struct.pack(">q", 1_700_000_000_000)
    )


def test_group_keys_layout() -> None:
    assert encode_key(GroupMetadataKey("g")) == b"\x00\x03" + _kstr("g")
    assert encode_key(GroupPartitionMetadataKey("g")) == b"\x00\x04" + _kstr("g")
    assert encode_key(MemberMetadataKey("g", "m")) == b"\x00\x05" + _kstr("g") + _kstr("m")
    assert encode_key(TargetAssignmentMetadataKey("g")) == b"\x00\x06" + _kstr("g")
    assert encode_key(TargetAssignmentMemberKey("g", "m")) == b"\x00\x07" + _kstr("g") + _kstr("m")
    assert encode_key(CurrentMemberAssignmentKey("g", "m")) == b"\x00\x08" + _kstr("g") + _kstr("m")


def test_group_value_is_version_then_json() -> None:
    value = CurrentMemberAssignmentValue(
        4, 3, MemberState.UNREVOKED_PARTITIONS, tps("t", 2, 0), tps("u", 1)
    )
    data = encode_value(value)
    assert data[:2] == b"\x00\x01"
    assert orjson.loads(data[2:]) == {
        "member_epoch": 4,
        "previous_member_epoch": 3,
        "state": "unrevoked_partitions",
        "assigned": {"t": [0, 2]},
        "pending_revocation": {"u": [1]},
    }


# --- round trips -------------------------------------------------------------------------

names = st.text(min_size=1, max_size=12)
parts = st.frozensets(
    st.builds(TopicPartition, st.sampled_from(["a", "b", "ü"]), st.integers(0, 2**31 - 1)),
    max_size=8,
)


@st.composite
def current_values(draw: st.DrawFn) -> CurrentMemberAssignmentValue:
    epoch = draw(st.integers(0, 2**31))
    state = draw(st.sampled_from(list(MemberState)))
    assigned = draw(parts)
    pending = draw(parts) - assigned if state is MemberState.UNREVOKED_PARTITIONS else frozenset()
    return CurrentMemberAssignmentValue(
        epoch, draw(st.integers(-1, epoch)), state, assigned, pending
    )


records = st.one_of(
    st.builds(
        GroupRecord,
        st.builds(OffsetCommitKey, names, names, st.integers(0, 2**31 - 1)),
        st.none()
        | st.builds(
            OffsetCommitValue,
            st.integers(0, 2**63 - 1),
            st.integers(-1, 2**31 - 1),
            st.text(max_size=30),
            st.integers(0, 2**63 - 1),
        ),
    ),
    st.builds(
        GroupRecord,
        st.builds(GroupMetadataKey, names),
        st.none() | st.builds(GroupMetadataValue, st.integers(0, 2**31)),
    ),
    st.builds(
        GroupRecord,
        st.builds(GroupPartitionMetadataKey, names),
        st.none()
        | st.dictionaries(names, st.integers(1, 10_000)).map(GroupPartitionMetadataValue.of),
    ),
    st.builds(
        GroupRecord,
        st.builds(MemberMetadataKey, names, names),
        st.none()
        | st.builds(
            MemberMetadataValue,
            st.text(max_size=10),
            st.text(max_size=10),
            st.frozensets(names, max_size=5).map(lambda s: tuple(sorted(s))),
            st.none() | st.sampled_from(["range", "uniform"]),
            st.integers(1, 300_000),
        ),
    ),
    st.builds(
        GroupRecord,
        st.builds(TargetAssignmentMetadataKey, names),
        st.none() | st.builds(TargetAssignmentMetadataValue, st.integers(0, 2**31)),
    ),
    st.builds(
        GroupRecord,
        st.builds(TargetAssignmentMemberKey, names, names),
        st.none() | st.builds(TargetAssignmentMemberValue, parts),
    ),
    st.builds(
        GroupRecord,
        st.builds(CurrentMemberAssignmentKey, names, names),
        st.none() | current_values(),
    ),
)


@given(records)
def test_round_trip(record: GroupRecord) -> None:
    key, value = encode_record(record)
    assert (value is None) == (record.value is None)
    assert decode_record(key, value) == record
    # Equal records encode to equal bytes (compaction compares key bytes).
    assert encode_record(decode_record(key, value)) == (key, value)


# --- strict decoding ---------------------------------------------------------------------


def test_unknown_key_type() -> None:
    with pytest.raises(GroupRecordError, match="key type 2"):
        decode_key(b"\x00\x02" + _kstr("g"))


def test_trailing_key_bytes() -> None:
    with pytest.raises(GroupRecordError, match="trailing"):
        decode_key(encode_key(GroupMetadataKey("g")) + b"\x00")


def test_truncated_key() -> None:
    with pytest.raises(GroupRecordError, match="truncated"):
        decode_key(encode_key(MemberMetadataKey("g", "member"))[:-1])


def test_unknown_value_version() -> None:
    key = encode_key(GroupMetadataKey("g"))
    with pytest.raises(GroupRecordError, match="version 2"):
        decode_record(key, b"\x00\x02" + orjson.dumps({"epoch": 1}))
    okey = encode_key(OffsetCommitKey("g", "t", 0))
    old = bytearray(encode_value(OffsetCommitValue(1, -1, "", 0)))
    old[1] = 1
    with pytest.raises(GroupRecordError, match="version 1"):
        decode_record(okey, bytes(old))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"epoch": 1, "extra": 2},
        {"epoch": "1"},
        {"epoch": True},
        {"epoch": -1},
        [1],
    ],
)
def test_bad_group_metadata_bodies(body: object) -> None:
    key = encode_key(GroupMetadataKey("g"))
    with pytest.raises(GroupRecordError):
        decode_record(key, b"\x00\x01" + orjson.dumps(body))


def test_bad_json() -> None:
    with pytest.raises(GroupRecordError, match="JSON"):
        decode_record(encode_key(GroupMetadataKey("g")), b"\x00\x01{")


def test_bad_current_assignment_bodies() -> None:
    key = encode_key(CurrentMemberAssignmentKey("g", "m"))
    good = orjson.loads(
        encode_value(
            CurrentMemberAssignmentValue(1, 0, MemberState.STABLE, tps("t", 0), frozenset())
        )[2:]
    )
    for change in (
        {"state": "dancing"},
        {"assigned": {"t": [0, 0]}},
        {"assigned": {"t": [-1]}},
        {"assigned": {"t": 0}},
        # pending revocation outside UNREVOKED_PARTITIONS
        {"pending_revocation": {"t": [1]}},
        # a partition both assigned and pending
        {"state": "unrevoked_partitions", "pending_revocation": {"t": [0]}},
        {"previous_member_epoch": 5},
    ):
        with pytest.raises(GroupRecordError):
            decode_record(key, b"\x00\x01" + orjson.dumps({**good, **change}))


def test_key_and_value_types_must_match() -> None:
    with pytest.raises(GroupRecordError, match="takes"):
        GroupRecord(GroupMetadataKey("g"), TargetAssignmentMetadataValue(1))


def test_value_invariants() -> None:
    with pytest.raises(GroupRecordError):
        OffsetCommitValue(-1, -1, "", 0)
    with pytest.raises(GroupRecordError):
        MemberMetadataValue("", "", ("b", "a"), None, 1000)
    with pytest.raises(GroupRecordError):
        GroupPartitionMetadataValue((("t", 0),))


def test_strings_must_fit_an_int16_length() -> None:
    with pytest.raises(GroupRecordError, match="int16"):
        encode_key(GroupMetadataKey("x" * 40_000))

"""The `__consumer_offsets` records behind the golden fixture
(tests/fixtures/golden/group_records.json).

The fixture bytes were written by the hand-written encoder of
lograft/brokers/groups/records.py as of main eef0599, before group values
became msgspec Structs; the tests decode them with the current code and
compare with these values, so a codec change that stops reading an existing
__consumer_offsets segment fails here. Never regenerate the fixture with the
current codec.
"""

from __future__ import annotations

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
)
from tests.unit.brokers.group_harness import tps

RECORDS = [
    GroupRecord(
        OffsetCommitKey("grp-é", "orders", 7),
        OffsetCommitValue(1234, 5, "meta ✓", 1_700_000_000_000),
    ),
    GroupRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(0, -1, "", 0)),
    GroupRecord.tombstone(OffsetCommitKey("g", "t", 2**31 - 1)),
    GroupRecord(GroupMetadataKey("g"), GroupMetadataValue(0)),
    GroupRecord(GroupMetadataKey("g"), GroupMetadataValue(2**40)),
    GroupRecord.tombstone(GroupMetadataKey("g")),
    GroupRecord(
        GroupPartitionMetadataKey("g"),
        GroupPartitionMetadataValue.of({"zeta": 3, "alpha": 12, "mid.ü": 1}),
    ),
    GroupRecord(GroupPartitionMetadataKey("g"), GroupPartitionMetadataValue.of({})),
    GroupRecord(
        MemberMetadataKey("g", "m-1"),
        MemberMetadataValue("client-1", "10.0.0.1", ("alpha", "zeta"), "range", 45_000),
    ),
    GroupRecord(
        MemberMetadataKey("g", "m-2"),
        MemberMetadataValue("", "::1", (), None, 1),
    ),
    GroupRecord.tombstone(MemberMetadataKey("g", "m-2")),
    GroupRecord(TargetAssignmentMetadataKey("g"), TargetAssignmentMetadataValue(17)),
    GroupRecord(
        TargetAssignmentMemberKey("g", "m-1"),
        TargetAssignmentMemberValue(tps("zeta", 2, 0, 1) | tps("alpha", 11)),
    ),
    GroupRecord(TargetAssignmentMemberKey("g", "m-2"), TargetAssignmentMemberValue(frozenset())),
    GroupRecord(
        CurrentMemberAssignmentKey("g", "m-1"),
        CurrentMemberAssignmentValue(
            4, 3, MemberState.UNREVOKED_PARTITIONS, tps("t", 2, 0), tps("u", 1) | tps("t", 5)
        ),
    ),
    GroupRecord(
        CurrentMemberAssignmentKey("g", "m-2"),
        CurrentMemberAssignmentValue(0, -1, MemberState.STABLE, frozenset(), frozenset()),
    ),
    GroupRecord(
        CurrentMemberAssignmentKey("g", "m-3"),
        CurrentMemberAssignmentValue(
            9, 9, MemberState.UNRELEASED_PARTITIONS, tps("a", 0), frozenset()
        ),
    ),
    GroupRecord.tombstone(CurrentMemberAssignmentKey("g", "m-3")),
]

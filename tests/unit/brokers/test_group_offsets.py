"""Offset commits fenced by member epoch, non-member ("simple") commits, limits,
fetch, expiry, and the `auto_offset_reset` decision."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.offsets import (
    AutoOffsetReset,
    CommittedOffset,
    OffsetAndMetadata,
    expire_offsets,
    fetch_offsets,
    resolve_start_offset,
)
from lograft.errors import (
    FencedMemberEpochError,
    GroupsLimitReachedError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidTopicError,
    NoOffsetError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from tests.unit.brokers.group_harness import Coordinator, tp, tps


def _group_with_member() -> tuple[Coordinator, int]:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",))
    return c, a.member_epoch


def test_member_commits_with_its_epoch() -> None:
    c, epoch = _group_with_member()
    committed = c.commit("g", "a", epoch, {tp("t", 0): OffsetAndMetadata(10, "m", 3)}, 1_234)
    assert committed == {tp("t", 0): OffsetAndMetadata(10, "m", 3)}
    assert fetch_offsets(c.state, "g", [tp("t", 0), tp("t", 1)]) == {
        tp("t", 0): CommittedOffset(10, "m", 3, 1_234),
        tp("t", 1): None,
    }


def test_zombie_with_a_stale_epoch_is_refused() -> None:
    c, epoch = _group_with_member()
    c.join("g", "b", ("t",))  # epoch 2 target
    a = c.heartbeat("g", "a", epoch, owned=tps("t", 0, 1))
    a = c.heartbeat("g", "a", a.member_epoch, owned=a.assignment)
    assert a.member_epoch == 2
    n = len(c.log)
    with pytest.raises(StaleMemberEpochError):
        c.commit("g", "a", 1, {tp("t", 0): 5})
    with pytest.raises(FencedMemberEpochError):
        c.commit("g", "a", 3, {tp("t", 0): 5})
    assert len(c.log) == n
    c.commit("g", "a", 2, {tp("t", 0): 5})


def test_unknown_or_removed_member_is_refused() -> None:
    c, epoch = _group_with_member()
    with pytest.raises(UnknownMemberIdError):
        c.commit("g", "nobody", epoch, {tp("t", 0): 1})
    c.join("g", "b", ("t",))
    c.leave("g", "a")
    # a left: its commits are refused now, while b is a member.
    with pytest.raises(UnknownMemberIdError):
        c.commit("g", "a", epoch, {tp("t", 0): 1})


def test_non_member_commit_only_while_the_group_has_no_members() -> None:
    c, _ = _group_with_member()
    with pytest.raises(UnknownMemberIdError):
        c.commit("g", "", -1, {tp("t", 0): 7})
    c.leave("g", "a")
    c.commit("g", "", -1, {tp("t", 0): 7})
    # And for a group that does not exist yet: it is created.
    c.commit("simple", "", -1, {tp("t", 1): 3})
    assert fetch_offsets(c.state, "simple") == {tp("t", 1): CommittedOffset(3, "", -1, 0)}
    # A non-empty member id on a member-less group is an unknown member.
    with pytest.raises(UnknownMemberIdError):
        c.commit("simple", "ghost", 1, {tp("t", 1): 4})


def test_metadata_size_limit_in_utf8_bytes() -> None:
    c = Coordinator()
    c.commit("g", "", -1, {tp("t", 0): OffsetAndMetadata(1, "x" * 4096)})
    with pytest.raises(OffsetMetadataTooLargeError):
        c.commit("g", "", -1, {tp("t", 0): OffsetAndMetadata(1, "x" * 4097)})
    # 2 bytes per character in UTF-8.
    with pytest.raises(OffsetMetadataTooLargeError):
        c.commit("g", "", -1, {tp("t", 0): OffsetAndMetadata(1, "é" * 2049)})


def test_commit_is_atomic() -> None:
    c = Coordinator()
    n = len(c.log)
    with pytest.raises(InvalidRequestError):
        c.commit("g", "", -1, {tp("t", 0): 1, tp("t", 1): -1})
    with pytest.raises(InvalidTopicError):
        c.commit("g", "", -1, {tp("t", 0): 1, tp("", 1): 1})
    with pytest.raises(InvalidRequestError):
        c.commit("g", "", -1, {tp("t", -1): 1})
    with pytest.raises(InvalidRequestError):
        c.commit("g", "", -1, {tp("t", 0): OffsetAndMetadata(1, "", -2)})
    with pytest.raises(InvalidGroupIdError):
        c.commit("", "", -1, {tp("t", 0): 1})
    assert len(c.log) == n and c.state.group("g") is None


def test_commit_limits() -> None:
    c = Coordinator(
        GroupCoordinatorConfig(
            offset_commit_partitions_max=3, group_committed_partitions_max=4, groups_max=1
        )
    )
    with pytest.raises(InvalidRequestError, match="one commit"):
        c.commit("g", "", -1, {tp("t", p): 1 for p in range(4)})
    c.commit("g", "", -1, {tp("t", p): 1 for p in range(3)})
    c.commit("g", "", -1, {tp("t", 0): 2, tp("t", 3): 1})  # 4 partitions: at the limit
    with pytest.raises(InvalidRequestError, match="more than 4"):
        c.commit("g", "", -1, {tp("t", 4): 1})
    with pytest.raises(GroupsLimitReachedError):
        c.commit("other", "", -1, {tp("t", 0): 1})


def test_fetch_all_and_unknown_group() -> None:
    c = Coordinator()
    c.commit("g", "", -1, {tp("t", 0): 1, tp("u", 2): 5}, 9)
    assert fetch_offsets(c.state, "g") == {
        tp("t", 0): CommittedOffset(1, "", -1, 9),
        tp("u", 2): CommittedOffset(5, "", -1, 9),
    }
    assert fetch_offsets(c.state, "nope") == {}
    assert fetch_offsets(c.state, "nope", [tp("t", 0)]) == {tp("t", 0): None}


def test_expire_offsets_of_member_less_groups() -> None:
    config = GroupCoordinatorConfig(offsets_retention_ms=1_000)
    c = Coordinator(config, {"t": 2})
    c.commit("old", "", -1, {tp("t", 0): 1}, commit_time_ms=0)
    c.commit("mixed", "", -1, {tp("t", 0): 1}, commit_time_ms=0)
    c.commit("mixed", "", -1, {tp("t", 1): 1}, commit_time_ms=5_000)
    a = c.join("active", "a", ("t",))
    c.commit("active", "a", a.member_epoch, {tp("t", 0): 1}, commit_time_ms=0)
    result = expire_offsets(c.state, 5_500, config)
    assert result.response == {"old": [tp("t", 0)], "mixed": [tp("t", 0)]}
    c.apply("", result)
    assert c.state.group("old") is None  # nothing left: deleted
    assert fetch_offsets(c.state, "mixed") == {tp("t", 1): CommittedOffset(1, "", -1, 5_000)}
    assert fetch_offsets(c.state, "active") == {tp("t", 0): CommittedOffset(1, "", -1, 0)}
    # A group whose members all left and that committed nothing is deleted too.
    c.leave("active", "a")
    c.apply("", expire_offsets(c.state, 10_000, config))
    assert set(c.state.groups) == set()


# --- auto_offset_reset -----------------------------------------------------------------


def test_resolve_start_offset_table() -> None:
    E, L, N = AutoOffsetReset.EARLIEST, AutoOffsetReset.LATEST, AutoOffsetReset.NONE
    assert resolve_start_offset(15, 10, 20, N) == 15
    assert resolve_start_offset(10, 10, 20, N) == 10
    assert resolve_start_offset(20, 10, 20, N) == 20  # at the HW: wait for new data
    assert resolve_start_offset(None, 10, 20, E) == 10
    assert resolve_start_offset(None, 10, 20, L) == 20
    assert resolve_start_offset(5, 10, 20, E) == 10  # retention deleted it
    assert resolve_start_offset(5, 10, 20, L) == 20
    assert resolve_start_offset(25, 10, 20, E) == 10  # beyond the end (truncation)
    assert resolve_start_offset(25, 10, 20, L) == 20
    with pytest.raises(NoOffsetError):
        resolve_start_offset(None, 10, 20, N)
    with pytest.raises(OffsetOutOfRangeError) as info:
        resolve_start_offset(5, 10, 20, N)
    assert info.value.details == {"offset": 5, "log_start_offset": 10, "high_watermark": 20}
    with pytest.raises(ValueError):
        resolve_start_offset(None, 21, 20, E)


@given(
    st.none() | st.integers(0, 100),
    st.integers(0, 50),
    st.integers(0, 50),
    st.sampled_from(list(AutoOffsetReset)),
)
def test_resolve_start_offset_is_in_range_or_an_error(
    committed: int | None, a: int, b: int, reset: AutoOffsetReset
) -> None:
    start, hw = min(a, b), max(a, b)
    in_range = committed is not None and start <= committed <= hw
    try:
        offset = resolve_start_offset(committed, start, hw, reset)
    except (NoOffsetError, OffsetOutOfRangeError) as e:
        assert reset is AutoOffsetReset.NONE and not in_range
        assert isinstance(e, NoOffsetError) == (committed is None)
        return
    assert start <= offset <= hw
    if in_range:
        assert offset == committed
    else:
        assert offset == (start if reset is AutoOffsetReset.EARLIEST else hw)

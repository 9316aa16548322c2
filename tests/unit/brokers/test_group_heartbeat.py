"""Membership: join, heartbeat, leave, session and revocation timeouts, epochs
and fencing, metadata changes, assignor choice, limits and validation."""

from __future__ import annotations

import pytest

from lograft.brokers.groups.config import GroupCoordinatorConfig
from lograft.brokers.groups.heartbeat import HeartbeatRequest, heartbeat
from lograft.brokers.groups.records import MemberState
from lograft.brokers.groups.sessions import GroupSessions, MemberSession
from lograft.brokers.groups.state import GroupState
from lograft.errors import (
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    GroupsLimitReachedError,
    GroupSubscriptionTooLargeError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidTopicError,
    OutOfOrderHeartbeatError,
    UnknownMemberIdError,
    UnsupportedAssignorError,
)
from tests.unit.brokers.group_harness import Coordinator, tp, tps


def _stable_pair(c: Coordinator, topic: str = "t") -> tuple[int, int]:
    """Members a and b joined and reconciled; returns their epochs."""
    a = c.join("g", "a", (topic,))
    b = c.join("g", "b", (topic,))
    a = c.heartbeat("g", "a", a.member_epoch, owned=a.assignment)  # revokes
    a = c.heartbeat("g", "a", a.member_epoch, owned=a.assignment)  # acknowledges
    b = c.heartbeat("g", "b", b.member_epoch, owned=b.assignment)  # picks up
    group = c.state.group("g")
    assert group is not None and group.state() is GroupState.STABLE
    return a.member_epoch, b.member_epoch


def test_first_member_gets_everything_at_epoch_one() -> None:
    c = Coordinator(topics={"t": 3})
    r = c.join("g", "a", ("t",))
    assert r.member_epoch == 1
    assert r.assignment == tps("t", 0, 1, 2)
    assert r.heartbeat_interval_ms == 1_000
    group = c.state.group("g")
    assert group is not None
    assert group.state() is GroupState.STABLE
    assert group.group_epoch == group.assignment_epoch == 1
    assert c.sessions["g"].get("a") == MemberSession(10_000)


def test_second_member_waits_for_the_first_to_revoke() -> None:
    c = Coordinator(topics={"t": 4})
    a = c.join("g", "a", ("t",))
    b = c.join("g", "b", ("t",))
    assert b.member_epoch == 2 and b.assignment == frozenset()
    group = c.state.group("g")
    assert group is not None and group.state() is GroupState.RECONCILING
    assert group.current_of("b").state is MemberState.UNRELEASED_PARTITIONS

    a2 = c.heartbeat("g", "a", a.member_epoch, owned=a.assignment)
    assert a2.member_epoch == 1  # unchanged until the revocation is acknowledged
    assert len(a2.assignment) == 2
    assert group.current_of("a").state is MemberState.UNREVOKED_PARTITIONS
    # b still gets nothing: a has not said it gave the partitions up.
    assert c.heartbeat("g", "b", 2, owned=frozenset()).assignment == frozenset()

    a3 = c.heartbeat("g", "a", 1, owned=a2.assignment)
    assert a3.member_epoch == 2
    b3 = c.heartbeat("g", "b", 2, owned=frozenset())
    assert b3.assignment == tps("t", 0, 1, 2, 3) - a3.assignment
    assert group.state() is GroupState.STABLE


def test_leave_releases_partitions_at_once() -> None:
    c = Coordinator(topics={"t": 4})
    _, eb = _stable_pair(c)
    r = c.leave("g", "a")
    assert r.member_epoch == -1
    group = c.state.group("g")
    assert group is not None
    assert set(group.members) == {"b"}
    assert group.state() is GroupState.ASSIGNING  # target recomputed on next heartbeat
    assert "a" not in c.sessions["g"].members
    b = c.heartbeat("g", "b", eb, owned=group.current_of("b").assigned)
    assert b.assignment == tps("t", 0, 1, 2, 3)
    assert group.state() is GroupState.STABLE


def test_leave_is_idempotent() -> None:
    c = Coordinator(topics={"t": 1})
    c.join("g", "a", ("t",))
    c.leave("g", "a")
    log_length = len(c.log)
    assert c.leave("g", "a").member_epoch == -1
    assert c.leave("nope", "x").member_epoch == -1
    assert len(c.log) == log_length


def test_expired_member_is_removed_and_its_partitions_move() -> None:
    c = Coordinator(topics={"t": 4})
    _stable_pair(c)
    group = c.state.group("g")
    assert group is not None
    # b keeps heartbeating, a goes silent.
    eb = group.current_of("b").member_epoch
    c.heartbeat("g", "b", eb, 9_000, owned=group.current_of("b").assigned)
    assert c.expire("g", 10_000) == ()  # exactly at the deadline: still alive
    assert c.expire("g", 10_001) == ("a",)
    assert set(group.members) == {"b"}
    b = c.heartbeat("g", "b", eb, 10_002, owned=group.current_of("b").assigned)
    assert b.assignment == tps("t", 0, 1, 2, 3)
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("g", "a", 2, 10_003, owned=frozenset())


def test_member_that_never_revokes_is_removed_after_its_rebalance_timeout() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",), rebalance_timeout_ms=5_000)
    c.join("g", "b", ("t",))
    c.heartbeat("g", "a", a.member_epoch, 1_000, owned=a.assignment)
    assert c.sessions["g"].get("a") == MemberSession(11_000, 6_000)
    # Heartbeats keep the session alive but do not restart the revocation clock.
    for now in (3_000, 5_000, 6_000):
        c.heartbeat("g", "a", a.member_epoch, now, owned=a.assignment)
        c.heartbeat("g", "b", 2, now, owned=frozenset())
    assert c.sessions["g"].get("a") == MemberSession(16_000, 6_000)
    assert c.expire("g", 6_000) == ()
    assert c.expire("g", 6_001) == ("a",)


def test_acknowledged_revocation_clears_the_revocation_clock() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",))
    c.join("g", "b", ("t",))
    a2 = c.heartbeat("g", "a", 1, 1_000, owned=a.assignment)
    assert c.sessions["g"].get("a").revocation_deadline_ms == 61_000  # type: ignore[union-attr]
    c.heartbeat("g", "a", 1, 2_000, owned=a2.assignment)
    assert c.sessions["g"].get("a") == MemberSession(12_000)


def test_rejoin_with_the_same_member_id_releases_what_it_held() -> None:
    c = Coordinator(topics={"t": 4})
    _stable_pair(c)
    group = c.state.group("g")
    assert group is not None
    # a restarts: it holds nothing now. Its target is unchanged, so it gets
    # its partitions back at once, at the current epoch.
    before = group.current_of("a").assigned
    r = c.join("g", "a", ("t",))
    assert r.assignment == before
    assert group.group_epoch == 2  # same subscription: no rebalance


def test_rejoin_drops_partitions_pending_revocation() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",))
    c.join("g", "b", ("t",))
    c.heartbeat("g", "a", 1, owned=a.assignment)
    group = c.state.group("g")
    assert group is not None
    pending = group.current_of("a").pending_revocation
    assert len(pending) == 1
    c.join("g", "a", ("t",))  # restarted: holds nothing
    assert group.current_of("a").pending_revocation == frozenset()
    assert c.heartbeat("g", "b", 2, owned=frozenset()).assignment == pending


def test_epoch_fencing() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",))
    with pytest.raises(FencedMemberEpochError):
        c.heartbeat("g", "a", 2, owned=a.assignment)
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("g", "zzz", 1, owned=frozenset())
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("nogroup", "a", 1, owned=frozenset())


def test_previous_epoch_accepted_only_when_owning_a_subset() -> None:
    c = Coordinator(topics={"t": 1})
    c.join("g", "a", ("t",))
    c.topics["t"] = 2
    # The response that moved a to epoch 2 is "lost".
    r = c.heartbeat("g", "a", 1, owned=tps("t", 0))
    assert r.member_epoch == 2 and r.assignment == tps("t", 0, 1)
    # Epoch 1 again, owning what it had at epoch 1: accepted.
    assert c.heartbeat("g", "a", 1, owned=tps("t", 0)).member_epoch == 2
    # Owning something not assigned, or not reporting: fenced.
    with pytest.raises(FencedMemberEpochError):
        c.heartbeat("g", "a", 1, owned=tps("t", 0, 5))
    with pytest.raises(FencedMemberEpochError):
        c.heartbeat("g", "a", 1, owned=None)
    # An epoch older than the previous one: fenced.
    c.topics["t"] = 3
    c.heartbeat("g", "a", 2, owned=tps("t", 0, 1))
    with pytest.raises(FencedMemberEpochError):
        c.heartbeat("g", "a", 1, owned=tps("t", 0))


def test_partition_count_change_recomputes_the_target() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",))
    assert a.assignment == tps("t", 0, 1)
    c.topics["t"] = 3
    r = c.heartbeat("g", "a", 1, owned=a.assignment)
    assert r.member_epoch == 2 and r.assignment == tps("t", 0, 1, 2)
    group = c.state.group("g")
    assert group is not None and dict(group.partition_counts) == {"t": 3}


def test_topic_created_after_subscribing() -> None:
    c = Coordinator(topics={})
    a = c.join("g", "a", ("later",))
    assert a.assignment == frozenset()
    c.topics["later"] = 2
    assert c.heartbeat("g", "a", 1, owned=frozenset()).assignment == tps("later", 0, 1)


def test_subscription_change() -> None:
    c = Coordinator(topics={"t": 1, "u": 1})
    a = c.join("g", "a", ("t",))
    r = c.heartbeat("g", "a", 1, owned=a.assignment, subscribed_topics=("u",))
    # t-0 must be given up first.
    group = c.state.group("g")
    assert group is not None
    assert group.current_of("a").pending_revocation == tps("t", 0)
    r = c.heartbeat("g", "a", r.member_epoch, owned=frozenset())
    assert r.assignment == tps("u", 0) and r.member_epoch == 2
    assert group.subscribed_topics() == frozenset({"u"})


def test_unchanged_heartbeat_writes_nothing() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",))
    n = len(c.log)
    for now in range(1_000, 5_000, 1_000):
        c.heartbeat("g", "a", 1, now, owned=a.assignment)
    assert len(c.log) == n


def test_group_assignor_is_the_most_requested() -> None:
    c = Coordinator(topics={"t": 4, "u": 4})
    c.join("g", "a", ("t", "u"), assignor="range")
    c.join("g", "b", ("t", "u"), assignor="range")
    group = c.state.group("g")
    assert group is not None
    # Range: a gets t-0,1 and u-0,1.
    assert group.target_of("a") == tps("t", 0, 1) | tps("u", 0, 1)
    c.join("g", "c", ("t", "u"), assignor="uniform")
    c.join("g", "d", ("t", "u"), assignor="uniform")
    c.join("g", "e", ("t", "u"), assignor="uniform")
    # Uniform wins 3-2; with 8 partitions and 5 members: sizes 2,2,2,1,1.
    sizes = sorted(len(group.target_of(m)) for m in "abcde")
    assert sizes == [1, 1, 2, 2, 2]


def test_range_assignor_targets() -> None:
    c = Coordinator(topics={"t": 3})
    c.join("g", "a", ("t",), assignor="range")
    c.join("g", "b", ("t",), assignor="range")
    group = c.state.group("g")
    assert group is not None
    assert group.target_of("a") == tps("t", 0, 1)
    assert group.target_of("b") == tps("t", 2)


# --- limits and validation ---------------------------------------------------------------


def test_group_max_size() -> None:
    c = Coordinator(GroupCoordinatorConfig(group_max_size=2), {"t": 1})
    c.join("g", "a", ("t",))
    c.join("g", "b", ("t",))
    with pytest.raises(GroupMaxSizeReachedError):
        c.join("g", "c", ("t",))
    c.join("g", "a", ("t",))  # a known member may rejoin


def test_groups_max() -> None:
    c = Coordinator(GroupCoordinatorConfig(groups_max=1), {"t": 1})
    c.join("g1", "a", ("t",))
    with pytest.raises(GroupsLimitReachedError):
        c.join("g2", "a", ("t",))


def test_subscription_too_large_is_refused() -> None:
    c = Coordinator(GroupCoordinatorConfig(group_assigned_partitions_max=5), {"t": 3, "u": 3})
    c.join("g", "a", ("t",))
    with pytest.raises(GroupSubscriptionTooLargeError):
        c.join("g", "b", ("u",))
    c2 = Coordinator(GroupCoordinatorConfig(subscribed_topics_max=2), {})
    with pytest.raises(GroupSubscriptionTooLargeError):
        c2.join("g", "a", ("x", "y", "z"))


def test_growth_past_the_partition_limit_is_clamped() -> None:
    c = Coordinator(GroupCoordinatorConfig(group_assigned_partitions_max=4), {"t": 2, "u": 2})
    a = c.join("g", "a", ("t", "u"))
    c.topics["t"] = 3
    r = c.heartbeat("g", "a", a.member_epoch, owned=a.assignment)
    # Topics in name order fill the limit: t-0..2, then u-0; u-1 is left out
    # and must be given up before t-2 is handed out.
    assert r.assignment == tps("t", 0, 1) | {tp("u", 0)}
    r = c.heartbeat("g", "a", r.member_epoch, owned=r.assignment)
    assert r.assignment == tps("t", 0, 1, 2) | {tp("u", 0)}
    group = c.state.group("g")
    assert group is not None and dict(group.partition_counts) == {"t": 3, "u": 1}


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (HeartbeatRequest("", "a", 0, ("t",)), InvalidGroupIdError),
        (HeartbeatRequest("g" * 256, "a", 0, ("t",)), InvalidGroupIdError),
        (HeartbeatRequest("g", "", 0, ("t",)), InvalidRequestError),
        (HeartbeatRequest("g", "a" * 256, 0, ("t",)), InvalidRequestError),
        (HeartbeatRequest("g", "a", -2, ("t",)), InvalidRequestError),
        (HeartbeatRequest("g", "a", 0, None), InvalidRequestError),
        (HeartbeatRequest("g", "a", 0, ("t",), owned_partitions=tps("t", 0)), InvalidRequestError),
        (HeartbeatRequest("g", "a", 0, ("",)), InvalidTopicError),
        (HeartbeatRequest("g", "a", 0, ("x" * 250,)), InvalidTopicError),
        (HeartbeatRequest("g", "a", 0, ("t",), assignor="sticky"), UnsupportedAssignorError),
        (HeartbeatRequest("g", "a", 0, ("t",), rebalance_timeout_ms=0), InvalidRequestError),
        (
            HeartbeatRequest("g", "a", 0, ("t",), rebalance_timeout_ms=300_001),
            InvalidRequestError,
        ),
        (HeartbeatRequest("g", "a", 0, ("t",), client_id="c" * 256), InvalidRequestError),
        (HeartbeatRequest("g", "a", 0, ("t",), sequence=-1), InvalidRequestError),
        (HeartbeatRequest("g\ud800", "a", 0, ("t",)), InvalidGroupIdError),
    ],
)
def test_invalid_requests_write_nothing(request_: HeartbeatRequest, error: type) -> None:
    c = Coordinator(topics={"t": 1})
    with pytest.raises(error):
        heartbeat(c.state, GroupSessions(), request_, c.topics, 0, c.config)


# --- sequence numbers and sessions -------------------------------------------------------


def test_sequence_must_increase() -> None:
    c = Coordinator(topics={"t": 1})
    a = c.heartbeat("g", "a", 0, subscribed_topics=("t",), sequence=5)
    with pytest.raises(OutOfOrderHeartbeatError):
        c.heartbeat("g", "a", a.member_epoch, owned=a.assignment, sequence=5)
    c.heartbeat("g", "a", a.member_epoch, owned=a.assignment, sequence=6)
    # A request without a sequence is accepted and keeps the last one.
    c.heartbeat("g", "a", a.member_epoch, owned=a.assignment)
    assert c.sessions["g"].get("a").last_sequence == 6  # type: ignore[union-attr]
    with pytest.raises(OutOfOrderHeartbeatError):
        c.heartbeat("g", "a", -1, sequence=4)  # a stale leave too
    c.failover(now_ms=0)
    # A new coordinator accepts the first sequence it sees.
    c.heartbeat("g", "a", a.member_epoch, owned=a.assignment, sequence=1)


def test_failover_gives_every_member_a_fresh_session() -> None:
    c = Coordinator(topics={"t": 2})
    a = c.join("g", "a", ("t",), now_ms=0)
    c.join("g", "b", ("t",), now_ms=0)
    c.heartbeat("g", "a", a.member_epoch, 0, owned=a.assignment)  # a now revoking
    c.failover(now_ms=50_000, compacted=True)
    assert c.sessions["g"].get("a") == MemberSession(60_000, 110_000)
    assert c.sessions["g"].get("b") == MemberSession(60_000)
    assert c.expire("g", 59_999) == ()
    assert set(c.expire("g", 60_001)) == {"a", "b"}


def test_expire_gives_a_session_to_a_member_without_one() -> None:
    c = Coordinator(topics={"t": 1})
    c.join("g", "a", ("t",))
    c.sessions["g"] = GroupSessions()
    assert c.expire("g", 100_000) == ()
    assert c.sessions["g"].get("a") == MemberSession(110_000)
    assert c.sessions["g"].next_deadline_ms() == 110_000


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (
            {"group_heartbeat_interval_ms": 10_000, "session_timeout_ms": 10_000},
            "group_heartbeat_interval_ms",
        ),
        ({"assignor_default": "sticky"}, "assignor_default"),
        ({"group_max_size": 0}, "group_max_size"),
        ({"rebalance_timeout_ms": 400_000}, "rebalance_timeout_ms"),
        ({"group_id_bytes_max": 32_768}, "group_id_bytes_max"),
        ({"offset_metadata_bytes_max": -1}, "offset_metadata_bytes_max"),
    ],
)
def test_config_validation(raw: dict[str, object], key: str) -> None:
    from lograft.errors import InvalidConfigError
    from lograft.typed import build

    with pytest.raises(InvalidConfigError) as caught:
        build(raw, GroupCoordinatorConfig, error=InvalidConfigError, detail="key")
    assert caught.value.details["key"] == key

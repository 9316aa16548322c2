"""Assignors: range against Kafka's RangeAssignor examples and its contiguity
rule; uniform for validity, balance, and minimal movement against a model of
the fewest moves any balanced assignment needs.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.brokers.groups.assignors import (
    assignor_for,
    check_assignment,
    range_assign,
    uniform_assign,
)
from lograft.brokers.groups.records import Partitions
from lograft.errors import UnsupportedAssignorError
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.brokers.group_harness import tps

TOPICS = ("t0", "t1", "t2")

subscriptions_st = st.dictionaries(
    st.sampled_from([f"m{i:02d}" for i in range(12)]),
    st.frozensets(st.sampled_from(TOPICS), min_size=1),
    max_size=10,
)
counts_st = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 24))


def _moves(before: Mapping[str, Partitions], after: Mapping[str, Partitions]) -> int:
    """Partitions whose owner changed (including ones that had none)."""
    owner_before = {tp: m for m, parts in before.items() for tp in parts}
    return sum(1 for m, parts in after.items() for tp in parts if owner_before.get(tp) != m)


# --- range -------------------------------------------------------------------------------


def test_range_two_consumers_three_partitions() -> None:
    # Kafka RangeAssignorTest.testTwoConsumersOneTopicThreePartitions
    out = range_assign({"consumer1": frozenset({"t"}), "consumer2": frozenset({"t"})}, {"t": 3})
    assert out == {"consumer1": tps("t", 0, 1), "consumer2": tps("t", 2)}


def test_range_multiple_consumers_mixed_topics() -> None:
    # Kafka RangeAssignorTest.testMultipleConsumersMixedTopics
    out = range_assign(
        {
            "consumer1": frozenset({"topic1"}),
            "consumer2": frozenset({"topic1", "topic2"}),
            "consumer3": frozenset({"topic1"}),
        },
        {"topic1": 3, "topic2": 2},
    )
    assert out == {
        "consumer1": tps("topic1", 0),
        "consumer2": tps("topic1", 1) | tps("topic2", 0, 1),
        "consumer3": tps("topic1", 2),
    }


def test_range_more_consumers_than_partitions_and_missing_topic() -> None:
    out = range_assign(
        {"a": frozenset({"t", "gone"}), "b": frozenset({"t"}), "c": frozenset({"t"})}, {"t": 2}
    )
    assert out == {"a": tps("t", 0), "b": tps("t", 1), "c": frozenset()}


@given(subscriptions_st, counts_st)
def test_range_gives_contiguous_ranges_in_member_order(
    subscriptions: dict[str, frozenset[str]], counts: dict[str, int]
) -> None:
    out = range_assign(subscriptions, counts)
    check_assignment(subscriptions, counts, out)
    for topic, n in counts.items():
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members or n == 0:
            continue
        ranges = [sorted(tp.partition for tp in out[m] if tp.topic == topic) for m in members]
        # Concatenated in member order they are exactly 0..n-1, and the sizes
        # are non-increasing and differ by at most one.
        assert [p for r in ranges for p in r] == list(range(n))
        sizes = [len(r) for r in ranges]
        assert sizes == sorted(sizes, reverse=True)
        assert max(sizes) - min(sizes) <= 1


# --- uniform -----------------------------------------------------------------------------


@given(subscriptions_st, counts_st, st.data())
def test_uniform_valid_and_locally_balanced(
    subscriptions: dict[str, frozenset[str]], counts: dict[str, int], data: st.DataObject
) -> None:
    # Any previous assignment, even a nonsensical one, must be tolerated.
    previous = data.draw(
        st.dictionaries(
            st.sampled_from([f"m{i:02d}" for i in range(12)]),
            st.frozensets(
                st.builds(TopicPartition, st.sampled_from(TOPICS), st.integers(0, 30)),
                max_size=12,
            ),
        )
    )
    out = uniform_assign(subscriptions, counts, previous)
    check_assignment(subscriptions, counts, out)
    # No member can take a partition from a member holding two or more more.
    for giver, parts in out.items():
        for taker, topics in subscriptions.items():
            if any(tp.topic in topics for tp in parts):
                assert len(parts) - len(out[taker]) <= 1, (giver, taker)


@given(
    st.lists(st.sampled_from([f"m{i:02d}" for i in range(12)]), min_size=1, unique=True),
    counts_st,
)
def test_uniform_same_subscriptions_within_one(members: list[str], counts: dict[str, int]) -> None:
    subscriptions = {m: frozenset(TOPICS) for m in members}
    out = uniform_assign(subscriptions, counts, {})
    sizes = [len(p) for p in out.values()]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == sum(counts.values())


def _min_moves(previous: Mapping[str, Partitions], members: list[str], total: int) -> int:
    """Model: the fewest moves of any balanced assignment of `total` partitions
    to `members` (same subscriptions), given what each member held before.

    Each member ends with floor or ceil of total/len; it keeps at most
    min(held, its share), so the ceil shares go to the largest holders.
    """
    floor, extra = divmod(total, len(members))
    held = sorted((len(previous.get(m, ())) for m in members), reverse=True)
    kept = sum(min(h, floor + (1 if i < extra else 0)) for i, h in enumerate(held))
    return total - kept


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from([f"m{i:02d}" for i in range(12)]), min_size=1, unique=True),
    st.lists(st.sampled_from([f"m{i:02d}" for i in range(12)]), min_size=1, unique=True),
    st.integers(0, 40),
    st.integers(0, 40),
)
def test_uniform_moves_the_fewest_partitions_on_membership_change(
    before: list[str], after: list[str], partitions_before: int, partitions_after: int
) -> None:
    subs_before = {m: frozenset({"t"}) for m in before}
    subs_after = {m: frozenset({"t"}) for m in after}
    first = uniform_assign(subs_before, {"t": partitions_before}, {})
    second = uniform_assign(subs_after, {"t": partitions_after}, first)
    check_assignment(subs_after, {"t": partitions_after}, second)
    # Partitions that no longer exist are not held by anyone afterwards.
    valid_before = {
        m: frozenset(tp for tp in parts if tp.partition < partitions_after)
        for m, parts in first.items()
    }
    assert _moves(valid_before, second) == _min_moves(valid_before, after, partitions_after)


@settings(max_examples=200)
@given(
    st.lists(
        st.lists(st.sampled_from([f"m{i:02d}" for i in range(8)]), min_size=1, unique=True),
        min_size=2,
        max_size=8,
    ),
    st.integers(1, 30),
)
def test_uniform_sticky_over_a_sequence_of_membership_changes(
    memberships: list[list[str]], partitions: int
) -> None:
    target: dict[str, Partitions] = {}
    for members in memberships:
        subs = {m: frozenset({"t"}) for m in members}
        new = uniform_assign(subs, {"t": partitions}, target)
        assert _moves(target, new) == _min_moves(target, members, partitions)
        target = new


def test_uniform_keeps_everything_when_nothing_changes() -> None:
    subs = {"a": frozenset({"t", "u"}), "b": frozenset({"t"}), "c": frozenset({"u"})}
    counts = {"t": 7, "u": 5}
    first = uniform_assign(subs, counts, {})
    assert uniform_assign(subs, counts, first) == first


def test_uniform_adding_a_member_moves_only_its_share() -> None:
    subs = {m: frozenset({"t"}) for m in ("a", "b")}
    first = uniform_assign(subs, {"t": 6}, {})
    subs["c"] = frozenset({"t"})
    second = uniform_assign(subs, {"t": 6}, first)
    assert _moves(first, second) == 2
    assert len(second["c"]) == 2
    for m in ("a", "b"):
        assert second[m] <= first[m]


def test_assignor_registry() -> None:
    assert assignor_for("range") is range_assign
    assert assignor_for("uniform") is uniform_assign
    with pytest.raises(UnsupportedAssignorError):
        assignor_for("roundrobin")

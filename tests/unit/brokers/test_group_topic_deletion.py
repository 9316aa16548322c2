"""Offsets of deleted topics are deleted (Kafka's onPartitionsDeleted): which
names count as deleted, and the tombstones the handler writes."""

from __future__ import annotations

from lograft.brokers.groups.offsets import CommittedOffset, fetch_offsets
from lograft.brokers.groups.topic_deletion import delete_topic_offsets, deleted_topics
from tests.unit.brokers.group_harness import Coordinator, replay_log, tp


def test_deleted_topics_are_gone_or_replaced_names():
    before = {"a": "id-a", "b": "id-b", "c": "id-c"}
    after = {"a": "id-a", "b": "id-b2", "d": "id-d"}  # b re-created, c deleted, d new
    assert deleted_topics(before, after) == {"b", "c"}
    assert deleted_topics(before, before) == frozenset()
    assert deleted_topics({}, after) == frozenset()


def test_offsets_of_deleted_topics_are_tombstoned_in_every_group():
    c = Coordinator(topics={"gone": 2, "kept": 1})
    c.commit("both", "", -1, {tp("gone", 0): 5, tp("gone", 1): 6, tp("kept", 0): 7})
    c.commit("only-gone", "", -1, {tp("gone", 1): 3})
    member = c.join("active", "m", ("gone",))
    c.commit("active", "m", member.member_epoch, {tp("gone", 0): 9})
    c.commit("other", "", -1, {tp("kept", 0): 1})

    deleted = c.apply("", delete_topic_offsets(c.state, {"gone"}))

    assert deleted == {
        "active": [tp("gone", 0)],
        "both": [tp("gone", 0), tp("gone", 1)],
        "only-gone": [tp("gone", 1)],
    }
    assert fetch_offsets(c.state, "both") == {tp("kept", 0): CommittedOffset(7, "", -1, 0)}
    # Without members and offsets a group is deleted, as offset expiry does;
    # a group with members stays, with nothing committed.
    assert c.state.group("only-gone") is None
    assert set(c.state.group("active").members) == {"m"}
    assert fetch_offsets(c.state, "active") == {}
    assert fetch_offsets(c.state, "other") == {tp("kept", 0): CommittedOffset(1, "", -1, 0)}
    # A coordinator that loads the log afterwards sees the same.
    reloaded = replay_log(c.log)
    assert set(reloaded.groups) == {"both", "active", "other"}
    assert fetch_offsets(reloaded, "both") == fetch_offsets(c.state, "both")


def test_nothing_to_delete_writes_nothing():
    c = Coordinator(topics={"t": 1})
    c.commit("g", "", -1, {tp("t", 0): 1})
    result = delete_topic_offsets(c.state, {"other"})
    assert (result.records, result.response) == ((), {})

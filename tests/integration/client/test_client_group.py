"""The synchronous Consumer in a group, against one real node: resuming from
committed offsets, auto_offset_reset for partitions without a commit,
auto-commit, commits as a non-member, and a rebalance whose callbacks run in
the caller's thread after the positions they give up were committed."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from lograft.client import (
    AsyncConsumer,
    Consumer,
    NoOffsetForPartitionError,
    Producer,
    TopicPartition,
)
from lograft.errors import InvalidRequestError

# Conditions that take a few heartbeat rounds get this long, s (the node's
# default heartbeat interval is 1 s; the machine is shared and loaded).
SETTLE_S = 30.0
_groups = itertools.count()


def fresh_group() -> str:
    return f"client-group-{next(_groups)}"


def produce(url: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    with Producer(url, linger_ms=0) as p:
        for i in range(start, start + count):
            p.send(topic, b"v%d" % i, partition=i % partitions)
        p.flush()


def poll_until(consumers: list[Consumer], condition, what: str, got: list | None = None) -> list:
    """Poll every consumer in turn until `condition()`; the records got, one
    list per consumer (appended to `got` if given)."""
    got = got if got is not None else [[] for _ in consumers]
    deadline = time.monotonic() + SETTLE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c, mine in zip(consumers, got, strict=True):
            for recs in c.poll(timeout_ms=50).values():
                mine += recs
    return got


def test_a_group_resumes_from_committed_offsets(node, topic):
    t = topic(partitions=3)
    tps = [TopicPartition(t, p) for p in range(3)]
    produce(node.url, t, 3, 30)
    group = fresh_group()
    assigned: list[TopicPartition] = []
    revoked: list[tuple[TopicPartition, int | None, str]] = []
    c = Consumer(node.url, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)

    def on_revoke(parts: list[TopicPartition]) -> None:
        # The caller's thread, so the consumer's own methods work here.
        for tp in parts:
            revoked.append((tp, c.committed(tp), threading.current_thread().name))

    with c:
        c.subscribe([t], on_assign=assigned.extend, on_revoke=on_revoke)
        got: list = []
        poll_until([c], lambda: len(got) >= 30, "30 records", [got])
        assert sorted(r.offset for r in got if r.partition == 0) == list(range(10))
        assert sorted(assigned) == tps and c.assignment() == set(tps)
        assert c.committed(tps[0]) is None
        c.commit()
        assert [c.committed(tp) for tp in tps] == [10, 10, 10]
        assert [c.position(tp) for tp in tps] == [10, 10, 10]
    assert sorted(revoked) == [(tp, 10, threading.current_thread().name) for tp in tps]

    produce(node.url, t, 3, 9, start=30)
    with Consumer(node.url, group_id=group, auto_offset_reset="earliest") as again:
        again.subscribe(t)
        rest: list = []
        poll_until([again], lambda: len(rest) >= 9, "the 9 new records", [rest])
    assert sorted((r.partition, r.offset) for r in rest) == [
        (p, o) for p in range(3) for o in (10, 11, 12)
    ]


def test_partitions_without_a_commit_start_per_auto_offset_reset(node, topic):
    t = topic(partitions=1)
    tp = TopicPartition(t, 0)
    produce(node.url, t, 1, 5)
    at_assign: list[int] = []
    with Consumer(node.url, group_id=fresh_group(), auto_offset_reset="latest") as c:
        # position() inside on_assign resolves the reset (it is not fetched yet).
        c.subscribe([t], on_assign=lambda tps: at_assign.extend(c.position(tp) for tp in tps))
        poll_until([c], lambda: c.assignment() == {tp}, "assignment")
        assert at_assign == [5]
        assert c.position(tp) == 5
        produce(node.url, t, 1, 2, start=5)
        got = []
        poll_until([c], lambda: len(got) >= 2, "the new records", [got])
        assert [r.offset for r in got] == [5, 6]
    with Consumer(node.url, group_id=fresh_group(), auto_offset_reset="none") as c:
        c.subscribe([t])
        with pytest.raises(NoOffsetForPartitionError):
            poll_until([c], lambda: False, "an error")


def test_auto_commit_commits_consumed_positions_from_poll(node, topic):
    t = topic(partitions=2)
    tps = [TopicPartition(t, p) for p in range(2)]
    produce(node.url, t, 2, 20)
    group = fresh_group()
    with Consumer(
        node.url, group_id=group, auto_offset_reset="earliest", auto_commit_interval_ms=100
    ) as c:
        c.subscribe([t])
        poll_until([c], lambda: c.position(tps[0]) == 10 if c.assignment() else False, "reading")
        poll_until([c], lambda: c.position(tps[1]) == 10, "reading both")
        # No commit() call: the interval commit from poll does it.
        poll_until([c], lambda: [c.committed(tp) for tp in tps] == [10, 10], "auto-commit")


def test_assign_with_a_group_id_commits_as_a_non_member(node, topic):
    t = topic(partitions=1)
    tp = TopicPartition(t, 0)
    produce(node.url, t, 1, 8)
    group = fresh_group()
    with Consumer(node.url, group_id=group, auto_offset_reset="earliest") as c:
        c.assign([tp])
        with pytest.raises(InvalidRequestError, match="mixed"):
            c.subscribe([t])
        c.seek(tp, 3)
        got = []
        poll_until([c], lambda: len(got) >= 5, "records", [got])
        assert got[0].offset == 3
        c.commit({tp: 6})
        assert c.committed(tp) == 6
    # close() auto-committed the consumed position (8) over the explicit 6,
    # and an assign()ed partition starts at the group's committed offset.
    produce(node.url, t, 1, 2, start=8)
    with Consumer(node.url, group_id=group, auto_offset_reset="earliest") as c:
        assert c.committed(tp) == 8
        c.assign([tp])
        assert c.position(tp) == 8
        rest: list = []
        poll_until([c], lambda: len(rest) >= 2, "the new records", [rest])
        assert [r.offset for r in rest] == [8, 9]
    with Consumer(node.url, group_id=group, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1)  # a seek before the committed offset is read wins
        first: list = []
        poll_until([c], lambda: bool(first), "a record", [first])
        assert first[0].offset == 1


def test_rebalance_commits_before_on_revoke_and_the_new_owner_starts_there(node, topic):
    t = topic(partitions=4)
    produce(node.url, t, 4, 40)
    group = fresh_group()
    settings = {"group_id": group, "auto_offset_reset": "earliest", "max_poll_records": 1}
    at_revoke: dict[TopicPartition, tuple[int | None, int]] = {}
    first = Consumer(node.url, **settings)

    def on_revoke(parts: list[TopicPartition]) -> None:
        for tp in parts:
            at_revoke[tp] = (first.committed(tp), first.position(tp))

    second = Consumer(node.url, **settings)
    try:
        first.subscribe([t], on_revoke=on_revoke)
        poll_until([first], lambda: len(first.assignment()) == 4, "first holds all")
        got_first: list = []
        poll_until([first], lambda: len(got_first) >= 6, "a few records", [got_first])
        second.subscribe([t])
        got_second: list = []
        poll_until(
            [first, second],
            lambda: len(first.assignment()) == len(second.assignment()) == 2,
            "a 2/2 split",
            [got_first, got_second],
        )
        moved = second.assignment()
        assert set(at_revoke) == moved
        # Auto-commit of the revoked partitions ran before on_revoke.
        assert all(committed == position for committed, position in at_revoke.values())

        def read_on() -> bool:
            return all(second.position(tp) > at_revoke[tp][1] for tp in moved)

        poll_until([second], read_on, "second reads the moved partitions", [got_second])
        starts = {}
        for r in got_second:
            starts.setdefault(r.topic_partition, r.offset)
        # The new owner starts exactly where the old one stopped and committed.
        assert starts == {tp: at_revoke[tp][1] for tp in moved}
    finally:
        first.close()
        second.close()


def test_close_leaves_the_group_even_if_on_revoke_raises(node, topic):
    t = topic(partitions=1)
    group = fresh_group()

    def on_revoke(_parts: list[TopicPartition]) -> None:
        raise RuntimeError("on_revoke failed")

    c = Consumer(node.url, group_id=group, auto_offset_reset="earliest")
    c.subscribe([t], on_revoke=on_revoke)
    poll_until([c], lambda: bool(c.assignment()), "assignment")
    with pytest.raises(RuntimeError, match="on_revoke failed"):
        c.close()
    doc = node.node.ok("GET", f"/v1/groups/{group}")
    assert doc["members"] == [] and doc["state"] == "empty"


async def test_async_close_leaves_the_group_even_if_on_revoke_raises(node, topic):
    t = topic(partitions=1)
    group = fresh_group()

    async def on_revoke(_parts: list[TopicPartition]) -> None:
        raise RuntimeError("on_revoke failed")

    c = AsyncConsumer(node.url, group_id=group, auto_offset_reset="earliest")
    await c.start()
    c.subscribe([t], on_revoke=on_revoke)
    deadline = time.monotonic() + SETTLE_S
    while not c.assignment():
        assert time.monotonic() < deadline, "no assignment"
        await c.poll(timeout_ms=50)
    with pytest.raises(RuntimeError, match="on_revoke failed"):
        await c.close()
    doc = node.node.ok("GET", f"/v1/groups/{group}")
    assert doc["members"] == [] and doc["state"] == "empty"


def test_unsubscribe_commits_revokes_and_leaves_and_a_new_subscribe_resumes(node, topic):
    t = topic(partitions=2)
    tps = [TopicPartition(t, p) for p in range(2)]
    produce(node.url, t, 2, 10)
    group = fresh_group()
    revoked: list[TopicPartition] = []
    with Consumer(node.url, group_id=group, auto_offset_reset="earliest") as c:
        c.subscribe([t], on_revoke=revoked.extend)
        got: list = []
        poll_until([c], lambda: len(got) >= 10, "the records", [got])
        c.unsubscribe()
        assert sorted(revoked) == tps and c.assignment() == set()
        assert [c.committed(tp) for tp in tps] == [5, 5]  # auto-commit on the way out
        doc = node.node.ok("GET", f"/v1/groups/{group}")
        assert doc["members"] == []
        produce(node.url, t, 2, 2, start=10)
        c.subscribe([t])  # a new member: starts at the commits, nothing read twice
        again: list = []
        poll_until([c], lambda: len(again) >= 2, "the new records", [again])
        assert sorted((r.partition, r.offset) for r in again) == [(0, 5), (1, 5)]

"""max_poll_interval_ms on three real nodes, while a producer keeps writing:
a member whose application stops polling leaves the group although its
heartbeats go on, the other member takes all the partitions and consumes
them, and when the stuck one polls again it is told (on_lost) and rejoins,
and the partitions are split again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from lograft.client import TopicPartition
from tests.integration.client.group_support import (
    Ledger,
    Member,
    TrickleProducer,
    close_all,
    group_cluster,
)
from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import wait_in_sync
from tests.raft_support import eventually_async

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

PARTITIONS = 6
MAX_POLL_INTERVAL_MS = 1_500
# The session is longer than the poll interval: the partitions can only move
# because the member left, not because its session ran out (its heartbeats
# go on while it does not poll).
GROUPS = {
    "offsets_topic_num_partitions": 3,
    "session_timeout_ms": 10_000,
    "group_heartbeat_interval_ms": 200,
}
# Conditions that take a few heartbeat rounds get this long, s: generous,
# the machine is shared and loaded.
SETTLE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    yield from group_cluster(tmp_path_factory.mktemp, "cg-poll", GROUPS)


def split(members: list[Member], topic: str) -> bool:
    """Each member holds an equal share and together they hold every partition."""
    sizes = [len(m.holding()) for m in members]
    union = set().union(*(m.holding() for m in members))
    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    return sizes == [PARTITIONS // len(members)] * len(members) and union == everything


def partitions_got_since(ledger: Ledger, member: str, since: float) -> set[int]:
    return {tp.partition for t, tp, _off in ledger.records[member] if t >= since}


async def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(cluster):
    topic = "poll-interval"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    wait_in_sync(cluster, topic)
    url = ",".join(n.url for n in cluster)
    producer = TrickleProducer(url, topic, PARTITIONS)
    ledger = Ledger()
    common = {"auto_offset_reset": "earliest", "auto_commit_interval_ms": 300}
    a = Member("a", ledger, url, "gp", topic, max_poll_interval_ms=MAX_POLL_INTERVAL_MS, **common)
    b = Member("b", ledger, url, "gp", topic, **common)
    try:
        await producer.start()
        await a.start()
        await b.start()
        await eventually_async(lambda: split([a, b], topic), SETTLE_S, "a and b split 3/3")
        held_by_a = sorted(a.holding())

        await a.stop_polling()  # the application is stuck processing
        stuck_at = time.monotonic()
        await eventually_async(lambda: split([b], topic), SETTLE_S, "b holds all partitions")
        assert time.monotonic() - stuck_at >= MAX_POLL_INTERVAL_MS / 1000
        membership = a.consumer.group.membership  # type: ignore[union-attr]
        assert membership is not None and membership.poll_timeouts == 1
        assert a.holding() == set()  # dropped when it left: nothing more is fetched
        assert a.lost == []  # told at its next poll
        took_over = time.monotonic()
        await eventually_async(
            lambda: partitions_got_since(ledger, "b", took_over) == set(range(PARTITIONS)),
            SETTLE_S,
            "b consumes every partition",
        )

        got_by_a = len(ledger.records["a"])
        a.resume_polling()
        await eventually_async(lambda: split([a, b], topic), SETTLE_S, "split 3/3 again")
        assert sorted(a.lost) == held_by_a  # on_lost, not on_revoke: nothing was committed
        assert membership.poll_timeouts == 1
        await eventually_async(
            lambda: len(ledger.records["a"]) > got_by_a, SETTLE_S, "a consumes again"
        )
        resumed = [tp for _t, tp, _o in ledger.records["a"][got_by_a:]]
        assert set(resumed) <= a.holding()  # only partitions it was given after rejoining
    finally:
        await producer.stop()
        await close_all(a, b)

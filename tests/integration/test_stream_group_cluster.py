"""Group streams on three real node processes (issue 5): two streams served by
different nodes join one group and split its partitions, every record goes
to exactly one of them, and when one disconnects its partitions move to the
other, which goes on from the offsets the first committed on leaving.

The coordinator is whichever broker leads the group's `__consumer_offsets`
partition, so the streams' nodes talk to it over HTTP like any member.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import produce_ok, wait_in_sync
from tests.integration.sse_reader import StreamReader

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

TOPIC = "billing"
PARTITIONS = 4
GROUP = "tailers"
WAIT_S = 30.0
STREAM = (
    f"/v1/topics/{TOPIC}/stream?group={GROUP}&auto_offset_reset=earliest"
    "&format=string&commit_interval_ms=200"
)


def produce_round(cluster: LograftCluster, tag: str) -> None:
    """One record to every partition, through node 3 (which serves no stream)."""
    records = [{"value": f"{tag}-{p}", "partition": p} for p in range(PARTITIONS)]
    produce_ok(cluster, cluster[3], TOPIC, records, timeout_s=WAIT_S)


def test_two_group_streams_split_the_partitions_and_hand_them_over(
    lograft_cluster: Callable[..., LograftCluster],
) -> None:
    cluster = lograft_cluster(3)
    cluster.start()
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    wait_in_sync(cluster, TOPIC)
    first = StreamReader(cluster[1], STREAM)
    second = StreamReader(cluster[2], STREAM)
    first.start()
    try:
        cluster.eventually(
            lambda: first.assignment() == list(range(PARTITIONS)), WAIT_S, "all to the first"
        )
        produce_round(cluster, "a")
        cluster.eventually(lambda: len(first.records()) == PARTITIONS, WAIT_S, "round a")
        second.start()

        def split() -> bool:
            a, b = first.assignment() or [], second.assignment() or []
            return len(a) == len(b) == PARTITIONS // 2 and not set(a) & set(b)

        cluster.eventually(split, WAIT_S, "the partitions split between the two streams")
        produce_round(cluster, "b")

        def delivered() -> list[tuple[int, int]]:
            records = first.records() + second.records()
            return [(r["partition"], r["offset"]) for r in records]

        cluster.eventually(lambda: len(delivered()) == 2 * PARTITIONS, WAIT_S, "round b")
        moved = second.assignment() or []

        # The first stream's client goes: it commits and leaves, and the
        # second takes every partition, going on from the first's commits.
        first.close()
        cluster.eventually(
            lambda: second.assignment() == list(range(PARTITIONS)), WAIT_S, "all to the second"
        )
        produce_round(cluster, "c")
        cluster.eventually(lambda: len(delivered()) == 3 * PARTITIONS, WAIT_S, "round c")

        counts = Counter(delivered())
        assert sorted(counts) == [(p, o) for p in range(PARTITIONS) for o in range(3)]
        assert set(counts.values()) == {1}, "a record was delivered twice"
        # Each partition the second stream took over starts where the first
        # stopped: offset 1 for those moved at the split, 2 for the rest.
        for p in range(PARTITIONS):
            offsets = [r["offset"] for r in second.records() if r["partition"] == p]
            assert offsets == ([1, 2] if p in moved else [2]), (p, offsets)
    finally:
        first.close()
        second.close()

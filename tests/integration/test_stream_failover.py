"""A Server-Sent Events stream follows a partition through a SIGKILL of its
leader on three real node processes: every acknowledged record arrives once,
in offset order, with nothing skipped and nothing repeated (issue 5).

The stream is served by a node that does not lead the partition, so it reads
the leader over HTTP before the kill and whichever node leads afterwards
(itself, or the third node) after it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration.cluster_harness import ClusterNode, LograftCluster
from tests.integration.data_plane import (
    NOTHING_WRITTEN,
    leader_of,
    produce,
    produce_error,
    wait_in_sync,
)
from tests.integration.sse_reader import StreamReader
from tests.sse_support import cursor_of

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

TOPIC = "tail"
PARTITION = 0  # the partition whose leader is killed
OTHER = 1  # a second partition, so the cursor carries two positions
RECORDS_BEFORE = 20
RECORDS_AFTER = 20
FAILOVER_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(lograft_cluster: Callable[..., LograftCluster]) -> LograftCluster:
    c = lograft_cluster(3)
    c.start()
    c.create_topic(TOPIC, partitions=2, replication_factor=3)
    wait_in_sync(c, TOPIC)
    return c


def produce_acked(cluster: LograftCluster, node: ClusterNode, partition: int, value: str) -> int:
    """Produce until acknowledged (acks=all); the offset. A retry after an
    ambiguous failure may write the value twice; the test checks offsets."""

    def attempt() -> list[int] | None:  # a list: offset 0 is falsy
        resp = produce(
            node, TOPIC, [{"value": value, "partition": partition}], value_format="string"
        )
        if resp.status == 200:
            return [int(resp.body["offsets"][0]["offset"])]
        error = produce_error(resp)
        assert error is not None, resp
        assert error["retriable"] or error["code"] in NOTHING_WRITTEN, error
        return None

    (offset,) = cluster.eventually(attempt, FAILOVER_TIMEOUT_S, f"{value} acknowledged")
    return offset


def test_stream_follows_a_partition_through_a_leader_kill(cluster: LograftCluster) -> None:
    first = cluster.running()[0]
    old_leader = cluster[leader_of(first, TOPIC, PARTITION)]
    serving = next(n for n in cluster if n is not old_leader)
    stream = StreamReader(serving, f"/v1/topics/{TOPIC}/stream?offset=earliest&format=string")
    stream.start()
    try:
        acked: dict[int, str] = {}
        for i in range(RECORDS_BEFORE):
            acked[produce_acked(cluster, serving, PARTITION, f"v{i}")] = f"v{i}"
        other_offset = produce_acked(cluster, serving, OTHER, "other")
        cluster.eventually(
            lambda: len(stream.records()) >= RECORDS_BEFORE + 1,
            30,
            "the records produced before the kill",
        )

        old_leader.kill()
        for i in range(RECORDS_BEFORE, RECORDS_BEFORE + RECORDS_AFTER):
            acked[produce_acked(cluster, serving, PARTITION, f"v{i}")] = f"v{i}"
        last = max(acked)
        cluster.eventually(
            lambda: any(
                r["partition"] == PARTITION and r["offset"] >= last for r in stream.records()
            ),
            FAILOVER_TIMEOUT_S,
            f"the stream to reach offset {last} after the failover",
        )
        assert leader_of(serving, TOPIC, PARTITION) != old_leader.node_id

        records = stream.records()
        mine = [r for r in records if r["partition"] == PARTITION]
        # Dense from 0: nothing lost, nothing repeated, in order.
        assert [r["offset"] for r in mine] == list(range(len(mine)))
        for r in mine:
            if r["offset"] in acked:
                assert r["value"] == acked[r["offset"]], r
        assert [(r["partition"], r["offset"]) for r in records if r["partition"] == OTHER] == [
            (OTHER, other_offset)
        ]
        # Each event's id is the position of both partitions after it.
        record_events = [e for e in stream.events if e.data is not None]
        last_id = cursor_of(record_events[-1].event_id or "")
        assert last_id == {PARTITION: mine[-1]["offset"] + 1, OTHER: other_offset + 1}
    finally:
        stream.close()

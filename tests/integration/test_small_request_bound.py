"""Replication under a small `[http] request_bytes_max` (issue 14).

Three nodes whose HTTP requests may carry at most 32 KiB, and one topic of
450 partitions with a 200-character name: each follower follows 150
partitions of each leader, which named in one replica fetch take about
47 KB. Such a fetch was refused (close code 1009 on the replica stream),
no follower ever fetched, and every acks=all write timed out. A node now
names in one fetch only as many partitions as its request bound holds
(`fetch_wire.partitions_within`: 76 here) and the rest over its next
fetches (`brokers/replica_fetcher.py`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import (
    on_every_disk,
    produce_ok,
    running_cluster,
    wait_in_sync,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

TOPIC = "n" * 200
PARTITIONS = 450
REQUEST_BYTES_MAX = 32 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    with running_cluster(
        tmp_path_factory,
        "small-request-bound",
        log_lines=60,
        http={
            "request_bytes_max": REQUEST_BYTES_MAX,
            "request_bytes_inflight_max": 8 * REQUEST_BYTES_MAX,
        },
    ) as c:
        yield c


def test_followers_of_more_partitions_than_a_request_holds_replicate(
    cluster: LograftCluster,
) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS)
    parts = wait_in_sync(cluster, TOPIC, timeout_s=60)
    # One partition led by each node, at its end of the set: acks=all
    # answers once a follower has it (min ISR 2).
    led = {doc["leader"]: p for p, doc in sorted(parts.items(), reverse=True)}
    assert len(led) == 3
    for leader, p in led.items():
        produce_ok(cluster, cluster[leader], TOPIC, [{"value": f"v-{p}", "partition": p}])

    # A JSON value is stored as JSON.
    stored = {p: [f'"v-{p}"'.encode()] for p in led.values()}
    cluster.eventually(
        lambda: on_every_disk(cluster, TOPIC, stored), 30, "the records on every replica's disk"
    )

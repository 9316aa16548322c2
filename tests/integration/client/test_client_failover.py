"""The client across a leader failure on three real nodes: the producer follows
the new leaders (metadata refresh on NOT_LEADER_OR_FOLLOWER and connection
errors), every acknowledged record is in the log exactly once and in order
per key, and the consumer reads it all from the survivors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lograft.client import Consumer, Producer, TopicPartition, deserializers, serializers
from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import leader_of, start_cluster, wait_in_sync

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

PARTITIONS = 3
KEYS = 12
PER_PHASE = 240


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    c = start_cluster(lambda attempt: LograftCluster(tmp_path_factory.mktemp(f"cf-{attempt}"), 3))
    try:
        yield c
    finally:
        print(c.logs(lines=120))
        c.close()


def test_producer_follows_new_leaders_and_writes_exactly_once(cluster):
    cluster.create_topic("orders", partitions=PARTITIONS, replication_factor=3)
    wait_in_sync(cluster, "orders")
    urls = ",".join(n.url for n in cluster)
    sent: list[tuple[str, str]] = []
    with Producer(
        urls,
        value_serializer=serializers.str,
        key_serializer=serializers.str,
        linger_ms=5,
        batch_bytes=2048,
        retry_backoff_ms=50,
    ) as p:
        futs = []
        for i in range(PER_PHASE):
            key, value = f"k{i % KEYS}", f"before-{i}"
            futs.append(p.send("orders", value, key=key))
            sent.append((key, value))
        p.flush()
        assert all(f.get(0).offset >= 0 for f in futs)

        victim = cluster[leader_of(cluster[1], "orders", 0)]
        victim.kill()  # SIGKILL: in-flight requests die with it

        for i in range(PER_PHASE):
            key, value = f"k{i % KEYS}", f"after-{i}"
            futs.append(p.send("orders", value, key=key))
            sent.append((key, value))
        p.flush()
        metas = [f.get(0) for f in futs]
        assert p.stats.retries > 0  # the old leader's partitions had to be retried
        assert p.metadata_refreshes() > 1

    survivors = ",".join(n.url for n in cluster.running())
    with Consumer(
        survivors,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
        key_deserializer=deserializers.str,
        value_deserializer=deserializers.str,
    ) as c:
        c.assign([TopicPartition("orders", p) for p in range(PARTITIONS)])
        got = []
        for record in c:
            got.append(record)
            if len(got) == len(sent):
                break
    assert sorted((r.key, r.value) for r in got) == sorted(sent)  # each exactly once
    for key in {k for k, _v in sent}:
        assert [r.value for r in got if r.key == key] == [v for k, v in sent if k == key]
    by_pos = {(r.partition, r.offset): r.value for r in got}
    for (_key, value), meta in zip(sent, metas, strict=True):
        assert by_pos[(meta.partition, meta.offset)] == value

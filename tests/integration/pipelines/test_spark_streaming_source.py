"""Streaming reads (`spark.readStream.format("lograft")`) on a real three-node
cluster, Spark local[2]: a query stopped and restarted from its checkpoint
reads every record once; so does one whose partition leader is killed;
maxOffsetsPerTrigger bounds every micro-batch; partitions added while a
query runs are read.

Each query writes through `foreachBatch` into `Batches`, keyed by batch id:
a micro-batch Spark runs again after a restart replaces its first run, as
an idempotent sink would, so what is left is the query's input, batch by
batch, and any record missing or read twice shows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from lograft.client import Producer
from tests.integration.data_plane import leader_of, wait_in_sync
from tests.integration.pipelines.spark_support import produce

pytestmark = [pytest.mark.timeout(300)]

Key = tuple[str, int, int, bytes]  # topic, partition, offset, value


class Batches:
    """foreachBatch target: each micro-batch's records by batch id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_id: dict[int, list[Key]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("topic", "partition", "offset", "value").collect()
        keys = [(r["topic"], r["partition"], r["offset"], bytes(r["value"])) for r in rows]
        with self._lock:
            self.by_id[batch_id] = keys

    def records(self) -> list[Key]:
        with self._lock:
            return [k for _id, keys in sorted(self.by_id.items()) for k in keys]

    def count(self) -> int:
        return len(self.records())

    def sizes(self) -> list[int]:
        with self._lock:
            return [len(keys) for _id, keys in sorted(self.by_id.items())]


def start_query(
    spark, bootstrap: str, checkpoint: str, sink: Batches, trigger: dict[str, Any], **options: str
) -> Any:
    reader = spark.readStream.format("lograft").option("bootstrap", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def wait_for(query: Any, done: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    """Poll until `done()`; a query that died fails at once with its exception."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if query.exception() is not None:
            raise AssertionError(f"the query failed while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def keys_of(sent) -> list[Key]:
    return sorted((s.topic, s.partition, s.offset, s.value) for s in sent)


FAST = {"processingTime": "200 milliseconds"}


def test_query_restarted_from_its_checkpoint_reads_every_record_once(
    spark, bootstrap, new_topic, checkpoint
):
    topic = new_topic(3)
    sent = produce(bootstrap, topic, [{"value": b"a%d" % i} for i in range(30)])
    batches = Batches()
    opts = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "20"}
    query = start_query(spark, bootstrap, checkpoint, batches, FAST, **opts)
    try:
        wait_for(query, lambda: batches.count() >= 30, "the first 30 records")
        sent += produce(bootstrap, topic, [{"value": b"b%d" % i} for i in range(30)])
        wait_for(query, lambda: batches.count() >= 40, "some of the next 30")
    finally:
        query.stop()  # wherever it is: maybe in the middle of a micro-batch
    sent += produce(bootstrap, topic, [{"value": b"c%d" % i} for i in range(30)])
    # The restart takes the checkpoint's offsets (startingOffsets only applies to a new query).
    query = start_query(spark, bootstrap, checkpoint, batches, {"availableNow": True}, **opts)
    query.awaitTermination(120)
    assert query.exception() is None
    got = batches.records()
    assert len(got) == len(set(got)), "a record was read twice"
    assert sorted(got) == keys_of(sent)
    assert max(batches.sizes()) <= 20


def test_max_offsets_per_trigger_bounds_batches_and_added_partitions_are_read(
    spark, cluster, bootstrap, new_topic, checkpoint
):
    topic = new_topic(2)
    sent = produce(bootstrap, topic, [{"value": b"a%d" % i, "partition": i % 2} for i in range(30)])
    batches = Batches()
    opts = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "7"}
    query = start_query(spark, bootstrap, checkpoint, batches, FAST, **opts)
    try:
        wait_for(query, lambda: batches.count() >= 30, "the first 30 records")
        cluster[1].ok("POST", f"/v1/topics/{topic}/partitions", {"partitions": 4})
        wait_in_sync(cluster, topic)
        sent += produce(
            bootstrap, topic, [{"value": b"b%d" % i, "partition": i % 4} for i in range(20)]
        )
        wait_for(query, lambda: batches.count() >= 50, "the records of the added partitions")
    finally:
        query.stop()
    got = batches.records()
    assert sorted(got) == keys_of(sent)
    assert {k[1] for k in got} == {0, 1, 2, 3}
    assert batches.sizes() and max(batches.sizes()) <= 7, batches.sizes()


def test_leader_killed_mid_query_loses_nothing(spark, cluster, bootstrap, new_topic, checkpoint):
    topic = new_topic(3)
    batches = Batches()
    acked: list[bytes] = []
    acked_lock = threading.Lock()
    stop = threading.Event()

    def produce_until_stopped() -> None:
        with Producer(bootstrap, linger_ms=5, retry_backoff_ms=50) as producer:
            i = 0
            while not stop.is_set():
                value = b"r%d" % i
                fut = producer.send(topic, value, partition=i % 3)

                def on_done(f, value=value) -> None:
                    if f.exception() is None:
                        with acked_lock:
                            acked.append(value)

                fut.add_done_callback(on_done)
                i += 1
                stop.wait(0.005)
            producer.flush()

    def n_acked() -> int:
        with acked_lock:
            return len(acked)

    writer = threading.Thread(target=produce_until_stopped, daemon=True)
    opts = {"subscribe": topic, "startingOffsets": "earliest", "failOnDataLoss": "true"}
    query = start_query(spark, bootstrap, checkpoint, batches, FAST, **opts)
    victim = cluster[leader_of(cluster[1], topic, 0)]
    writer.start()
    try:
        wait_for(query, lambda: batches.count() >= 100, "records before the kill")
        victim.kill()
        killed_at = n_acked()
        wait_for(query, lambda: n_acked() >= killed_at + 300, "acks after the kill")
        stop.set()
        writer.join(60)
        assert not writer.is_alive()
        final = set(acked)
        wait_for(
            query,
            lambda: final <= {k[3] for k in batches.records()},
            "every acknowledged record read",
        )
    finally:
        stop.set()
        query.stop()
        victim.restart()
        wait_in_sync(cluster, topic)
    got = batches.records()
    assert len(got) == len(set(got)), "a record was read twice"
    values = [k[3] for k in got]
    assert len(values) == len(set(values)), "a value is in the log twice"
    assert set(acked) <= set(values)


def test_a_deleted_topic_fails_the_query_with_fail_on_data_loss(
    spark, cluster, bootstrap, new_topic, checkpoint
):
    topic = new_topic(2)
    produce(bootstrap, topic, [{"value": b"a%d" % i} for i in range(10)])
    batches = Batches()
    opts = {"subscribe": topic, "startingOffsets": "earliest"}
    query = start_query(spark, bootstrap, checkpoint, batches, FAST, **opts)
    try:
        wait_for(query, lambda: batches.count() >= 10, "the records before the delete")
        cluster[1].ok("DELETE", f"/v1/topics/{topic}")
        with pytest.raises(Exception) as failed:  # StreamingQueryException
            query.awaitTermination(60)
        error = str(failed.value)
    finally:
        query.stop()
    assert f"{topic}-0, {topic}-1 are gone" in error, error[:3000]
    assert 'set the source option "failOnDataLoss" to "false"' in error

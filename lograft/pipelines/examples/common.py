"""What the example pipelines share: the local cluster's address, topics, offsets, Spark.

The examples talk to the cluster `scripts/cluster.sh start` runs (HTTP on
127.0.0.1:9091-9093) unless given `--bootstrap`. Topics are created when
missing (`ensure_topic`, through the admin API of the first reachable node).
Each example reads its input from the offsets the topic ended at when the
example started (`end_offsets`), so earlier runs' records are not counted
again and the example can check its own output.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from lograft.client import Consumer, ConsumerRecord, TopicPartition, deserializers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The local cluster of `scripts/cluster.sh start`.
LOCAL_BOOTSTRAP = "http://127.0.0.1:9091,http://127.0.0.1:9092,http://127.0.0.1:9093"
HTTP_TIMEOUT_S = 30.0
TOPIC_READY_TIMEOUT_S = 60.0
# How long read_records waits for records below offsets it was told exist.
READ_TIMEOUT_S = 120.0


def _http_json(method: str, url: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def ensure_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    """Create `name` (replication factor min(3, brokers)) unless it exists, then wait until
    every partition has a leader that serves it."""
    url = bootstrap.split(",")[0].strip().rstrip("/")
    try:
        _http_json("POST", f"{url}/v1/topics", {"name": name, "partitions": partitions})
    except urllib.error.HTTPError as exc:
        body = exc.read()
        if exc.code != 409 or b"TOPIC_ALREADY_EXISTS" not in body:
            raise RuntimeError(f"creating topic {name!r} failed: {exc.code} {body!r}") from exc
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while True:
        doc = _http_json("GET", f"{url}/v1/topics/{name}")
        if all(p.get("high_watermark") is not None for p in doc["partitions"]):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"topic {name!r} has no serving leaders after {TOPIC_READY_TIMEOUT_S} s"
            )
        time.sleep(0.2)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> the offset the next record will get (the high watermark)."""
    with Consumer(bootstrap) as consumer:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}


def beginning_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> its first offset still kept (the log start offset)."""
    with Consumer(bootstrap) as consumer:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        return {tp.partition: offset for tp, offset in consumer.beginning_offsets(tps).items()}


def parse_offsets_json(text: str, topic: str) -> dict[int, int]:
    """{"topic": {"0": 42, ...}} -> {0: 42, ...} (exact offsets only)."""
    doc = json.loads(text)
    if set(doc) != {topic}:
        raise ValueError(f"offsets JSON must name exactly the topic {topic!r}: {text}")
    out = {int(p): int(o) for p, o in doc[topic].items()}
    if any(o < 0 for o in out.values()):
        raise ValueError(f"give exact offsets (>= 0), not -1/-2: {text}")
    return out


def offsets_json(topic: str, offsets: dict[int, int]) -> str:
    """Spark's Kafka offset JSON, which the lograft source takes too: {"topic": {"0": 42}}."""
    return json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})


def read_records(
    bootstrap: str, topic: str, start: dict[int, int], until: dict[int, int]
) -> list[ConsumerRecord]:
    """Every record of `topic` in [start, until) per partition, values as JSON."""
    out: list[ConsumerRecord] = []
    wanted = {p: until[p] for p in until if until[p] > start.get(p, 0)}
    if not wanted:
        return out
    with Consumer(bootstrap, value_deserializer=deserializers.json) as consumer:
        tps = [TopicPartition(topic, p) for p in wanted]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start.get(tp.partition, 0))
        done: set[int] = set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(done) < len(wanted):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: read {len(out)} records, not all of {wanted}")
            for tp, records in consumer.poll(timeout_ms=1000).items():
                for record in records:
                    if record.offset < wanted[tp.partition]:
                        out.append(record)
                    if record.offset + 1 >= wanted[tp.partition]:
                        done.add(tp.partition)
    return out


def example_parser(doc: str | None) -> argparse.ArgumentParser:
    """An example's command line with what every example takes: --bootstrap and --master."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap",
        default=LOCAL_BOOTSTRAP,
        help="lograft node URLs, comma separated (default: the local cluster of "
        "scripts/cluster.sh start)",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default local[2]; under spark-submit, spark-submit's --master)",
    )
    return parser


def spark_session(app_name: str, master: str | None = None) -> SparkSession:
    """A SparkSession with the lograft format registered: spark-submit's when this runs
    under spark-submit (its --master and --conf decide), else a local one."""
    from lograft.pipelines import LograftDataSource

    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit: its JVM is running
        from pyspark.sql import SparkSession

        session = SparkSession.builder.appName(app_name).getOrCreate()
    else:
        from lograft.pipelines.local_spark import local_session

        session = local_session(app_name, master=master) if master else local_session(app_name)
    session.dataSource.register(LograftDataSource)
    return session


def print_table(rows: Iterable[Iterable[Any]], header: Iterable[str]) -> None:
    """A small fixed-width table on stdout."""
    table = [list(map(str, header)), *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for n, row in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))

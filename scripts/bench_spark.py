"""Spark pipelines benchmark: the lograft source and sink beside Spark's own Kafka ones.

For each value size (`--value-bytes`, default 100 and 1024; no keys, no
compression) on topics of `--partitions` partitions (default 6), each system
first warms up (the sink writes `--warmup` records to a new topic, a streaming
query reads them; neither timed, so the JVM code, the Python workers and the
connections are warm and the topic exists), then:

1. sink: a batch DataFrame of `--records` rows is written through the sink,
   `df.write.format(...).mode("append").save()`, wall time;
2. source: a streaming query reads those records (from the offsets where the
   warm-up read stopped) into Spark's `noop` sink (default trigger);
   records/s = records / (end of the batch that brought the count to
   `--records` - start()), from the query's progress reports; and "source
   after start", the same without the time from start() to the query's
   first trigger (the query's own start: planning, the Python data source's
   planner process);
3. raw fetch (lograft only): the project's own `Consumer` (sync), assigned
   every partition, polls until it has every record of the topic (warm-up
   included): what the cluster serves to one plain client, the floor the
   lograft source should not fall under.

lograft side: a temporary three-node cluster (tests/integration's harness,
replication factor 3), the `lograft` data source. Kafka side: Apache Kafka
4.4.0 (scripts/kafka_local.py), one KRaft node, replication factor 1,
Spark's `kafka` data source (`spark-sql-kafka-0-10`). Both run throughout,
on this machine, with Spark in `local[2]` in the same process as this script.

The comparison needs Spark's Kafka connector at PySpark's own version, and
Maven Central serves it only up to 4.2.0: so this script runs itself (both
sides) in a benchmark virtualenv, `.tools/spark-bench/venv-pyspark-4.2.0`,
that it creates on first use with pyspark==4.2.0, pyarrow and lograft's
dependencies (lograft itself from this checkout via PYTHONPATH). Kafka's
and the connector's jars come from Maven Central with `mvn` (installed with
apt-get when missing and run as root) into `.tools/`. First run: a few
minutes of downloads; later runs start at once.

Progress goes to stderr; the table to stdout (`--json` for JSON).

    .venv/bin/python scripts/bench_spark.py
    .venv/bin/python scripts/bench_spark.py --records 200000 --value-bytes 100
    .venv/bin/python scripts/bench_spark.py --only lograft      # no Kafka, no mvn
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import kafka_local  # noqa: E402  (a sibling script)
from bench_common import http_json, log, machine, poll_count  # noqa: E402  (a sibling script)

BENCH_VENV = ROOT / ".tools" / "spark-bench" / f"venv-pyspark-{kafka_local.SPARK_KAFKA_VERSION}"
INNER_FLAG = "--in-bench-env"


# -- the benchmark environment -------------------------------------------------------------


def bench_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [f"pyspark=={kafka_local.SPARK_KAFKA_VERSION}", "pyarrow>=15", *project["dependencies"]]


def bench_python() -> Path:
    """The benchmark venv's interpreter, creating or updating the venv when needed."""
    python = BENCH_VENV / "bin" / "python"
    stamp = BENCH_VENV / ".requirements"
    wanted = "\n".join(bench_requirements())
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    log(f"creating the benchmark virtualenv {BENCH_VENV} (first run: pyspark download)")
    subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *wanted.split("\n"),
        ],
        check=True,
    )
    stamp.write_text(wanted)
    return python


def reexec_in_bench_env(argv: list[str]) -> None:
    python = bench_python()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), INNER_FLAG, *argv], env)


# -- measuring -----------------------------------------------------------------------------


@dataclass
class Result:
    system: str  # "lograft" or "kafka"
    value_bytes: int
    case: str  # "sink", "source", "source after start", "raw fetch"
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@contextmanager
def wall() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    start = time.perf_counter()
    yield out
    out["seconds"] = time.perf_counter() - start


def stream_to_noop(
    df: Any, expected: int, checkpoint: Path, timeout_s: float
) -> tuple[int, float, float, Any]:
    """Run a streaming query into the noop sink until it has read `expected` rows:
    (rows, seconds from start() to the end of the batch that completed them, seconds from
    start() to the first trigger, the source's end offset after that batch)."""
    started = time.time()
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
            progress = query.recentProgress
            rows = sum(p["numInputRows"] for p in progress)
            if rows >= expected:
                last = next(p for p in reversed(progress) if p["numInputRows"] > 0)
                begun = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00"))
                ended = begun.timestamp() + last["durationMs"]["triggerExecution"] / 1000
                first = datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00"))
                batches = sum(1 for p in progress if p["numInputRows"] > 0)
                log(
                    f"    {rows:,} rows in {batches} batch(es); first batch began "
                    f"{first.timestamp() - started:.2f} s after start()"
                )
                startup = first.timestamp() - started
                return rows, ended - started, startup, last["sources"][0]["endOffset"]
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {rows} of {expected} rows in {timeout_s} s")
            time.sleep(0.05)
    finally:
        query.stop()


def value_df(spark: Any, records: int, value_bytes: int, partitions: int) -> Any:
    from pyspark.sql import functions as F

    value = F.lit(b"v" * value_bytes).cast("binary")
    return spark.range(records, numPartitions=partitions).select(value.alias("value"))


class Bench:
    """Per system and value size: a warm-up (the sink writes `--warmup` rows to a new topic,
    a streaming query reads them; neither is timed, so the JVM, the Python workers and the
    connections are warm and the topic exists), then the timed sink, the timed source (from
    the offsets where the warm-up read stopped) and, for lograft, the raw fetch."""

    def __init__(self, args: argparse.Namespace, spark: Any, work: Path) -> None:
        self.args = args
        self.spark = spark
        self.work = work
        self.results: list[Result] = []
        self.stamp = int(time.time())

    def add(self, result: Result) -> None:
        self.results.append(result)
        log(
            f"  {result.system} {result.value_bytes} B {result.case}: {result.records:,} records "
            f"in {result.seconds:.2f} s = {result.rate:,.0f} records/s"
        )

    def run_system(self, system: str, value_bytes: int, options: dict[str, str]) -> str:
        """Warm-up, sink and source for one system; returns the topic."""
        topic = f"bench-spark-{self.stamp}-{value_bytes}"
        if system == "lograft":
            self.create_topic(options["bootstrap"].split(",")[0], topic)
        write_options = {**options, "topic": topic}
        read_options = {**options, "subscribe": topic}
        fmt = system
        log(f"{system}, {value_bytes} B values: warm-up ({self.args.warmup:,} records)")
        self.write(fmt, write_options, self.args.warmup, value_bytes)
        _, _, _, end = self.read(
            fmt, {**read_options, "startingOffsets": "earliest"}, self.args.warmup, "warm"
        )
        log(f"{system}, {value_bytes} B values: sink")
        seconds = self.write(fmt, write_options, self.args.records, value_bytes)
        self.add(Result(system, value_bytes, "sink", self.args.records, seconds))
        log(f"{system}, {value_bytes} B values: source")
        rows, seconds, startup, _ = self.read(
            fmt,
            {**read_options, "startingOffsets": end if isinstance(end, str) else json.dumps(end)},
            self.args.records,
            "timed",
        )
        self.add(Result(system, value_bytes, "source", rows, seconds))
        # The same read without the query's start (until its first trigger began).
        self.add(Result(system, value_bytes, "source after start", rows, seconds - startup))
        return topic

    def write(self, fmt: str, options: dict[str, str], records: int, value_bytes: int) -> float:
        df = value_df(self.spark, records, value_bytes, self.args.partitions)
        with wall() as t:
            df.write.format(fmt).mode("append").options(**options).save()
        return t["seconds"]

    def read(
        self, fmt: str, options: dict[str, str], expected: int, label: str
    ) -> tuple[int, float, float, Any]:
        df = self.spark.readStream.format(fmt).options(**options).load()
        checkpoint = self.work / f"ckpt-{fmt}-{label}-{time.monotonic_ns()}"
        return stream_to_noop(df, expected, checkpoint, self.args.timeout)

    def create_topic(self, url: str, topic: str) -> None:
        http_json(
            "POST",
            f"{url}/v1/topics",
            {"name": topic, "partitions": self.args.partitions, "replication_factor": 3},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            doc = http_json("GET", f"{url}/v1/topics/{topic}")
            if all(p["high_watermark"] is not None for p in doc["partitions"]):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {topic} has no serving leaders after 30 s")

    def raw_fetch(self, bootstrap: str, topic: str, value_bytes: int) -> None:
        """Every record of the topic (warm-up and timed) with the project's sync Consumer."""
        from lograft.client import Consumer, TopicPartition

        log(f"lograft, {value_bytes} B values: raw fetch with the project's Consumer")
        expected = self.args.warmup + self.args.records
        tps = [TopicPartition(topic, p) for p in range(self.args.partitions)]
        with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
            consumer.assign(tps)
            with wall() as t:
                count = poll_count(consumer, expected)
        self.add(Result("lograft", value_bytes, "raw fetch", count, t["seconds"]))


# -- the run -------------------------------------------------------------------------------


def print_table(out: dict[str, Any]) -> None:
    print(f"machine: {out['machine']}")
    print(f"spark: {out['spark']}, java: {out['java']}")
    print(f"command: {out['command']}")
    print()
    print("| values | case | lograft records/s | Kafka records/s | lograft / Kafka |")
    print("| ---: | --- | ---: | ---: | ---: |")
    rates: dict[tuple[str, int, str], float] = {
        (r["system"], r["value_bytes"], r["case"]): r["rate"] for r in out["results"]
    }
    for size in out["value_bytes"]:
        for case in ("source", "source after start", "sink", "raw fetch"):
            lg = rates.get(("lograft", size, case))
            kf = rates.get(("kafka", size, case))
            if lg is None and kf is None:
                continue
            ratio = f"{lg / kf:.2f}" if lg and kf else ""
            print(
                f"| {size} B | {case} | {f'{lg:,.0f}' if lg else ''} | "
                f"{f'{kf:,.0f}' if kf else ''} | {ratio} |"
            )
    for size in out["value_bytes"]:
        src = rates.get(("lograft", size, "source"))
        after = rates.get(("lograft", size, "source after start"))
        raw = rates.get(("lograft", size, "raw fetch"))
        if src and after and raw:
            print(
                f"\n{size} B: lograft source / raw fetch = {src / raw:.2f} "
                f"({after / raw:.2f} after the query's start)",
                end="",
            )
    print()


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    from lograft.pipelines.local_spark import local_session, prepare_environment
    from tests.integration.cluster_harness import LograftCluster

    java = prepare_environment()
    log(f"Java {'.'.join(map(str, java.version))} from {java.source}: {java.home}")
    # Spark's Kafka connector, unless only lograft is measured (then no mvn, no download).
    jars = (
        []
        if args.only == "lograft"
        else kafka_local.maven_jars(
            "spark-kafka-" + kafka_local.SPARK_KAFKA_VERSION,
            kafka_local.SPARK_KAFKA_ARTIFACTS,
            only=kafka_local.SPARK_KAFKA_JARS,
        )
    )
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        work = Path(tmp)
        cluster = LograftCluster(work / "lograft", 3) if args.only != "kafka" else None
        broker = (
            kafka_local.KafkaBroker(work / "kafka", str(java.java), args.partitions)
            if args.only != "lograft"
            else None
        )
        try:
            if cluster is not None:
                log(f"starting a 3-node lograft cluster under {work / 'lograft'}")
                cluster.start()
            if broker is not None:
                broker.start()
            spark = local_session(
                "bench-spark",
                master="local[2]",
                conf={
                    "spark.sql.streaming.numRecentProgressUpdates": "100000",
                    **({"spark.jars": ",".join(str(j) for j in jars)} if jars else {}),
                },
            )
            if cluster is not None:
                register_lograft(spark)
            bench = Bench(args, spark, work)
            for size in args.value_bytes:
                if broker is not None:
                    options = {"kafka.bootstrap.servers": broker.bootstrap}
                    bench.run_system("kafka", size, options)
                if cluster is not None:
                    bootstrap = ",".join(n.url for n in cluster)
                    topic = bench.run_system("lograft", size, {"bootstrap": bootstrap})
                    bench.raw_fetch(bootstrap, topic, size)
            import pyspark

            return {
                "machine": machine(),
                "spark": pyspark.__version__,
                "java": ".".join(map(str, java.version)),
                "command": " ".join(["scripts/bench_spark.py", *argv]),
                "records": args.records,
                "partitions": args.partitions,
                "value_bytes": args.value_bytes,
                "results": [dict(asdict(r), rate=r.rate) for r in bench.results],
            }
        finally:
            stop_spark()
            if broker is not None:
                broker.stop()
            if cluster is not None:
                cluster.close()


def stop_spark() -> None:
    # Before the servers: Spark's cached Kafka producers would otherwise retry a stopped broker.
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def register_lograft(spark: Any) -> None:
    from lograft.pipelines import LograftDataSource

    spark.dataSource.register(LograftDataSource)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=300_000, help="records per value size")
    ap.add_argument(
        "--value-bytes", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1024]
    )
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument(
        "--warmup", type=int, default=20_000, help="untimed records per system and size first"
    )
    ap.add_argument("--only", choices=("lograft", "kafka"), help="one side only")
    ap.add_argument("--timeout", type=float, default=600.0, help="per streaming read, seconds")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    inner = INNER_FLAG in argv
    if inner:
        argv.remove(INNER_FLAG)
    args = parse_args(argv)  # -h and bad arguments answered before any download
    if not inner:
        if args.only != "lograft":
            # Fetch the jars before the venv so a missing mvn is said first.
            kafka_local.maven_jars(
                "kafka-" + kafka_local.KAFKA_VERSION, kafka_local.KAFKA_BROKER_ARTIFACTS
            )
        reexec_in_bench_env(argv)
    out = run(args, argv)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Topic to Parquet: a batch job that copies an exact offset range of a topic to Parquet
files partitioned by date.

    .venv/bin/python -m lograft.pipelines.examples.topic_to_parquet \\
        --topic page-views --out data/parquet/page-views \\
        [--starting-offsets '{"page-views": {"0": 0, "1": 0, "2": 0}}'] \\
        [--ending-offsets '{"page-views": {"0": 500, "1": 480, "2": 510}}']

Without offsets it takes each partition from its first kept offset to its
current end, resolved to exact numbers before the job starts and printed as
the two options that read the same range again: records at given offsets
never change (until retention deletes them), so an export is repeatable and
ranges can be exported one after the other without gaps or overlap
(`endingOffsets` is exclusive, as in Spark's Kafka source).

Each record becomes a row: topic, partition, offset, timestamp (the record's
own), key and value as UTF-8 text, and `date`, the UTC day of the timestamp,
which partitions the files (`<out>/date=2026-11-24/part-....parquet`). The
job appends to `--out` (`--mode overwrite` replaces it), then reads the
files back and prints the rows per date; it exits 1 unless the export holds
exactly one row for every offset of the range (so a second append of the
same range is reported; on a compacted topic, whose ranges have holes, the
check does not apply).
"""

from __future__ import annotations

import functools
import operator
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lograft.pipelines.examples import common

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def offset_range(
    bootstrap: str, topic: str, starting: str | None, ending: str | None
) -> tuple[dict[int, int], dict[int, int]]:
    """The exact [start, end) per partition: the given JSON, else log start and end now."""
    start = (
        common.parse_offsets_json(starting, topic)
        if starting
        else common.beginning_offsets(bootstrap, topic)
    )
    end = (
        common.parse_offsets_json(ending, topic) if ending else common.end_offsets(bootstrap, topic)
    )
    if start.keys() != end.keys():
        raise ValueError(f"starting and ending offsets name different partitions: {start} {end}")
    bad = {p: (start[p], end[p]) for p in start if start[p] > end[p]}
    if bad:
        raise ValueError(f"start after end in partitions {bad}")
    return start, end


def read_range(
    spark: SparkSession, bootstrap: str, topic: str, start: dict[int, int], end: dict[int, int]
) -> DataFrame:
    """The records of [start, end) as rows with a `date` column."""
    from pyspark.sql import functions as F

    records = (
        spark.read.format("lograft")
        .option("bootstrap", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", common.offsets_json(topic, start))
        .option("endingOffsets", common.offsets_json(topic, end))
        .load()
    )
    return records.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        F.to_date(F.col("timestamp")).alias("date"),  # the session time zone is UTC
    )


def export(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    out: Path,
    start: dict[int, int],
    end: dict[int, int],
    mode: str = "append",
) -> None:
    read_range(spark, bootstrap, topic, start, end).write.mode(mode).partitionBy("date").parquet(
        str(out)
    )


def check_export(
    spark: SparkSession, out: Path, topic: str, start: dict[int, int], end: dict[int, int]
) -> tuple[list[tuple[str, int]], bool]:
    """(rows per date, whether the files hold each offset of the range exactly once)."""
    from pyspark.sql import functions as F

    rows = spark.read.parquet(str(out)).where(F.col("topic") == topic)
    in_range = rows.where(
        functools.reduce(
            operator.or_,
            [
                (F.col("partition") == p)
                & (F.col("offset") >= start[p])
                & (F.col("offset") < end[p])
                for p in start
            ],
            F.lit(False),
        )
    )
    per_date = [
        (str(r["date"]), int(r["count"]))
        for r in in_range.groupBy("date").count().orderBy("date").collect()
    ]
    distinct = in_range.select("partition", "offset").distinct().count()
    total = sum(n for _, n in per_date)
    wanted = sum(end[p] - start[p] for p in start)
    return per_date, total == wanted == distinct


def main(argv: list[str] | None = None) -> int:
    parser = common.example_parser(__doc__)
    parser.add_argument("--topic", default="page-views")
    parser.add_argument("--out", type=Path, default=Path("data/parquet/page-views"))
    parser.add_argument("--starting-offsets", help='exact offsets: {"topic": {"0": 0, ...}}')
    parser.add_argument("--ending-offsets", help="exact offsets, exclusive")
    parser.add_argument("--mode", choices=("append", "overwrite"), default="append")
    args = parser.parse_args(argv)

    start, end = offset_range(
        args.bootstrap, args.topic, args.starting_offsets, args.ending_offsets
    )
    print(f"range: --starting-offsets '{common.offsets_json(args.topic, start)}'")
    print(f"       --ending-offsets '{common.offsets_json(args.topic, end)}'")
    print(f"       {sum(end[p] - start[p] for p in start)} records")
    spark = common.spark_session("topic-to-parquet", args.master)
    export(spark, args.bootstrap, args.topic, args.out, start, end, args.mode)
    per_date, complete = check_export(spark, args.out, args.topic, start, end)
    print(f"\nwrote {args.out}/date=*/ :")
    common.print_table(per_date, ["date", "rows"])
    print(
        "\nevery offset of the range is in the files exactly once"
        if complete
        else "\nthe files do NOT hold the range exactly once"
    )
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())

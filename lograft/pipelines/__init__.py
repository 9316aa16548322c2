"""Spark: a PySpark data source and sink for lograft topics (docs/pipelines.md).

    from lograft.pipelines import LograftDataSource
    spark.dataSource.register(LograftDataSource)
    df = spark.read.format("lograft").option("bootstrap", "http://127.0.0.1:9091") \\
        .option("subscribe", "page-views").load()

Modules: `datasource` (the Spark glue: source, readers, writers), `options`
(option names and checks), `offsets` (Spark's offset JSON, ranges, per-trigger
limits), `offset_specs` (starting/ending options resolved against the
cluster), `cluster_lookup` (the driver's partition and offset lookups),
`range_reader` (an executor reading one offset range), `arrow_rows` (the
rows as Arrow batches), `sink` (writing rows with the idempotent producer).

`LograftDataSource` is imported on first use, so `import lograft.pipelines`
does not need pyspark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LograftDataSource"]


def __getattr__(name: str) -> Any:
    if name == "LograftDataSource":
        from lograft.pipelines.datasource import LograftDataSource

        return LograftDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

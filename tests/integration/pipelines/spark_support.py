"""Producing test records with the client and reading Spark rows back as plain tuples."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lograft.client import Producer, RecordMetadata


@dataclass(frozen=True)
class Sent:
    """One acknowledged record: where it landed and what it held."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Mapping[str, Any]],
) -> list[Sent]:
    """Send records (dicts with value, and optional key, partition, headers,
    timestamp_ms) with acks=all; every one must be acknowledged."""
    out: list[Sent] = []
    with Producer(bootstrap, linger_ms=2) as producer:
        pending = []
        for rec in records:
            fut = producer.send(
                topic,
                rec.get("value"),
                key=rec.get("key"),
                headers=rec.get("headers"),
                partition=rec.get("partition"),
                timestamp_ms=rec.get("timestamp_ms"),
            )
            pending.append((rec, fut))
        producer.flush()
        for rec, fut in pending:
            meta: RecordMetadata = fut.get(0)
            out.append(
                Sent(
                    topic,
                    meta.partition,
                    meta.offset,
                    meta.timestamp,
                    rec.get("key"),
                    rec.get("value"),
                    tuple(rec.get("headers") or ()),
                )
            )
    return out


def spark_offsets(offsets: Mapping[str, Mapping[int, int]]) -> str:
    """{"t": {0: 5}} -> the JSON option value Spark's Kafka source takes."""
    return json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()})


def collect_sent(df: Any) -> list[Sent]:
    """A source DataFrame's rows as `Sent`s, sorted by (topic, partition, offset).
    Timestamps go through unix_millis in Spark, so no Python time zone is involved."""
    has_headers = "headers" in df.columns
    rows = df.selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect()
    return sorted(
        (as_sent(r, has_headers) for r in rows), key=lambda s: (s.topic, s.partition, s.offset)
    )


def as_sent(row: Any, has_headers: bool = True) -> Sent:
    """A source row as a `Sent`, to compare record by record."""
    headers = (
        tuple((h["key"], _bytes(h["value"])) for h in row["headers"] or ()) if has_headers else ()
    )
    return Sent(
        row["topic"],
        row["partition"],
        row["offset"],
        row["ts_ms"],
        _bytes(row["key"]),
        _bytes(row["value"]),
        headers,
    )


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)

"""Columns of an Arrow record batch (or table) as the lists `send_many` takes.

The columnar send: `value` (binary or string, required), and optionally `key`
(binary or string), `timestamp` (int64 milliseconds or an Arrow timestamp)
and `headers` (list of struct<key: string, value: binary>), Kafka's and the
Spark sink's column names. pyarrow converts each column in one call
(`to_pylist`, in C); pyarrow itself is not imported here, so the client
keeps working without it (it comes with the `spark` extra).
"""

from __future__ import annotations

from typing import Any

from lograft.client.errors import SerializationError
from lograft.client.types import Header

COLUMNS = ("value", "key", "timestamp", "headers")


class ArrowColumns:
    """The lists of one batch; a column that is absent is None."""

    __slots__ = ("headers", "keys", "timestamps_ms", "values")

    def __init__(self, batch: Any) -> None:
        names = list(batch.schema.names)
        if "value" not in names:
            raise SerializationError(
                f"an Arrow batch to send needs a 'value' column; it has {names}"
            )
        unknown = [n for n in names if n not in COLUMNS]
        if unknown:
            raise SerializationError(
                f"unknown column(s) {unknown} in an Arrow batch to send; known: {list(COLUMNS)}"
            )
        self.values: list[Any] = _binary(batch, "value")
        self.keys: list[Any] | None = _binary(batch, "key") if "key" in names else None
        self.timestamps_ms: list[int | None] | None = (
            _millis(batch) if "timestamp" in names else None
        )
        self.headers: list[list[Header] | None] | None = (
            _headers(batch) if "headers" in names else None
        )


def _binary(batch: Any, name: str) -> list[Any]:
    column = batch.column(name)
    type_name = str(column.type)
    if type_name in ("string", "large_string"):
        return [None if v is None else v.encode("utf-8") for v in column.to_pylist()]
    if type_name not in ("binary", "large_binary"):
        raise SerializationError(f"column {name!r} must be binary or string, not {type_name}")
    return list(column.to_pylist())


def _millis(batch: Any) -> list[int | None]:
    column = batch.column("timestamp")
    type_name = str(column.type)
    if type_name.startswith("timestamp"):
        import pyarrow as pa  # present: the batch is one of its objects

        # Arrow timestamps are int64s of their unit; Kafka's are milliseconds.
        per_ms = {"s": -1000, "ms": 1, "us": 1_000, "ns": 1_000_000}[column.type.unit]
        ints = column.cast(pa.int64()).to_pylist()
        if per_ms < 0:
            return [None if v is None else v * -per_ms for v in ints]
        return [None if v is None else v // per_ms for v in ints]
    if type_name != "int64":
        raise SerializationError(
            f"column 'timestamp' must be int64 ms or a timestamp, not {type_name}"
        )
    return list(column.to_pylist())


def _headers(batch: Any) -> list[list[Header] | None]:
    out: list[list[Header] | None] = []
    for row in batch.column("headers").to_pylist():
        out.append(None if not row else [(h["key"], h["value"]) for h in row])
    return out

"""A JSON produce body's plain records as columns, encoded without an object per record.

Most produce bodies carry plain records: a value, maybe a key, partition and
timestamp, and no headers. The per-record path (records_json) turned each
into a `ProduceRecord` holding a `RecordInput` (two dataclass instances,
a dozen Python calls) before the batch encoder read them back: at 500 records
per request that was a third of the leader's CPU time (docs/benchmarks.md
"Where the time goes"). For a plain body this module takes the decoded
`request_shapes.ProduceBody` (the same msgspec decode and checks as ever) as
columns, lists of values, keys, partitions and timestamps, and
`plain_batch.build_plain_batch` encodes a partition's batch from them in one
C call: a `string` value is written straight from the decoded `str`.

Same bytes, same errors: a column is only taken when every item is what the
per-record path accepts (a `str` or null for the `string` and `base64`
formats, valid base64, any JSON value for `json`); otherwise `plain_columns`
answers None and the caller runs the per-record path, which raises the error
it always raised (the first bad record's, key before value). The unit tests
compare batches and errors of both paths.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import msgspec

from lograft.api.request_shapes import ProduceBody
from lograft.protocol.plain_batch import (
    BuiltBatch,
    Column,
    attribute_columns,
    build_plain_batch,
    texts_only,
)


@dataclass(frozen=True, slots=True)
class PlainColumns:
    """Records i = 0..n-1 of a body: `values[i]`, `keys[i]` (None: no
    record has a key), `partitions[i]` and `timestamps[i]` (None: no record
    names one). Keys are bytes (what the partitioner hashes); values are
    `str` for the `string` format (written as UTF-8), else bytes."""

    values: Column
    keys: list[bytes | None] | None
    partitions: list[int | None] | None
    timestamps: list[int | None] | None

    def __len__(self) -> int:
        return len(self.values)

    def batch(self, indices: Sequence[int], now_ms: int) -> BuiltBatch:
        """One batch of the records at `indices`, in that order, with its
        encoder's account of them."""
        if len(indices) == len(self.values):  # every record, in order: no copies
            return build_plain_batch(self.values, self.keys, self.timestamps, timestamp_ms=now_ms)
        keys, timestamps = self.keys, self.timestamps
        return build_plain_batch(
            [self.values[i] for i in indices],
            None if keys is None else [keys[i] for i in indices],
            None if timestamps is None else [timestamps[i] for i in indices],
            timestamp_ms=now_ms,
        )


# The record fields read as columns, in this order (`attribute_columns`).
_FIELDS = ("headers", "value", "key", "partition", "timestamp")


def plain_columns(doc: ProduceBody) -> PlainColumns | None:
    """The body's records as columns, or None when some record has headers
    or a key or value the per-record path would refuse (it says why)."""
    # One C pass over the records (was five comprehensions and an any()
    # each: as much CPU as the JSON decode itself at 500 records).
    headers, raw_values, raw_keys, partitions, timestamps = attribute_columns(doc.records, _FIELDS)
    if headers is not None and any(headers):  # {} and [] are no headers
        return None
    if raw_values is None:  # every value null
        raw_values = [None] * len(doc.records)
    values = _column(raw_values, doc.value_format, keep_text=True)
    if values is None:
        return None
    keys: list[bytes | None] | None = None
    if raw_keys is not None:
        keys = _column(raw_keys, doc.key_format, keep_text=False)
        if keys is None:
            return None
    return PlainColumns(values, keys, partitions, timestamps)


@overload
def _column(
    raw: list[Any], fmt: str, *, keep_text: Literal[False]
) -> list[bytes | None] | None: ...
@overload
def _column(raw: list[Any], fmt: str, *, keep_text: bool) -> Column | None: ...
def _column(raw: list[Any], fmt: str, *, keep_text: bool) -> Column | None:
    """A key or value column as the batch stores it (`encode_value`'s
    bytes; a `string` column may stay `str`, encoded as UTF-8 by the batch
    encoder), or None when an item would be refused."""
    if fmt == "json":
        # Compact JSON text of what was sent (msgspec keeps big integers exact).
        encode = msgspec.json.encode
        return [None if v is None else encode(v) for v in raw]
    if not texts_only(raw):
        return None
    texts: list[str | None] = raw  # checked just above
    if fmt == "string":
        if keep_text:
            return texts
        return [None if v is None else v.encode() for v in texts]
    try:
        return [None if v is None else base64.b64decode(v, validate=True) for v in texts]
    except (binascii.Error, ValueError):
        return None


__all__ = ["PlainColumns", "plain_columns"]

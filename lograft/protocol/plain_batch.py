"""A RecordBatch v2 of plain records built from columns, in one C call.

Plain records have a value and maybe a key and a timestamp, and no headers:
what most JSON produce requests carry. The JSON produce path
(api/produce_columns.py) holds them as columns (a list of values, a list of
keys or None, a list of timestamps or None; each value or key a `str`,
written as its UTF-8 bytes, `bytes`, or None), and `build_plain_batch` makes
the same batch `batch.build_batch` makes of the matching `RecordInput`s
(uncompressed, no producer id) without an object per record: the C
extension `_columnencode` encodes the whole batch into one bytes object
(records, then the header and its CRC in front of them: joining a header to
a separately encoded 512 KiB section cost more than encoding it), the
pure-Python fallback (no compiler at install time) goes through
`batch.encode_records`. With the batch comes what a record scan of it would
report (`BuiltBatch.summary`), for the leader to judge the records by the
topic's rules without walking the batch again.

The columns themselves come from the decoded records (one object each) by
`attribute_columns` and are judged by `texts_only`, also one C call each
(a Python twin each for the fallback).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple

import crc32c as _crc32c

from lograft.errors import InvalidRecordError
from lograft.protocol.batch import (
    CRC_POS,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RecordInput,
    encode_records,
)
from lograft.protocol.record_scan import RecordsSummary

# A column item: str (written as UTF-8), bytes, or None (null).
Item = str | bytes | None
# A column: a list (the C encoder takes lists only) of such items.
Column = list[str | None] | list[bytes | None] | list[Item]

# The C encoder's ABI this module speaks (COLUMNENCODE_ABI in _columnencode.c).
C_COLUMNS_ENCODE_ABI: Final = 3

try:
    from lograft.protocol import _columnencode as _columnencode
except ImportError:  # built without a compiler: the fallback below
    _columnencode = None  # type: ignore[assignment]
if _columnencode is not None and getattr(_columnencode, "ABI", 0) != C_COLUMNS_ENCODE_ABI:
    logging.getLogger(__name__).warning(
        "lograft.protocol._columnencode is a stale build (ABI %s, need %s); using the "
        "pure-Python encoder (rerun scripts/setup.sh)",
        getattr(_columnencode, "ABI", 0),
        C_COLUMNS_ENCODE_ABI,
    )
    _columnencode = None  # type: ignore[assignment]

IMPLEMENTATION: Final[Literal["c", "python"]] = "c" if _columnencode is not None else "python"


def encode_columns_python(
    values: Column, keys: Column | None, timestamps: list[int | None] | None, now_ms: int
) -> tuple[bytes, int, int]:
    """The records section of `build_plain_batch_python`'s batch, its first
    and its largest timestamp."""
    records = [
        RecordInput(
            _item_bytes(value, "value"),
            None if keys is None else _item_bytes(keys[i], "key"),
            (),
            None if timestamps is None else timestamps[i],
        )
        for i, value in enumerate(values)
    ]
    return encode_records(records, now_ms, None)


def attribute_columns_python(objects: list[Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    """The fallback for `_columnencode.attribute_columns`: per name, the list
    of that attribute of every object, or None when all are None."""
    columns = []
    for name in names:
        column = [getattr(o, name) for o in objects]
        columns.append(column if any(v is not None for v in column) else None)
    return tuple(columns)


_TEXT_TYPES = frozenset({str, type(None)})


def texts_only_python(column: list[Any]) -> bool:
    """The fallback for `_columnencode.texts_only`."""
    return {type(v) for v in column} <= _TEXT_TYPES


# Per name of `names`, the list of that attribute of each of `objects` (None
# when every one is None), in one pass.
attribute_columns: Callable[[list[Any], tuple[str, ...]], tuple[list[Any] | None, ...]] = (
    _columnencode.attribute_columns if _columnencode is not None else attribute_columns_python
)
# Whether every item of a list is exactly a str or None.
texts_only: Callable[[list[Any]], bool] = (
    _columnencode.texts_only if _columnencode is not None else texts_only_python
)


def _item_bytes(item: Item, what: str) -> bytes | None:
    if item is None or isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    raise TypeError(f"a record's {what} must be str, bytes or None, not {type(item).__name__}")


class BuiltBatch(NamedTuple):
    """A batch `build_plain_batch` encoded, with what a record scan of it
    would report (`record_scan.RecordsSummary`): the leader judges its
    records by the topic's rules from this instead of walking the bytes it
    has just written (storage/log.py `Log.check_built`)."""

    data: bytes
    summary: RecordsSummary


def build_plain_batch(
    values: Column,
    keys: Column | None,
    timestamps: list[int | None] | None,
    *,
    timestamp_ms: int,
) -> BuiltBatch:
    """One uncompressed batch of one record per value, with offset deltas
    0..n-1; `timestamp_ms` stands for a missing timestamp."""
    if not values:
        raise InvalidRecordError("a batch needs at least one record")
    if _columnencode is not None:
        data, delta_min, delta_max, null_keys = _columnencode.encode_batch(
            values, keys, timestamps, timestamp_ms, _crc32c.crc32c
        )
        return BuiltBatch(data, RecordsSummary(delta_min, delta_max, null_keys))
    return build_plain_batch_python(values, keys, timestamps, timestamp_ms)


def build_plain_batch_python(
    values: Column, keys: Column | None, timestamps: list[int | None] | None, now_ms: int
) -> BuiltBatch:
    """The fallback for `_columnencode.encode_batch` (same bytes and errors
    for the types the JSON path passes)."""
    body, base_ts, max_ts = encode_columns_python(values, keys, timestamps, now_ms)
    header = bytearray(
        HEADER.pack(
            0,  # baseOffset: the leader sets it on append
            HEADER_SIZE - LOG_OVERHEAD + len(body),
            NO_PARTITION_LEADER_EPOCH,
            MAGIC,
            0,  # crc, set below
            0,  # attributes: no compression, create time, not transactional
            len(values) - 1,
            base_ts,
            max_ts,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            len(values),
        )
    )
    crc = _crc32c.crc32c(body, _crc32c.crc32c(memoryview(header)[CRC_START:]))
    struct.pack_into(">I", header, CRC_POS, crc)
    stamps = [now_ms if t is None else t for t in timestamps] if timestamps else [now_ms]
    null_keys = len(values) if keys is None else sum(k is None for k in keys)
    summary = RecordsSummary(min(stamps) - base_ts, max_ts - base_ts, null_keys)
    return BuiltBatch(b"".join((header, body)), summary)


__all__ = [
    "C_COLUMNS_ENCODE_ABI",
    "IMPLEMENTATION",
    "BuiltBatch",
    "Column",
    "Item",
    "attribute_columns",
    "build_plain_batch",
    "texts_only",
]

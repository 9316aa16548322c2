"""Validate the records section of a RecordBatch v2 without decoding it.

A broker must walk every record of a batch it appends (Kafka's LogValidator
does the same), but it needs no Record objects to do so. `scan_records` walks
the (decompressed) records section and raises on the first problem; it uses
the C extension `lograft.protocol._recordscan` when it was built and otherwise
a pure-Python walker with the same behaviour. `IMPLEMENTATION` says which one
is active.

Each record is (varint = zigzag varint, at most 10 bytes)::

    length varint           bytes after this field, >= 1
    attributes int8         unused in v2; any value is accepted, as in Kafka
    timestampDelta varlong  reported (its range), not judged
    offsetDelta varint
    keyLength varint        -1 = null key; below -1 is corrupt
    key
    valueLength varint      -1 = null value; below -1 is corrupt
    value
    headerCount varint      >= 0
    per header: headerKeyLength varint (>= 0: keys are never null), headerKey,
                headerValueLength varint (-1 = null), headerValue

Invariants checked, in the order a reader meets them (record by record, the
structure of a record before its offset delta):

- CorruptRecordError (the bytes do not parse): a varint that runs past its
  limit (the record, or for `length` the section), is longer than 10 bytes, or
  carries more than 64 bits (in any field: no int64 encodes that); a length
  that runs past the record; fields that do not exactly fill `length`; a
  negative header count or header key length; key/value lengths below -1; a
  section that ends before `records_count` records; bytes after the last
  record.
- InvalidRecordError (well-formed records that break a rule): `records_count`
  below 1; with `contiguous` (the producer rule) lastOffsetDelta must be
  records_count - 1 and the deltas exactly 0, 1, 2, ...; otherwise (batches
  the compactor rewrote) deltas strictly increase and stay <= lastOffsetDelta.
- RecordTooLargeError: with `record_bytes_max`, a record whose `length` (the
  bytes after its length varint) exceeds it; judged once the length is known
  to fit the section, before the record's fields.

Errors carry `details`: `reason` (a name from REASONS), `record_index` (-1 for
the batch as a whole) and `section_byte` (where in the records section the
problem was seen). Both implementations report the same reason, index, byte
and message; the unit tests hold them to it.

A section that passes is summarised (`RecordsSummary`): the smallest and
largest timestampDelta and how many records have a null key. The scanner
cannot judge those (it knows neither baseTimestamp nor the topic); the
leader's client rules (`lograft.storage.produce_rules`) do.

This is more strict than `batch.decode_records`, the reader, in one respect:
the reader takes any negative key or value length for null (as Kafka's Java
reader does), while appends refuse lengths below -1.
"""

from __future__ import annotations

import logging
from typing import Final, Literal, NamedTuple, NoReturn

from lograft.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LograftError,
    RecordTooLargeError,
)

log = logging.getLogger(__name__)

_VARINT_BYTES_MAX: Final = 10
_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
# The C module's ABI this module speaks (RECORDSCAN_ABI in _recordscan.c).
C_ABI: Final = 3


class RecordsSummary(NamedTuple):
    """What a scan that passed saw of fields it does not judge itself."""

    ts_delta_min: int
    ts_delta_max: int
    null_keys: int


# reason -> error class. The C extension reports the same names.
REASONS: Final[dict[str, type[LograftError]]] = {
    "last_offset_delta": InvalidRecordError,
    "records_count": InvalidRecordError,
    "offset_delta_not_contiguous": InvalidRecordError,
    "offset_delta_not_increasing": InvalidRecordError,
    "offset_delta_past_last": InvalidRecordError,
    "missing_record": CorruptRecordError,
    "varint_truncated": CorruptRecordError,
    "varint_too_long": CorruptRecordError,
    "varint_overflow": CorruptRecordError,
    "record_length": CorruptRecordError,
    "field_overrun": CorruptRecordError,
    "negative_length": CorruptRecordError,
    "header_count": CorruptRecordError,
    "header_key_length": CorruptRecordError,
    "record_slack": CorruptRecordError,
    "trailing_bytes": CorruptRecordError,
    "record_too_large": RecordTooLargeError,
}


def _message(reason: str, rec: int, pos: int, field: str, in_record: bool, a: int, b: int) -> str:
    """The error text; must match format_error in _recordscan.c word for word."""
    if reason == "last_offset_delta":
        return (
            f"lastOffsetDelta {a} does not match recordsCount {b}; a produced batch "
            "numbers its records 0..recordsCount-1"
        )
    if reason == "records_count":
        return f"recordsCount is {a}; a record batch must hold at least one record"
    if reason == "offset_delta_not_contiguous":
        return (
            f"record {rec}: offsetDelta {a} at byte {pos} where {rec} was expected; deltas "
            "must be 0, 1, 2, ... in a produced batch"
        )
    if reason == "offset_delta_not_increasing":
        return f"record {rec}: offsetDelta {a} at byte {pos} does not increase on the previous {b}"
    if reason == "offset_delta_past_last":
        return f"record {rec}: offsetDelta {a} at byte {pos} is past lastOffsetDelta {b}"
    if reason == "missing_record":
        return (
            f"the records section ends at byte {pos} after {rec} of the {a} records "
            "recordsCount promises"
        )
    if reason == "varint_truncated":
        limit = "record" if in_record else "records section"
        return f"record {rec}: {field} varint at byte {pos} runs past the end of the {limit}"
    if reason == "varint_too_long":
        return f"record {rec}: {field} varint at byte {pos} is longer than 10 bytes"
    if reason == "varint_overflow":
        return f"record {rec}: {field} varint at byte {pos} overflows 64 bits"
    if reason == "record_length":
        if a < 1:
            return f"record {rec}: length {a} at byte {pos} is not positive"
        return (
            f"record {rec}: length {a} at byte {pos} exceeds the {b} bytes left in the "
            "records section"
        )
    if reason == "field_overrun":
        return (
            f"record {rec}: {field} of {a} bytes at byte {pos} runs past the end of the record "
            f"({b} bytes left)"
        )
    if reason == "negative_length":
        return f"record {rec}: {field} {a} at byte {pos} is below -1 (null)"
    if reason == "header_count":
        return f"record {rec}: headerCount {a} at byte {pos} is negative"
    if reason == "header_key_length":
        return (
            f"record {rec}: headerKeyLength {a} at byte {pos} is negative; header keys "
            "may not be null"
        )
    if reason == "record_slack":
        return f"record {rec}: {a} bytes at byte {pos} that its fields do not explain"
    if reason == "trailing_bytes":
        return f"{a} trailing bytes at byte {pos} after the last record of the batch"
    if reason == "record_too_large":
        return (
            f"record {rec}: length {a} at byte {pos} exceeds the limit of {b} bytes for one record"
        )
    raise AssertionError(f"unknown scan failure {reason}")


def _error(reason: str, message: str, rec: int, pos: int) -> LograftError:
    return REASONS[reason](message, reason=reason, record_index=rec, section_byte=pos)


def error_from_c(exc: ValueError) -> LograftError | None:
    """The error a C refusal `ValueError(message, reason, record_index, byte)` stands
    for (a reason the scanner does not know, such as a decoder's overflow, is a
    CorruptRecordError); None for any other ValueError."""
    if len(exc.args) != 4:
        return None
    message, reason, rec, pos = exc.args
    cls = REASONS.get(reason, CorruptRecordError)
    return cls(message, reason=reason, record_index=rec, section_byte=pos)


def _fail(
    reason: str,
    rec: int,
    pos: int,
    *,
    field: str = "",
    in_record: bool = True,
    a: int = 0,
    b: int = 0,
) -> NoReturn:
    # from None: the fast walk calls the careful one from an except clause,
    # and its IndexError is no part of the story.
    raise _error(reason, _message(reason, rec, pos, field, in_record, a, b), rec, pos) from None


# --- the pure-Python walker ----------------------------------------------------
#
# Two walks of one record. The fast one handles the ordinary shape (one- and
# two-byte varints, a one-byte headerCount) with no bounds checks of its own:
# an index past the buffer raises IndexError, and reads past the record only
# push the position past its end, which the final `p == rec_end` check catches
# because the position never moves backwards. Anything unusual (a longer
# varint, an odd length, a bad end) hands the record to the careful walk,
# which checks every read and reports the exact problem, so error reports do
# not depend on which walk ran. Nothing is sliced or copied per record.


class _Unusual(Exception):
    """The fast walk declines this record; the careful walk takes it."""


def _varint(
    data: bytes | bytearray, p: int, limit: int, rec: int, field: str, in_record: bool = True
) -> tuple[int, int]:
    """(zigzag value, position after) of the varint at p, every read below limit."""
    start = p
    raw = 0
    shift = 0
    while True:
        if p >= limit:
            _fail("varint_truncated", rec, start, field=field, in_record=in_record)
        byte = data[p]
        p += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if p - start >= _VARINT_BYTES_MAX:
            _fail("varint_too_long", rec, start, field=field, in_record=in_record)
    if raw >> 64:
        _fail("varint_overflow", rec, start, field=field, in_record=in_record)
    return (raw >> 1) ^ -(raw & 1), p


def _skip(
    data: bytes | bytearray, p: int, rec_end: int, rec: int, len_field: str, field: str
) -> int:
    """Position after a nullable length-prefixed field (-1 = null) at p."""
    value, q = _varint(data, p, rec_end, rec, len_field)
    if value >= 0:
        if value > rec_end - q:
            _fail("field_overrun", rec, q, field=field, a=value, b=rec_end - q)
        return q + value
    if value < -1:
        _fail("negative_length", rec, p, field=len_field, a=value)
    return q


def _skip_headers(data: bytes | bytearray, p: int, rec_end: int, rec: int, count: int) -> int:
    """Position after `count` headers starting at p; count >= 0."""
    for _ in range(count):
        hk_len, q = _varint(data, p, rec_end, rec, "headerKeyLength")
        if hk_len < 0:
            _fail("header_key_length", rec, p, a=hk_len)
        if hk_len > rec_end - q:
            _fail("field_overrun", rec, q, field="headerKey", a=hk_len, b=rec_end - q)
        p = _skip(data, q + hk_len, rec_end, rec, "headerValueLength", "headerValue")
    return p


def _careful_record(
    data: bytes | bytearray, p: int, n: int, rec: int, records_count: int, record_max: int
) -> tuple[int, int, int, int, int]:
    """Walk record `rec` at p checking every read: (end, offsetDelta, its byte,
    timestampDelta, keyLength).

    Raises on any structural problem; the offsetDelta is judged by the caller.
    """
    if p >= n:
        _fail("missing_record", rec, p, a=records_count)
    length, q = _varint(data, p, n, rec, "length", in_record=False)
    if length < 1 or length > n - q:
        _fail("record_length", rec, p, a=length, b=n - q)
    if 0 <= record_max < length:
        _fail("record_too_large", rec, p, a=length, b=record_max)
    rec_end = q + length
    q += 1  # attributes: unused in v2, any value is accepted (as Kafka)
    ts_delta, q = _varint(data, q, rec_end, rec, "timestampDelta")
    off_pos = q
    off_delta, q = _varint(data, q, rec_end, rec, "offsetDelta")
    key_len, _after_len = _varint(data, q, rec_end, rec, "keyLength")
    q = _skip(data, q, rec_end, rec, "keyLength", "key")
    q = _skip(data, q, rec_end, rec, "valueLength", "value")
    n_headers, after = _varint(data, q, rec_end, rec, "headerCount")
    if n_headers < 0:
        _fail("header_count", rec, q, a=n_headers)
    q = _skip_headers(data, after, rec_end, rec, n_headers)
    if q != rec_end:
        _fail("record_slack", rec, q, a=rec_end - q)
    return q, off_delta, off_pos, ts_delta, key_len


def scan_records_python(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    *,
    contiguous: bool,
    record_bytes_max: int | None = None,
) -> RecordsSummary:
    """The pure-Python walker; see the module docstring for the rules."""
    record_max = -1 if record_bytes_max is None else record_bytes_max
    if isinstance(data, memoryview):
        # Indexing a memoryview is slower than bytes and its len() counts
        # items, not bytes, for other formats: copy once.
        data = data.tobytes()
    if contiguous and last_offset_delta != records_count - 1:
        _fail("last_offset_delta", -1, 0, a=last_offset_delta, b=records_count)
    if records_count <= 0:
        _fail("records_count", -1, 0, a=records_count)
    n = len(data)
    p = 0
    prev = -1
    ts_min, ts_max, null_keys = _INT64_MAX, _INT64_MIN, 0
    for i in range(records_count):
        start = p
        try:
            # length (two bytes for records of 64..8191 bytes)
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif (c := data[p + 1]) < 0x80:
                raw = (b & 0x7F) | (c << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                raise _Unusual
            rec_end = p + length
            if length < 1 or rec_end > n or 0 <= record_max < length:
                raise _Unusual
            p += 1  # attributes
            b = data[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif (c := data[p + 1]) < 0x80:
                raw = (b & 0x7F) | (c << 7)
                ts_delta = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                raise _Unusual
            off_pos = p
            b = data[p]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif (c := data[p + 1]) < 0x80:
                raw = (b & 0x7F) | (c << 7)
                off_delta = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                raise _Unusual
            b = data[p]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                p += 1
            elif (c := data[p + 1]) < 0x80:
                raw = (b & 0x7F) | (c << 7)
                key_len = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                raise _Unusual
            if key_len > 0:
                p += key_len
            b = data[p]
            if b < 0x80:
                val_len = (b >> 1) ^ -(b & 1)
                p += 1
            elif (c := data[p + 1]) < 0x80:
                raw = (b & 0x7F) | (c << 7)
                val_len = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                raise _Unusual
            if val_len > 0:
                p += val_len
            if key_len < -1 or val_len < -1 or p >= rec_end:
                raise _Unusual
            b = data[p]
            p += 1
            if b:
                # Every field so far lies inside the record (p < rec_end and
                # p only grows), so the careful header walk sees what the
                # careful record walk would and may report directly.
                if b >= 0x80 or b & 1:
                    raise _Unusual
                p = _skip_headers(data, p, rec_end, i, b >> 1)
            if p != rec_end:
                raise _Unusual
        except (IndexError, _Unusual):
            p, off_delta, off_pos, ts_delta, key_len = _careful_record(
                data, start, n, i, records_count, record_max
            )
        if contiguous and off_delta != i:
            _fail("offset_delta_not_contiguous", i, off_pos, a=off_delta)
        if off_delta <= prev:
            _fail("offset_delta_not_increasing", i, off_pos, a=off_delta, b=prev)
        if off_delta > last_offset_delta:
            _fail("offset_delta_past_last", i, off_pos, a=off_delta, b=last_offset_delta)
        prev = off_delta
        ts_min = ts_delta if ts_delta < ts_min else ts_min
        ts_max = ts_delta if ts_delta > ts_max else ts_max
        null_keys += key_len == -1
    if p != n:
        _fail("trailing_bytes", -1, p, a=n - p)
    return RecordsSummary(ts_min, ts_max, null_keys)


# --- the C walker ------------------------------------------------------------

# The name is typed as the module (_recordscan.pyi); None stands for "not
# built or stale", hence the two ignores. `as` marks the re-export that
# record_columns reads.
try:
    from lograft.protocol import _recordscan as _recordscan
except ImportError:  # not built (no compiler at install time): use the fallback
    _recordscan = None  # type: ignore[assignment]
if _recordscan is not None and getattr(_recordscan, "ABI", 1) != C_ABI:
    # Built from an older _recordscan.c (an editable install keeps its last
    # build until `pip install -e .` runs again): its answers are not the
    # ones this module reads, so it is not used at all.
    log.warning(
        "lograft.protocol._recordscan is a stale build (ABI %s, need %s); using the "
        "pure-Python record scanner until it is rebuilt (pip install -e .)",
        getattr(_recordscan, "ABI", 1),
        C_ABI,
    )
    _recordscan = None  # type: ignore[assignment]


def scan_records_c(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    *,
    contiguous: bool,
    record_bytes_max: int | None = None,
) -> RecordsSummary:
    """The C walker; raises RuntimeError when the extension was not built."""
    if _recordscan is None:
        raise RuntimeError("lograft.protocol._recordscan was not built")
    if isinstance(data, memoryview) and not data.c_contiguous:
        data = data.tobytes()
    try:
        return RecordsSummary(
            *_recordscan.scan(
                data,
                records_count,
                last_offset_delta,
                contiguous,
                -1 if record_bytes_max is None else record_bytes_max,
            )
        )
    except ValueError as exc:
        err = error_from_c(exc)
        if err is None:
            raise
        raise err from None


IMPLEMENTATION: Final[Literal["c", "python"]] = "c" if _recordscan is not None else "python"
"""Which walker `scan_records` uses: the C extension or the pure-Python one."""

_scan = scan_records_c if _recordscan is not None else scan_records_python


def scan_records(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    *,
    contiguous: bool,
    record_bytes_max: int | None = None,
) -> RecordsSummary:
    """Check a records section against recordsCount and lastOffsetDelta.

    `data` is the decompressed records section of one batch. Raises
    CorruptRecordError, InvalidRecordError or (over `record_bytes_max`)
    RecordTooLargeError (see the module docstring) on the first problem;
    returns the section's summary when every record is well formed.
    """
    # Both come from int32 header fields; anything else is a caller's bug,
    # and the C side could not take it.
    if not (_INT32_MIN <= records_count <= _INT32_MAX):
        raise ValueError(f"records_count {records_count} is not an int32")
    if not (_INT32_MIN <= last_offset_delta <= _INT32_MAX):
        raise ValueError(f"last_offset_delta {last_offset_delta} is not an int32")
    if record_bytes_max is not None and not (0 <= record_bytes_max <= _INT64_MAX):
        raise ValueError(f"record_bytes_max {record_bytes_max} is not a non-negative int64")
    return _scan(
        data,
        records_count,
        last_offset_delta,
        contiguous=contiguous,
        record_bytes_max=record_bytes_max,
    )

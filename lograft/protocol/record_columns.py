"""Decode a records section into columns, not Record objects.

A reader that hands records on column by column (the Spark source builds
Arrow batches) needs no Python object per record. `decode_columns` decodes
the decompressed records section of one batch in a single call into flat,
native-endian buffers Arrow wraps as they are:

- `offsets`, `timestamps_us`: int64 per record (absolute offset; the
  timestamp in microseconds: baseTimestamp + timestampDelta, or the batch's
  maxTimestamp for LogAppendTime);
- keys and values each as `*_data` (every present key/value back to back),
  `*_offsets` (int32 start of each record's bytes, counted from the
  caller's `*_base`, so sections can be joined by concatenation) and
  `*_valid` (one byte per record, 1 present, 0 null) with `*_nulls`;
- `headers` (only when asked): per record a tuple of (key bytes, value
  bytes or None).

The section is first walked by the record scanner with the read rules
(`contiguous=False`: a compacted batch has gaps), so malformed bytes are
refused with exactly the scanner's CorruptRecordError/InvalidRecordError,
reason, record index and byte (see lograft.protocol.record_scan). Two more
reasons (CorruptRecordError): `timestamp_overflow`, a timestamp that does
not fit int64 microseconds, and `offset_overflow`, an offset past int64.
Every buffer is bounded by the section's size: the header's recordsCount is
believed only once the scan found that many records in the bytes.

The C extension does it when built (`_recordscan.decode_columns`), else a
pure-Python twin with the same answers (the unit tests compare them).
"""

from __future__ import annotations

import logging
from array import array
from typing import Final, Literal, NamedTuple

from lograft.errors import CorruptRecordError
from lograft.protocol import record_scan
from lograft.protocol.record_scan import error_from_c, scan_records_python
from lograft.protocol.varint import decode_varint

log = logging.getLogger(__name__)

# The decode_columns ABI this module speaks (RECORDSCAN_COLUMNS_ABI in _recordscan.c).
C_COLUMNS_ABI: Final = 1
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1

HeaderBytes = tuple[tuple[bytes, bytes | None], ...]


class RecordColumns(NamedTuple):
    """One section's records as columns (buffers in native byte order)."""

    offsets: bytes  # int64 per record
    timestamps_us: bytes  # int64 per record
    key_data: bytes
    key_offsets: bytes  # int32 per record: start of its key in the joined key data
    key_valid: bytes  # one byte per record: 1 = key present
    key_nulls: int
    value_data: bytes
    value_offsets: bytes
    value_valid: bytes
    value_nulls: int
    headers: list[HeaderBytes] | None


def _timestamp_overflow(rec: int, base_timestamp: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record {rec}: its timestamp (baseTimestamp {base_timestamp} plus its timestampDelta) "
        "does not fit int64 microseconds",
        reason="timestamp_overflow",
        record_index=rec,
        section_byte=-1,
    )


def _offset_overflow(rec: int, base_offset: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record {rec}: its offset (baseOffset {base_offset} plus its offsetDelta) does not "
        "fit int64",
        reason="offset_overflow",
        record_index=rec,
        section_byte=-1,
    )


class _BytesColumn:
    """One nullable bytes column (keys or values) as the Python decoder builds it."""

    def __init__(self, base: int) -> None:
        self.base = base  # the caller's *_base: where this section's bytes start
        self.parts: list[bytes] = []
        self.size = 0
        self.offsets = array("i")
        self.valid = bytearray()

    def take(self, data: bytes | bytearray, p: int) -> int:
        """Append the varint-length-prefixed field at `p` (-1: null); return the end."""
        length, p = decode_varint(data, p)
        self.offsets.append(self.base + self.size)
        self.valid.append(length >= 0)
        if length < 0:
            return p
        self.parts.append(bytes(data[p : p + length]))
        self.size += length
        return p + length

    def buffers(self) -> tuple[bytes, bytes, bytes, int]:
        """*_data, *_offsets, *_valid, *_nulls, as RecordColumns holds them."""
        return (
            b"".join(self.parts),
            self.offsets.tobytes(),
            bytes(self.valid),
            len(self.valid) - sum(self.valid),
        )


def decode_columns_python(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    *,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    key_base: int = 0,
    value_base: int = 0,
    want_headers: bool = False,
) -> RecordColumns:
    """The pure-Python twin of the C decoder (same arguments and answers)."""
    if isinstance(data, memoryview):
        data = data.tobytes()
    n = len(data)
    if key_base < 0 or value_base < 0 or key_base > _INT32_MAX - n or value_base > _INT32_MAX - n:
        raise OverflowError("decode_columns: key/value base plus the section exceeds int32 offsets")
    scan_records_python(data, records_count, last_offset_delta, contiguous=False)
    offsets, stamps = array("q"), array("q")
    keys, values = _BytesColumn(key_base), _BytesColumn(value_base)
    headers: list[HeaderBytes] = []
    overflow = offset_overflow = -1
    p = 0
    for i in range(records_count):
        length, p = decode_varint(data, p)
        rec_end = p + length
        p += 1  # attributes
        ts_delta, p = decode_varint(data, p)
        off_delta, p = decode_varint(data, p)
        offset = base_offset + off_delta
        if offset > _INT64_MAX:  # both are int64 fields; only the sum can overflow
            offset = 0
            offset_overflow = i if offset_overflow < 0 else offset_overflow
        offsets.append(offset)
        ts = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        us = ts * 1000
        if not _INT64_MIN <= ts <= _INT64_MAX or not _INT64_MIN <= us <= _INT64_MAX:
            us = 0
            overflow = i if overflow < 0 else overflow
        stamps.append(us)
        p = keys.take(data, p)
        p = values.take(data, p)
        nh, p = decode_varint(data, p)
        hs: list[tuple[bytes, bytes | None]] = []
        for _ in range(nh):
            hk, p = decode_varint(data, p)
            hkey = bytes(data[p : p + hk])
            p += hk
            hv, p = decode_varint(data, p)
            hval = None
            if hv >= 0:
                hval = bytes(data[p : p + hv])
                p += hv
            hs.append((hkey, hval))
        headers.append(tuple(hs))
        p = rec_end
    if offset_overflow >= 0:
        raise _offset_overflow(offset_overflow, base_offset)
    if overflow >= 0:
        raise _timestamp_overflow(overflow, base_timestamp)
    return RecordColumns(
        offsets.tobytes(),
        stamps.tobytes(),
        *keys.buffers(),
        *values.buffers(),
        headers if want_headers else None,
    )


_c = record_scan._recordscan
if _c is not None and getattr(_c, "COLUMNS_ABI", 0) != C_COLUMNS_ABI:
    # A build from before decode_columns (or from another version of it).
    log.warning(
        "lograft.protocol._recordscan has no decode_columns of ABI %s (a stale build); "
        "using the pure-Python column decoder until it is rebuilt (pip install -e .)",
        C_COLUMNS_ABI,
    )
    _c = None  # type: ignore[assignment]  # typed as the module; None: not available


def decode_columns_c(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    *,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    key_base: int = 0,
    value_base: int = 0,
    want_headers: bool = False,
) -> RecordColumns:
    """The C decoder; raises RuntimeError when the extension was not built."""
    if _c is None:
        raise RuntimeError("lograft.protocol._recordscan.decode_columns is not available")
    if isinstance(data, memoryview) and not data.c_contiguous:
        data = data.tobytes()
    try:
        return RecordColumns(
            *_c.decode_columns(
                data,
                records_count,
                last_offset_delta,
                base_offset,
                base_timestamp,
                log_append_time is not None,
                0 if log_append_time is None else log_append_time,
                key_base,
                value_base,
                want_headers,
            )
        )
    except ValueError as exc:
        err = error_from_c(exc)
        if err is None:
            raise
        raise err from None


IMPLEMENTATION: Final[Literal["c", "python"]] = "c" if _c is not None else "python"
"""Which decoder `decode_columns` uses."""

decode_columns = decode_columns_c if _c is not None else decode_columns_python

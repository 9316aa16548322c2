"""Decode a records section into a list of `Record`s in one call (the consumer's path).

`batch.decode_records` walks a section in Python, one varint at a time, and
builds each `Record` through the frozen dataclass's `__init__`; on the
client that was most of a consumer's CPU (docs/benchmarks.md, "Where the
time goes: flame graphs"). `decode_record_list` does the same in C when the
extension is built (`_recordscan.decode_records`): the section is checked by
the record scanner with the read rules (`contiguous=False`: a compacted
batch has gaps), so malformed bytes are refused with exactly the scanner's
CorruptRecordError/InvalidRecordError, reason, record index and byte
(lograft.protocol.record_scan), and then each Record is allocated and its
slots filled directly. The pure-Python twin runs the same scan, then
`batch.decode_records`; both give equal answers (the unit tests compare
them).

Records below `start_offset` are stepped over. A `record_bytes_max` bound
is `batch.decode_records`' alone: the consumer does not use it.

`decode_consumer_records` decodes straight into the consumer's records
(topic, partition and timestamp type given) for a consumer without
deserializers, whose keys and values are the bytes. The objects C builds
are not tracked by the cyclic collector: nothing in them can form a cycle,
and a consumer holds a response's worth of them at a time.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Literal, TypeVar

from lograft.protocol import record_scan
from lograft.protocol.batch import BatchHeader, Record, decode_records
from lograft.protocol.record_scan import error_from_c, scan_records_python

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# The decode_records ABI this module speaks (RECORDSCAN_RECORDS_ABI in _recordscan.c).
C_RECORDS_ABI: Final = 2


def decode_record_list_python(
    data: bytes | memoryview, header: BatchHeader, start_offset: int | None = None
) -> list[Record]:
    """The pure-Python decoder: the scanner's checks, then batch.decode_records."""
    scan_records_python(data, header.records_count, header.last_offset_delta, contiguous=False)
    return list(decode_records(data, header, start_offset=start_offset))


_c = record_scan._recordscan
if _c is not None and getattr(_c, "RECORDS_ABI", 0) != C_RECORDS_ABI:
    log.warning(
        "lograft.protocol._recordscan has no decode_records of ABI %s (a stale build); "
        "using the pure-Python record decoder until it is rebuilt (pip install -e .)",
        C_RECORDS_ABI,
    )
    _c = None  # type: ignore[assignment]  # typed as the module; None: not available


def decode_record_list_c(
    data: bytes | memoryview, header: BatchHeader, start_offset: int | None = None
) -> list[Record]:
    """The C decoder; raises RuntimeError when the extension was not built."""
    return _call_c(data, header, start_offset, Record)


def _call_c(
    data: bytes | memoryview,
    header: BatchHeader,
    start_offset: int | None,
    out_type: type[_T],
    *consumer: Any,
) -> list[_T]:
    if _c is None:
        raise RuntimeError("lograft.protocol._recordscan.decode_records is not available")
    if isinstance(data, memoryview) and not data.c_contiguous:
        data = data.tobytes()
    try:
        return _c.decode_records(
            data,
            header.records_count,
            header.last_offset_delta,
            header.base_offset,
            header.base_timestamp,
            header.is_log_append_time,
            header.max_timestamp,
            start_offset is not None,
            0 if start_offset is None else start_offset,
            out_type,
            *consumer,
        )
    except ValueError as exc:
        err = error_from_c(exc)
        if err is None:
            raise
        raise err from None


IMPLEMENTATION: Final[Literal["c", "python"]] = "c" if _c is not None else "python"
"""Which decoder `decode_record_list` uses."""

decode_record_list = decode_record_list_c if _c is not None else decode_record_list_python


def decode_consumer_records_python(
    data: bytes | memoryview,
    header: BatchHeader,
    start_offset: int | None,
    topic: str,
    partition: int,
    timestamp_type: Any,
    out_type: type[_T],
) -> list[_T]:
    """The pure-Python twin of `decode_consumer_records_c`."""
    return [
        out_type(topic, partition, r.offset, r.timestamp, timestamp_type, r.key, r.value, r.headers)  # type: ignore[call-arg]
        for r in decode_record_list_python(data, header, start_offset)
    ]


def decode_consumer_records_c(
    data: bytes | memoryview,
    header: BatchHeader,
    start_offset: int | None,
    topic: str,
    partition: int,
    timestamp_type: Any,
    out_type: type[_T],
) -> list[_T]:
    """A section's records as the consumer's records (`out_type`: slots topic,
    partition, offset, timestamp, timestamp_type, key, value, headers), key and
    value as bytes, in one C call."""
    return _call_c(data, header, start_offset, out_type, topic, partition, timestamp_type)


decode_consumer_records = (
    decode_consumer_records_c if _c is not None else decode_consumer_records_python
)
"""A consumer without deserializers decodes straight into its records with this."""

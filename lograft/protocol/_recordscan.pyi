"""Types of the C extension built from _recordscan.c, for the type checker.

Its callers are record_scan.py (scan), record_columns.py (decode_columns) and
record_decode.py (decode_records);
the argument order and the answers follow the docstrings in _recordscan.c.
"""

from typing import Any, TypeVar

_R = TypeVar("_R")

ABI: int
COLUMNS_ABI: int
RECORDS_ABI: int

def scan(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    contiguous: bool,
    record_max: int = -1,
    /,
) -> tuple[int, int, int]: ...
def decode_columns(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    base_offset: int,
    base_timestamp: int,
    is_log_append_time: bool,
    max_timestamp: int,
    key_base: int,
    value_base: int,
    want_headers: bool,
    /,
) -> tuple[
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    int,
    bytes,
    bytes,
    bytes,
    int,
    list[tuple[tuple[bytes, bytes | None], ...]] | None,
]: ...
def decode_records(
    data: bytes | bytearray | memoryview,
    records_count: int,
    last_offset_delta: int,
    base_offset: int,
    base_timestamp: int,
    is_log_append_time: bool,
    max_timestamp: int,
    has_start: bool,
    start_offset: int,
    record_type: type[_R],
    topic: str | None = None,
    partition: int | None = None,
    timestamp_type: Any = None,
    /,
) -> list[_R]: ...

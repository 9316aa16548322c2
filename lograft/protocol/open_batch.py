"""`OpenBatch`: one producer batch's records section, encoded record by record.

The producer appends each record as it is sent (one C call, no Python
object per record) and wraps the section in its 61-byte header when the
batch is drained (`batch.batch_from_records`: producer id, epoch and base
sequence are known only then). Each record is encoded exactly as
`batch.encode_records` would encode it (offset delta = its index,
timestamp delta against the first record's timestamp), so the bytes equal
`build_batch`'s for the same records (tests/unit/protocol compare them).

Room: a record enters while the section stays within `limit_bytes` (an
empty batch takes any record, so a record larger than a batch gets one of
its own) and the count is below `limit_records` (0: no such limit); a record
whose encoding exceeds `record_max` never enters. `append` answers the
record's index, -1 for "no room here" and -2 for "too large anywhere".
`full` is true when the next record of the size of the last would not fit.
A timestamp of None is the time of the append (milliseconds since the epoch).

`run_start` is the index the last `append_many`'s first record got (its
run is run_start..run_start+n-1 even if single appends came before it).

`OpenBatch` is the C type of `_recordencode` when built (batch.py's
`ENCODE_IMPLEMENTATION` says which); `OpenBatchPython` is its pure-Python
twin with the same answers. Only the C type's `append` is atomic (one C
call holding the GIL); the twin's may interleave with another thread's, so
its callers must serialise appends.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lograft.protocol import batch as _batch
from lograft.protocol.batch import Header, _encode_record

NO_ROOM = -1
TOO_LARGE = -2


def _field(obj: Any, what: str) -> bytes | None:
    if obj is None or isinstance(obj, bytes):
        return obj
    if isinstance(obj, bytearray | memoryview):
        return bytes(obj)
    raise TypeError(f"a record's {what} must be bytes-like or None, not {type(obj).__name__}")


def _headers(headers: Sequence[Header] | None) -> list[Header]:
    if headers is None:
        return []
    out: list[Header] = []
    for pair in headers:
        k, v = pair
        if not isinstance(k, str):
            raise TypeError(f"a header key must be str, not {type(k).__name__}")
        out.append((k, _field(v, "header value")))
    return out


class OpenBatchPython:
    __slots__ = (
        "_last",
        "_parts",
        "_timestamps",
        "base_timestamp",
        "closed",
        "count",
        "limit_bytes",
        "limit_records",
        "max_timestamp",
        "record_max",
        "run_start",
        "size",
    )

    def __init__(self, limit_bytes: int, limit_records: int, record_max: int) -> None:
        if limit_bytes < 0 or limit_records < 0 or record_max < 0:
            raise ValueError("OpenBatch limits must be >= 0")
        self.limit_bytes = limit_bytes
        self.limit_records = limit_records
        self.record_max = record_max
        self._parts: list[bytes] = []
        self._timestamps: list[int] = []
        self._last = 0
        self.size = 0
        self.count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0
        self.run_start = 0
        self.closed = False

    def append(
        self,
        value: Any,
        key: Any = None,
        headers: Sequence[Header] | None = None,
        timestamp: int | None = None,
    ) -> int:
        return self._append(value, key, headers, timestamp, int(time.time() * 1000))

    def _append(
        self,
        value: Any,
        key: Any,
        headers: Sequence[Header] | None,
        timestamp: int | None,
        now: int,
    ) -> int:
        if self.closed or (self.limit_records and self.count >= self.limit_records):
            return NO_ROOM
        ts = now if timestamp is None else timestamp
        if not isinstance(ts, int):
            raise TypeError(f"a timestamp must be an int, not {type(ts).__name__}")
        base = self.base_timestamp if self.count else ts
        encoded = _encode_record(
            self.count, ts - base, _field(key, "key"), _field(value, "value"), _headers(headers)
        )
        if len(encoded) > self.record_max:
            return TOO_LARGE
        if self.count and len(encoded) > self.limit_bytes - self.size:
            return NO_ROOM
        self._parts.append(encoded)
        self._timestamps.append(ts)
        self.size += len(encoded)
        self._last = len(encoded)
        if self.count == 0:
            self.base_timestamp = self.max_timestamp = ts
        elif ts > self.max_timestamp:
            self.max_timestamp = ts
        self.count += 1
        return self.count - 1

    def append_many(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        timestamps: Sequence[int | None] | None,
        start: int,
    ) -> int:
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError("keys must have one entry per value")
        if timestamps is not None and len(timestamps) != n:
            raise ValueError("timestamps must have one entry per value")
        if not 0 <= start <= n:
            raise ValueError("start out of range")
        now = int(time.time() * 1000)
        self.run_start = self.count
        i = start
        while i < n:
            key = keys[i] if keys is not None else None
            ts = timestamps[i] if timestamps is not None else None
            if self._append(values[i], key, None, ts, now) < 0:
                break
            i += 1
        return i - start

    @property
    def full(self) -> bool:
        if self.limit_records and self.count >= self.limit_records:
            return True
        return self.count > 0 and self.limit_bytes - self.size < self._last

    def records(self) -> bytes:
        return b"".join(self._parts)

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.closed = True
        self._parts = []
        self.size = 0

    def timestamp(self, index: int) -> int:
        if not 0 <= index < self.count:
            raise IndexError("no record at that index")
        return self._timestamps[index]


if TYPE_CHECKING:
    OpenBatch = OpenBatchPython  # the C type has the same methods and answers
else:
    OpenBatch = (
        _batch._recordencode.OpenBatch if _batch._recordencode is not None else OpenBatchPython
    )

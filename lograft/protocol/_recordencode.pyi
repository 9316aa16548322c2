"""Types of the C extension built from _recordencode.c, for the type checker.

Its callers are batch.py (encode_records), open_batch.py (OpenBatch, the
producer's batch built record by record) and partitioner.py (murmur2); the
arguments and the answers follow the docstrings in _recordencode.c.
"""

from collections.abc import Sequence
from typing import Any

from lograft.protocol.batch import RecordInput

ABI: int

def encode_records(
    records: Sequence[RecordInput],
    default_timestamp: int,
    offset_deltas: Sequence[int] | None,
    /,
) -> tuple[bytes, int, int]: ...
def murmur2(data: bytes | bytearray | memoryview, /) -> int: ...

class OpenBatch:
    def __init__(self, limit_bytes: int, limit_records: int, record_max: int) -> None: ...
    def append(
        self,
        value: Any,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        timestamp: int | None = None,
        /,
    ) -> int: ...
    def append_many(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        timestamps: Sequence[int | None] | None,
        start: int,
        /,
    ) -> int: ...
    def records(self) -> bytes: ...
    def close(self) -> None: ...
    def release(self) -> None: ...
    def timestamp(self, index: int, /) -> int: ...
    @property
    def full(self) -> bool: ...
    @property
    def count(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def run_start(self) -> int: ...

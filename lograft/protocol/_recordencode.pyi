"""Types of the C extension built from _recordencode.c, for the type checker.

Its caller is batch.py (encode_records); the arguments and the answer follow
the docstring in _recordencode.c.
"""

from collections.abc import Sequence

from lograft.protocol.batch import RecordInput

ABI: int

def encode_records(
    records: Sequence[RecordInput],
    default_timestamp: int,
    offset_deltas: Sequence[int] | None,
    /,
) -> tuple[bytes, int, int]: ...

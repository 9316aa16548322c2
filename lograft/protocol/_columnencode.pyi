"""Types of the C extension built from _columnencode.c, for the type checker.

Its caller is plain_batch.py (build_plain_batch, attribute_columns,
texts_only); the arguments and the
answer follow the docstring in _columnencode.c.
"""

from collections.abc import Callable
from typing import Any

from lograft.protocol.plain_batch import Column

ABI: int

def encode_batch(
    values: Column,
    keys: Column | None,
    timestamps: list[int | None] | None,
    default_timestamp: int,
    crc32c: Callable[[memoryview], int],
    /,
) -> tuple[bytes, int, int, int]: ...
def attribute_columns(
    objects: list[Any], names: tuple[str, ...], /
) -> tuple[list[Any] | None, ...]: ...
def texts_only(column: list[Any], /) -> bool: ...

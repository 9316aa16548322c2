#!/usr/bin/env python3
"""Fail unless the C record scanner, decoder and encoders are built and speak this checkout's ABI.

The encoder module (`_recordencode`) also holds the producer's `OpenBatch`
(a batch's records encoded as they are sent) and `murmur2` (the keyed
partitioner); both are checked to be the ones in use.

setup.py builds `lograft.protocol._recordscan` (and its producer-side twin
`lograft.protocol._recordencode`, which batch.build_batch uses) with `optional=True`, so an
install without a compiler still works (record_scan and record_columns fall
back to pure Python, 50x slower on append). That fallback is for users; the
test command (scripts/test.sh, and so CI) runs this first, so a missing or
stale build fails the suite instead of silently testing the fallback.

    .venv/bin/python scripts/check_native.py

Prints what it found; exit status 1 with the reasons when the C extension is
not what the Python modules would use.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

FIX = (
    "rebuild it with a C compiler and the Python headers present: scripts/setup.sh "
    "(or `pip install -e .`); setup.py builds it with optional=True, so a failed "
    "compile does not stop the install"
)


def problems(
    extension: ModuleType | None, record_scan: ModuleType, record_columns: ModuleType
) -> list[str]:
    """Why the C extension is not in use; empty when both modules use it.

    `extension` is `lograft.protocol._recordscan`, or None when it does not
    import (not built)."""
    if extension is None:
        return [f"lograft.protocol._recordscan is not built: {FIX}"]
    out: list[str] = []
    abi = getattr(extension, "ABI", 1)
    if abi != record_scan.C_ABI:
        out.append(
            f"lograft.protocol._recordscan is a stale build (ABI {abi}, "
            f"record_scan needs {record_scan.C_ABI}): {FIX}"
        )
    columns_abi = getattr(extension, "COLUMNS_ABI", 0)
    if columns_abi != record_columns.C_COLUMNS_ABI:
        out.append(
            f"lograft.protocol._recordscan is a stale build (COLUMNS_ABI {columns_abi}, "
            f"record_columns needs {record_columns.C_COLUMNS_ABI}): {FIX}"
        )
    # The flags are what the code paths actually use; a mismatch here that the
    # ABI checks above did not explain is a bug in the fallback logic itself.
    for module in (record_scan, record_columns):
        if module.IMPLEMENTATION != "c" and not out:
            out.append(f"{module.__name__}.IMPLEMENTATION is {module.IMPLEMENTATION!r}, not 'c'")
    return out


def decoder_problems(extension: ModuleType | None, record_decode: ModuleType) -> list[str]:
    """Why the consumer's C record decoder (`_recordscan.decode_records`) is not in use."""
    if extension is None:
        return []  # problems() already says the scanner is not built
    abi = getattr(extension, "RECORDS_ABI", 0)
    if abi != record_decode.C_RECORDS_ABI:
        return [
            f"lograft.protocol._recordscan is a stale build (RECORDS_ABI {abi}, "
            f"record_decode needs {record_decode.C_RECORDS_ABI}): {FIX}"
        ]
    if record_decode.IMPLEMENTATION != "c":
        return [f"{record_decode.__name__}.IMPLEMENTATION is {record_decode.IMPLEMENTATION!r}"]
    return []


def encoder_problems(extension: ModuleType | None, batch: ModuleType) -> list[str]:
    """Why the C record encoder is not in use; empty when batch.py uses it.

    `extension` is `lograft.protocol._recordencode`, or None when it does not
    import (not built)."""
    if extension is None:
        return [f"lograft.protocol._recordencode is not built: {FIX}"]
    abi = getattr(extension, "ABI", 0)
    if abi != batch.C_ENCODE_ABI:
        return [
            f"lograft.protocol._recordencode is a stale build (ABI {abi}, "
            f"batch needs {batch.C_ENCODE_ABI}): {FIX}"
        ]
    if batch.ENCODE_IMPLEMENTATION != "c":
        return [
            f"{batch.__name__}.ENCODE_IMPLEMENTATION is {batch.ENCODE_IMPLEMENTATION!r}, not 'c'"
        ]
    # ABI 2 added the producer's OpenBatch and murmur2; the modules that use
    # them must have picked the C ones (they fall back like batch.py does).
    from lograft.protocol import open_batch, partitioner

    out: list[str] = []
    if open_batch.OpenBatch is not getattr(extension, "OpenBatch", None):
        out.append("lograft.protocol.open_batch.OpenBatch is not the C OpenBatch")
    if partitioner.murmur2 is not getattr(extension, "murmur2", None):
        out.append("lograft.protocol.partitioner.murmur2 is not the C murmur2")
    return out


def column_encoder_problems(extension: ModuleType | None, plain_batch: ModuleType) -> list[str]:
    """Why the JSON produce path's C column encoder (`_columnencode`) is not in use.

    `extension` is `lograft.protocol._columnencode`, or None when it does not import."""
    if extension is None:
        return [f"lograft.protocol._columnencode is not built: {FIX}"]
    abi = getattr(extension, "ABI", 0)
    if abi != plain_batch.C_COLUMNS_ENCODE_ABI:
        return [
            f"lograft.protocol._columnencode is a stale build (ABI {abi}, "
            f"plain_batch needs {plain_batch.C_COLUMNS_ENCODE_ABI}): {FIX}"
        ]
    if plain_batch.IMPLEMENTATION != "c":
        return [f"{plain_batch.__name__}.IMPLEMENTATION is {plain_batch.IMPLEMENTATION!r}"]
    return []


def main() -> int:
    try:
        extension: ModuleType | None = importlib.import_module("lograft.protocol._recordscan")
    except ImportError:
        extension = None
    try:
        encoder: ModuleType | None = importlib.import_module("lograft.protocol._recordencode")
    except ImportError:
        encoder = None
    try:
        column_encoder: ModuleType | None = importlib.import_module(
            "lograft.protocol._columnencode"
        )
    except ImportError:
        column_encoder = None
    from lograft.protocol import batch, plain_batch, record_columns, record_decode, record_scan

    found = (
        problems(extension, record_scan, record_columns)
        + decoder_problems(extension, record_decode)
        + encoder_problems(encoder, batch)
        + column_encoder_problems(column_encoder, plain_batch)
    )
    if found:
        for line in found:
            print(f"check_native: {line}", file=sys.stderr)
        return 1
    assert extension is not None
    print(
        f"check_native: C record scanner in use ({extension.__file__}; ABI "
        f"{extension.ABI}, COLUMNS_ABI {extension.COLUMNS_ABI}, RECORDS_ABI "
        f"{extension.RECORDS_ABI}); C record encoder in use "
        f"({encoder.__file__ if encoder else None}; ABI {batch.C_ENCODE_ABI}: encode_records, "
        f"OpenBatch, murmur2); C column encoder in use (ABI {plain_batch.C_COLUMNS_ENCODE_ABI})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Record batches with any header field a client could send, CRC and all.

`build_batch` writes only what a well-behaved producer writes; the tests of
the leader's client rules need batches that set any field to anything (a
producer id of -5, the control bit, a maxTimestamp that lies) and are
otherwise valid, so that the rule under test is the one that refuses them.
"""

from __future__ import annotations

import struct
from typing import Any

from lograft.protocol.batch import (
    CRC_POS,
    HEADER,
    BatchHeader,
    RecordInput,
    build_batch,
    compute_crc,
)


def forge(batch: bytes, **fields: Any) -> bytes:
    """`batch` (one whole batch) with header `fields` replaced, CRC redone.

    Field names are BatchHeader's; `attributes` is written as a signed int16
    (pass e.g. -0x8000 for bit 15)."""
    header = BatchHeader(*HEADER.unpack_from(batch, 0))._replace(**fields)
    buf = bytearray(batch)
    HEADER.pack_into(buf, 0, *header)
    struct.pack_into(">I", buf, CRC_POS, compute_crc(buf))
    return bytes(buf)


def records_batch(
    n: int = 2,
    *,
    timestamp_ms: int = 1,
    timestamps: list[int] | None = None,
    keys: bool = True,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    """A well-formed batch of `n` records (values v0, v1, ...)."""
    stamps = timestamps or [timestamp_ms] * n
    recs = [
        RecordInput(f"v{i}".encode(), b"k%d" % i if keys else None, timestamp=stamps[i])
        for i in range(n)
    ]
    pid, epoch, seq = producer
    return build_batch(
        recs,
        timestamp_ms=timestamp_ms,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )

"""Kafka's RecordBatch v2 (magic 2), byte for byte.

Layout of a batch (all integers big-endian)::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            bytes after this field
        12     4  partitionLeaderEpoch
        16     1  magic                  = 2
        17     4  crc                    CRC-32C of bytes 21..end
        21     2  attributes             bits 0-2 compression, 3 timestamp type,
                                         4 transactional, 5 control, 6 delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
        61     -  records (compressed as a whole when compression != none)

Each record: length varint, attributes int8, timestampDelta varlong,
offsetDelta varint, keyLength varint (-1 = null), key, valueLength varint,
value, headerCount varint, then per header keyLength varint, key (UTF-8),
valueLength varint (-1 = null), value.

Header keys are `str`. Bytes that are not valid UTF-8 decode to surrogate
escapes (errors="surrogateescape") and encode back to the same bytes, so a
batch the cleaner rebuilds keeps every key byte for byte;
`header_key_bytes` gives a key's bytes for rendering.

baseOffset and partitionLeaderEpoch lie outside the CRC, so the broker patches
them on append without touching the rest of the bytes.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

import crc32c as _crc32c

from lograft.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from lograft.protocol import compression as _compression
from lograft.protocol.compression import Compression, DecompressionBudget, compress, decompress
from lograft.protocol.record_scan import RecordsSummary, scan_records
from lograft.protocol.varint import decode_varint, encode_varint

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
# batchLength counts from partitionLeaderEpoch to the end: at least the header.
BATCH_LENGTH_MIN = HEADER_SIZE - LOG_OVERHEAD

BASE_OFFSET_POS = 0
BATCH_LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
MAX_TIMESTAMP_POS = 35
CRC_START = ATTRIBUTES_POS

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
# The fields walks over stored batches need, for loops that read them
# straight from the bytes: baseOffset and batchLength (bytes 0..11), and
# those two plus lastOffsetDelta (bytes 0..26).
PREFIX = struct.Struct(">qi")
EXTENT = struct.Struct(">qi11xi")
# batchLength with attributes, and with producerId: for walks that read one
# field of each header (every produce request walks its batches for them).
_LENGTH_ATTRIBUTES = struct.Struct(">8xi9xh")
_LENGTH_PRODUCER_ID = struct.Struct(">8xi31xq")
# baseOffset, batchLength, lastOffsetDelta and recordsCount.
_EXTENT_RECORDS = struct.Struct(">qi11xi30xi")
# The first 16 bytes (baseOffset, batchLength, partitionLeaderEpoch): an
# append writes these anew and bytes 16..end of the batch as they came.
PATCHED_PREFIX = struct.Struct(">qii")
PATCHED_PREFIX_SIZE = PATCHED_PREFIX.size


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return _crc32c.crc32c(data)


class BatchHeader(NamedTuple):
    """The 61-byte header, field by field. A NamedTuple, not a dataclass: one
    is built per batch on the append path, and a frozen dataclass costs a
    setattr call per field (1.4 us against 0.3 us for these 13 fields)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header needs {HEADER_SIZE} bytes, {len(buf) - pos} remain", position=pos
        )
    return BatchHeader(*HEADER.unpack_from(buf, pos))


def peek_extent(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int]:
    """(baseOffset, total size, lastOffsetDelta) of the batch at pos, unvalidated.

    Needs 27 bytes at pos. This is the cheap walk used by reads and indexes.
    """
    base, length, last_delta = EXTENT.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD, last_delta


@dataclass(frozen=True, slots=True)
class Record:
    """One record as read from a batch; offset and timestamp are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


Header = tuple[str, bytes | None]


def header_key_bytes(key: str) -> bytes:
    """A header key's bytes as stored: the inverse of how records decode it."""
    return key.encode("utf-8", errors="surrogateescape")


@dataclass(frozen=True, slots=True)
class RecordInput:
    """One record to put in a batch."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp: int | None = None


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> bytes:
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(encode_varint(-1))
    else:
        parts.append(encode_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(encode_varint(-1))
    else:
        parts.append(encode_varint(len(value)))
        parts.append(value)
    parts.append(encode_varint(len(headers)))
    for hkey, hval in headers:
        hk = header_key_bytes(hkey)
        parts.append(encode_varint(len(hk)))
        parts.append(hk)
        if hval is None:
            parts.append(encode_varint(-1))
        else:
            parts.append(encode_varint(len(hval)))
            parts.append(hval)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def encode_records_python(
    records: Sequence[RecordInput], default_timestamp: int, offset_deltas: Sequence[int] | None
) -> tuple[bytes, int, int]:
    """(records section, base timestamp, max timestamp): the pure-Python
    encoder, the fallback for `_recordencode.encode_records` (same bytes)."""
    timestamps = [default_timestamp if r.timestamp is None else r.timestamp for r in records]
    base_ts = timestamps[0]
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    if len(deltas) != len(records):
        raise ValueError("offset_deltas must have one entry per record")
    body = b"".join(
        _encode_record(delta, ts - base_ts, r.key, r.value, r.headers)
        for delta, ts, r in zip(deltas, timestamps, records, strict=True)
    )
    return body, base_ts, max(timestamps)


# The C encoder's ABI this module speaks (RECORDENCODE_ABI in _recordencode.c).
C_ENCODE_ABI: Final = 2

try:
    from lograft.protocol import _recordencode as _recordencode
except ImportError:  # built without a compiler: the pure-Python encoder serves
    _recordencode = None  # type: ignore[assignment]
if _recordencode is not None and getattr(_recordencode, "ABI", 0) != C_ENCODE_ABI:
    logging.getLogger(__name__).warning(
        "lograft.protocol._recordencode is a stale build (ABI %s, need %s); using the "
        "pure-Python encoder until it is rebuilt (scripts/setup.sh)",
        getattr(_recordencode, "ABI", 0),
        C_ENCODE_ABI,
    )
    _recordencode = None  # type: ignore[assignment]

ENCODE_IMPLEMENTATION: Final[Literal["c", "python"]] = (
    "c" if _recordencode is not None else "python"
)
encode_records: Callable[
    [Sequence[RecordInput], int, Sequence[int] | None], tuple[bytes, int, int]
] = _recordencode.encode_records if _recordencode is not None else encode_records_python


def build_batch(
    records: Sequence[RecordInput],
    *,
    timestamp_ms: int,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode records into one RecordBatch v2.

    `timestamp_ms` is used for records without a timestamp of their own.
    `offset_deltas` and `last_offset_delta` exist for the compactor, which
    keeps the original offsets of the records it retains; producers leave
    them unset and get deltas 0..n-1.
    """
    if not records:
        raise InvalidRecordError("a batch needs at least one record")
    if offset_deltas is not None and len(offset_deltas) != len(records):
        raise InvalidRecordError("offset_deltas must have one entry per record")
    body, base_ts, max_ts = encode_records(records, timestamp_ms, offset_deltas)
    if last_offset_delta is not None:
        last_delta = last_offset_delta
    else:
        last_delta = len(records) - 1 if offset_deltas is None else offset_deltas[-1]
    return batch_from_records(
        body,
        records_count=len(records),
        last_offset_delta=last_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
    )


def batch_from_records(
    body: bytes,
    *,
    records_count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A RecordBatch v2 around an encoded (uncompressed) records section:
    the section compressed, the 61-byte header, the CRC-32C. `build_batch`
    and the producer's `OpenBatch` (records encoded as they were sent) both
    end here, so the same records give the same bytes either way."""
    body = compress(compression, body)
    attributes = int(compression) & COMPRESSION_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    header = bytearray(
        HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    )
    crc = _crc32c.crc32c(body, _crc32c.crc32c(memoryview(header)[CRC_START:]))
    struct.pack_into(">I", header, CRC_POS, crc)
    return bytes(header) + body


def compute_crc(
    batch: bytes | bytearray | memoryview, pos: int = 0, size: int | None = None
) -> int:
    mv = memoryview(batch)
    end = pos + (size if size is not None else len(batch) - pos)
    return _crc32c.crc32c(mv[pos + CRC_START : end])


def check_batch_size(size: int, max_batch_bytes: int) -> None:
    """Refuse a batch of `size` bytes over `max_batch_bytes` (max_message_bytes)."""
    if size > max_batch_bytes:
        raise RecordTooLargeError(
            f"record batch of {size} bytes exceeds max_message_bytes={max_batch_bytes}",
            size=size,
            limit=max_batch_bytes,
        )


def validate_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    available: int | None = None,
    max_batch_bytes: int | None = None,
) -> BatchHeader:
    """Check the structure and CRC of the batch at `pos`; returns its header.

    `available` is how many bytes belong to this batch's buffer from `pos`
    (default: to the end). Raises CorruptRecordError (magic, lengths, CRC) or
    InvalidRecordError (counts and offset deltas that cannot be right).
    """
    remaining = (len(buf) - pos) if available is None else available
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(f"{remaining} bytes is too short for a record batch", position=pos)
    _base, batch_length = PREFIX.unpack_from(buf, pos)
    if batch_length < BATCH_LENGTH_MIN:
        raise CorruptRecordError(
            f"batchLength {batch_length} is below the minimum {BATCH_LENGTH_MIN}", position=pos
        )
    size = batch_length + LOG_OVERHEAD
    # A length running past the data is a torn or garbage batch, whatever
    # its size; only a batch that is really there can be too large.
    if size > remaining:
        raise CorruptRecordError(
            f"batchLength says {size} bytes but only {remaining} are present", position=pos
        )
    if max_batch_bytes is not None:
        check_batch_size(size, max_batch_bytes)
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"record batch magic is {header.magic}; only magic {MAGIC} is supported",
            position=pos,
        )
    actual = _crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + size])
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}",
            position=pos,
        )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise InvalidRecordError("negative recordsCount or lastOffsetDelta", position=pos)
    if header.records_count > header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"recordsCount {header.records_count} exceeds the offset range "
            f"{header.last_offset_delta + 1} of the batch",
            position=pos,
        )
    return header


def check_batch_sizes(headers: Sequence[tuple[int, BatchHeader]], max_batch_bytes: int) -> None:
    """`validate_batch`'s size bound, for batches it passed under another
    bound (a config that changed since): RecordTooLargeError past it."""
    for _pos, header in headers:
        if header.size > max_batch_bytes:
            raise RecordTooLargeError(
                f"record batch of {header.size} bytes exceeds max_message_bytes={max_batch_bytes}",
                size=header.size,
                limit=max_batch_bytes,
            )


def iter_batch_records(
    buf: bytes | bytearray | memoryview, pos: int = 0, header: BatchHeader | None = None
) -> Iterator[Record]:
    """Decode the records of the batch at `pos` (which must already be valid)."""
    if header is None:
        header = parse_header(buf, pos)
    yield from decode_records(records_section(buf, pos, header), header)


def records_section(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    *,
    decompressed_max: int | None = None,
) -> bytes | memoryview:
    """The records section of the batch at `pos`, decompressed.

    Decompression stops past `decompressed_max` bytes (never more than the
    one-batch bound) with RecordTooLargeError; an uncompressed section is a
    view of `buf`, whatever its size.
    """
    section = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    if header.compression == Compression.NONE:
        return section
    return decompress(header.compression, section, limit=decompressed_max)


def records_section_within(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, budget: DecompressionBudget
) -> bytes | memoryview | None:
    """A reader's `records_section`: a compressed section spends `budget`, and
    is None (the reader stops before this batch, to fetch it again later)
    when it would inflate past what the budget has left. The first section
    always inflates (up to the one-batch bound, past it RecordTooLargeError)
    so that every response makes progress. Uncompressed sections are views
    of `buf` and cost nothing."""
    if header.compression == Compression.NONE:
        return records_section(buf, pos, header)
    first = budget.sections == 0
    if not first and budget.remaining == 0:
        return None
    try:
        section = records_section(
            buf, pos, header, decompressed_max=None if first else budget.remaining
        )
    except RecordTooLargeError:
        if first:
            raise
        return None
    budget.spend(len(section))
    return section


def decode_records(
    data: bytes | memoryview,
    header: BatchHeader,
    *,
    start_offset: int | None = None,
    record_bytes_max: int | None = None,
) -> Iterator[Record]:
    """The records of a (decompressed) records section of the batch `header`.

    Records below `start_offset` are stepped over, nothing of them copied
    (nor checked further: they were checked when appended).
    From there on, a record whose encoded length exceeds `record_bytes_max`
    raises RecordTooLargeError (details: offset, record_bytes, limit) before
    any of it is copied.
    """
    p = 0
    end = len(data)
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append_ts = header.max_timestamp if header.is_log_append_time else None
    for _ in range(header.records_count):
        length, p = decode_varint(data, p)
        rec_end = p + length
        if length < 1 or rec_end > end:
            raise CorruptRecordError("record length runs past the end of the batch")
        p += 1  # attributes, unused in v2
        ts_delta, p = decode_varint(data, p)
        off_delta, p = decode_varint(data, p)
        offset = base_offset + off_delta
        if start_offset is not None and offset < start_offset:
            p = rec_end
            continue
        if record_bytes_max is not None and length > record_bytes_max:
            raise RecordTooLargeError(
                f"the record at offset {offset} is {length} bytes, more than {record_bytes_max}",
                offset=offset,
                record_bytes=length,
                limit=record_bytes_max,
            )
        key_len, p = decode_varint(data, p)
        key = None
        if key_len >= 0:
            key = bytes(data[p : p + key_len])
            p += key_len
        val_len, p = decode_varint(data, p)
        value = None
        if val_len >= 0:
            value = bytes(data[p : p + val_len])
            p += val_len
        n_headers, p = decode_varint(data, p)
        if n_headers < 0:
            raise CorruptRecordError("negative header count")
        headers: list[Header] = []
        for _h in range(n_headers):
            hk_len, p = decode_varint(data, p)
            if hk_len < 0:
                raise CorruptRecordError("header key may not be null")
            hk = bytes(data[p : p + hk_len]).decode("utf-8", errors="surrogateescape")
            p += hk_len
            hv_len, p = decode_varint(data, p)
            hv = None
            if hv_len >= 0:
                hv = bytes(data[p : p + hv_len])
                p += hv_len
            headers.append((hk, hv))
        if p != rec_end:
            raise CorruptRecordError(
                f"record at offset delta {off_delta} has {rec_end - p} bytes its fields "
                "do not explain"
            )
        ts = log_append_ts if log_append_ts is not None else base_ts + ts_delta
        yield Record(offset, ts, key, value, tuple(headers))
    if p != end:
        raise CorruptRecordError(f"{end - p} trailing bytes after the last record of the batch")


def check_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    *,
    contiguous: bool,
    record_bytes_max: int | None = None,
    budget: DecompressionBudget | None = None,
) -> RecordsSummary:
    """Walk every record of a validated batch and check what the header claims.

    contiguous=True is the producer rule: offset deltas are exactly 0..n-1 and
    lastOffsetDelta is n-1. contiguous=False allows the gaps compaction leaves
    but still requires strictly increasing deltas within lastOffsetDelta.
    Raises CorruptRecordError or InvalidRecordError (rules and reasons in
    lograft.protocol.record_scan); `details["position"]` is the batch's `pos`.
    Returns what the walk saw of the timestamps and keys, for callers that
    judge those (lograft.storage.produce_rules).

    Size bounds, each RecordTooLargeError: with `record_bytes_max`, every
    record (decompressed); a compressed section may inflate to no more than
    its records can take at that size, nor past what `budget` has left (and
    what it inflates to is spent from the budget), nor past the one-batch
    bound. Inflation stops at the first bound passed: a bomb costs the bound,
    not its size.
    """
    # Decoding Record objects here cost ~5 ms per 1,000 records; the scanner
    # walks the same fields without building anything. The views are released
    # on the way out so that an error's traceback does not pin a bytearray
    # `buf` against resizing.
    with (
        memoryview(buf) as whole,
        whole[pos + HEADER_SIZE : pos + header.size] as section,
    ):
        data: bytes | memoryview = section
        if header.compression != Compression.NONE:
            data = _inflate_checked(section, pos, header, record_bytes_max, budget)
        try:
            return scan_records(
                data,
                header.records_count,
                header.last_offset_delta,
                contiguous=contiguous,
                record_bytes_max=record_bytes_max,
            )
        except (CorruptRecordError, InvalidRecordError, RecordTooLargeError) as exc:
            exc.details["position"] = pos
            raise


# A record's length varint takes at most this many bytes.
_RECORD_LENGTH_VARINT_MAX = 10


def _inflate_checked(
    section: memoryview,
    pos: int,
    header: BatchHeader,
    record_bytes_max: int | None,
    budget: DecompressionBudget | None,
) -> bytes:
    """The decompressed section of the batch at `pos`, within every bound."""
    bound = _compression.DECOMPRESSED_BYTES_MAX
    message = f"record batch at byte {pos} decompresses to more than {bound} bytes (one batch)"
    details: dict[str, object] = {"position": pos, "limit": bound}
    if record_bytes_max is not None:
        # Each record is at most its length varint plus record_bytes_max.
        count = max(header.records_count, 1)
        records_bound = count * (record_bytes_max + _RECORD_LENGTH_VARINT_MAX)
        if records_bound < bound:
            bound = records_bound
            message = (
                f"record batch at byte {pos} decompresses to more than its {count} record(s) "
                f"can take ({bound} bytes): a record is larger than max_message_bytes="
                f"{record_bytes_max} once decompressed"
            )
            details = {
                "position": pos,
                "limit": record_bytes_max,
                "limit_name": "max_message_bytes",
            }
    if budget is not None and budget.remaining < bound:
        bound = budget.remaining
        message = (
            f"the compressed batches of this request decompress to more than "
            f"{budget.name}={budget.limit} bytes (at the batch at byte {pos})"
        )
        details = {"position": pos, "limit": budget.limit, "limit_name": budget.name}
    try:
        data = decompress(header.compression, section, limit=bound)
    except RecordTooLargeError:
        raise RecordTooLargeError(message, **details) from None
    if budget is not None:
        budget.spend(len(data))
    return data


def validate_batches(
    buf: bytes | bytearray | memoryview,
    *,
    max_batch_bytes: int,
    contiguous: bool,
    deep: bool,
    budget: DecompressionBudget | None = None,
    on_records: Callable[[BatchHeader, RecordsSummary, int], None] | None = None,
) -> list[tuple[int, BatchHeader]]:
    """Validate every batch of `buf`; (position, header) of each.

    Each batch: structure and CRC (`validate_batch`), at most
    `max_batch_bytes`; with `contiguous` (what a producer sends) at least one
    record and lastOffsetDelta = recordsCount - 1. With `deep`, every record
    too (`check_records`), each at most `max_batch_bytes` once decompressed
    (Kafka's max.message.bytes bounds the compressed batch; a Kafka producer
    bounds each uncompressed record by its max.request.size), inflating no
    more than `budget` allows across the batches; `on_records(header,
    summary, index)` then judges what the walk saw of each batch's records.
    """
    if not buf:
        raise InvalidRecordError("no record batch in the request")
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < len(buf):
        h = validate_batch(buf, pos, max_batch_bytes=max_batch_bytes)
        if contiguous:
            if h.records_count == 0:
                raise InvalidRecordError("a record batch must hold at least one record")
            if h.last_offset_delta != h.records_count - 1:
                raise InvalidRecordError(
                    f"lastOffsetDelta {h.last_offset_delta} does not match recordsCount "
                    f"{h.records_count} in a produced batch"
                )
        if deep:
            summary = check_records(
                buf,
                pos,
                h,
                contiguous=contiguous,
                record_bytes_max=max_batch_bytes,
                budget=budget,
            )
            if on_records is not None:
                on_records(h, summary, len(out))
        out.append((pos, h))
        pos += h.size
    return out


def patch_base_offset_and_epoch(
    buf: bytearray, pos: int, base_offset: int, leader_epoch: int
) -> None:
    """Set the two fields outside the CRC in place."""
    _I64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)
    _I32.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)


def set_log_append_time(buf: bytearray, pos: int, size: int, timestamp_ms: int) -> None:
    """Turn a batch into LogAppendTime: set the type bit and maxTimestamp, redo the CRC.

    This is the one change inside the CRC a broker makes, as Kafka does for
    topics with message.timestamp.type=LogAppendTime.
    """
    attrs = struct.unpack_from(">h", buf, pos + ATTRIBUTES_POS)[0] | TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", buf, pos + ATTRIBUTES_POS, attrs)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_POS, timestamp_ms)
    struct.pack_into(">I", buf, pos + CRC_POS, compute_crc(buf, pos, size))


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in buf[pos:end], unvalidated."""
    stop = len(buf) if end is None else end
    while stop - pos >= HEADER_SIZE:
        header = BatchHeader(*HEADER.unpack_from(buf, pos))
        if header.batch_length < BATCH_LENGTH_MIN or pos + header.size > stop:
            return
        yield pos, header
        pos += header.size


def count_batches(buf: bytes | bytearray | memoryview, stop_at: int) -> int:
    """How many batches buf holds by their length fields, counting no further
    than `stop_at` (a cap check reads at most that many prefixes). Validates
    nothing: a length that does not fit ends the count, and the batch there
    is left for validate_batch to refuse."""
    unpack = PREFIX.unpack_from
    pos, count, size = 0, 0, len(buf)
    while count < stop_at and size - pos >= LOG_OVERHEAD:
        _base, length = unpack(buf, pos)
        count += 1
        if length < BATCH_LENGTH_MIN:
            break
        pos += length + LOG_OVERHEAD
    return count


def any_compressed(buf: bytes | bytearray | memoryview) -> bool:
    """Whether any whole batch of `buf` is compressed: the batches
    `iter_batches` walks, two fields of each read straight from the bytes (a
    header tuple per batch cost ~2 us for a one-batch request)."""
    unpack = _LENGTH_ATTRIBUTES.unpack_from
    pos, stop = 0, len(buf)
    while stop - pos >= HEADER_SIZE:
        length, attributes = unpack(buf, pos)
        size = length + LOG_OVERHEAD
        if length < BATCH_LENGTH_MIN or pos + size > stop:
            return False
        if attributes & COMPRESSION_MASK:  # Compression.NONE is 0
            return True
        pos += size
    return False


def batches_span(buf: bytes | bytearray | memoryview) -> tuple[int, int]:
    """The offset after the last of the batches `iter_batches` walks in `buf`
    (-1 when there is none) and the records they hold, read as
    `any_compressed` reads: a fetch answer's next offset and record count
    without a header tuple per batch (a 1 MiB answer of small batches has
    thousands)."""
    unpack = _EXTENT_RECORDS.unpack_from
    next_offset, records, pos, stop = -1, 0, 0, len(buf)
    while stop - pos >= HEADER_SIZE:
        base, length, last_delta, count = unpack(buf, pos)
        size = length + LOG_OVERHEAD
        if length < BATCH_LENGTH_MIN or pos + size > stop:
            break
        next_offset = max(next_offset, base + last_delta + 1)
        records += count
        pos += size
    return next_offset, records


def max_producer_id(buf: bytes | bytearray | memoryview) -> int:
    """The largest producerId among the batches `iter_batches` walks in
    `buf` (-1 when there is none), read as `any_compressed` reads: unvalidated."""
    unpack = _LENGTH_PRODUCER_ID.unpack_from
    top, pos, stop = -1, 0, len(buf)
    while stop - pos >= HEADER_SIZE:
        length, producer_id = unpack(buf, pos)
        size = length + LOG_OVERHEAD
        if length < BATCH_LENGTH_MIN or pos + size > stop:
            break
        top = max(top, producer_id)
        pos += size
    return top


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Every record of every whole batch in buf (e.g. a fetch response)."""
    for pos, header in iter_batches(buf):
        yield from iter_batch_records(buf, pos, header)

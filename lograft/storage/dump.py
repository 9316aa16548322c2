"""Human-readable dumps of segment files, in the manner of kafka-dump-log.

`.log` files print one line per batch (and with records=True one line per
record, prefixed by `| `); `.index` and `.timeindex` files print their
entries. A torn or corrupt tail is reported with its position and size
instead of stopping silently.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

from lograft.errors import LograftError
from lograft.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    header_key_bytes,
    iter_batch_records,
    parse_header,
)
from lograft.protocol.compression import Compression
from lograft.storage.index import OffsetIndex, TimeIndex
from lograft.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, parse_base_offset

_READ_CHUNK_BYTES = 1 << 20


def dump_file(path: Path, *, records: bool = False) -> Iterator[str]:
    """Lines describing a segment, index or time-index file."""
    yield f"Dumping {path}"
    name = path.name
    if name.endswith(LOG_SUFFIX):
        yield from _dump_log(path, records)
    elif name.endswith(TIMEINDEX_SUFFIX):
        yield from _dump_time_index(path)
    elif name.endswith(INDEX_SUFFIX):
        yield from _dump_offset_index(path)
    else:
        raise LograftError(f"{path} is not a .log, .index or .timeindex file; pass a segment file")


def _base_offset(path: Path) -> int:
    base = parse_base_offset(path.name)
    if base is None:
        raise LograftError(f"{path.name} is not named by a 20-digit base offset")
    return base


def _dump_offset_index(path: Path) -> Iterator[str]:
    index = OffsetIndex(path, _base_offset(path), max(path.stat().st_size, 4096), writable=False)
    try:
        for offset, position in index.entry_list():
            yield f"offset: {offset} position: {position}"
    finally:
        index.close()


def _dump_time_index(path: Path) -> Iterator[str]:
    index = TimeIndex(path, _base_offset(path), max(path.stat().st_size, 4096), writable=False)
    try:
        for timestamp, offset in index.entry_list():
            yield f"timestamp: {timestamp} offset: {offset}"
    finally:
        index.close()


def _dump_log(path: Path, records: bool) -> Iterator[str]:
    yield f"Log starting offset: {_base_offset(path)}"
    size = path.stat().st_size
    with path.open("rb") as f:
        position = 0
        while position < size:
            f.seek(position)
            prefix = f.read(LOG_OVERHEAD)
            if len(prefix) < LOG_OVERHEAD:
                break
            length = int.from_bytes(prefix[8:12], "big", signed=True)
            total = length + LOG_OVERHEAD
            if total < HEADER_SIZE or position + total > size:
                break
            f.seek(position)
            data = f.read(total)
            header = parse_header(data)
            valid = header.magic == 2 and compute_crc(data) == header.crc
            yield _batch_line(header, position, valid)
            if records and valid:
                yield from _record_lines(data, header)
            if not valid:
                break
            position += total
    if position < size:
        yield f"Found {size - position} invalid bytes at position {position} (torn or corrupt tail)"


def _batch_line(h: BatchHeader, position: int, valid: bool) -> str:
    ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
    try:
        codec = Compression(h.compression).name.lower()
    except ValueError:
        codec = f"unknown({h.compression})"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} position: {position} "
        f"{ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {codec} crc: {h.crc} isvalid: {str(valid).lower()}"
    )


def _record_lines(data: bytes, header: BatchHeader) -> Iterator[str]:
    ts_type = "LogAppendTime" if header.is_log_append_time else "CreateTime"
    try:
        for i, rec in enumerate(iter_batch_records(data, 0, header)):
            seq = header.base_sequence + i if header.base_sequence >= 0 else -1
            key_size = -1 if rec.key is None else len(rec.key)
            value_size = -1 if rec.value is None else len(rec.value)
            header_keys = ",".join(_show_header_key(k) for k, _v in rec.headers)
            yield (
                f"| offset: {rec.offset} {ts_type}: {rec.timestamp} keySize: {key_size} "
                f"valueSize: {value_size} sequence: {seq} headerKeys: [{header_keys}] "
                f"key: {_show(rec.key)} payload: {_show(rec.value)}"
            )
    except LograftError as exc:
        yield f"| records do not decode: {exc.message}"


def _show_header_key(key: str) -> str:
    # A key that is not valid UTF-8 holds surrogate escapes, which stdout
    # cannot encode: show its bytes instead.
    raw = header_key_bytes(key)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


def _show(data: bytes | None) -> str:
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()
    return text if text.isprintable() else repr(text)

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
from typing import Any

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
    return (entry_line(entry) for entry in dump_entries(path, records=records))


def dump_entries(path: Path, *, records: bool = False) -> Iterator[dict[str, Any]]:
    """What a segment, index or time-index file holds, as JSON-ready dicts, each
    with a `type` (docs/cli.md, "lograft dump-log", lists the shapes)."""
    yield {"type": "file", "path": str(path)}
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


def _dump_offset_index(path: Path) -> Iterator[dict[str, Any]]:
    index = OffsetIndex(path, _base_offset(path), max(path.stat().st_size, 4096), writable=False)
    try:
        for offset, position in index.entry_list():
            yield {"type": "index_entry", "offset": offset, "position": position}
    finally:
        index.close()


def _dump_time_index(path: Path) -> Iterator[dict[str, Any]]:
    index = TimeIndex(path, _base_offset(path), max(path.stat().st_size, 4096), writable=False)
    try:
        for timestamp, offset in index.entry_list():
            yield {"type": "time_index_entry", "timestamp": timestamp, "offset": offset}
    finally:
        index.close()


def _dump_log(path: Path, records: bool) -> Iterator[dict[str, Any]]:
    yield {"type": "log_start", "base_offset": _base_offset(path)}
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
            yield _batch_entry(header, position, valid)
            if records and valid:
                yield from _record_entries(data, header)
            if not valid:
                break
            position += total
    if position < size:
        yield {"type": "invalid_tail", "position": position, "bytes": size - position}


def _batch_entry(h: BatchHeader, position: int, valid: bool) -> dict[str, Any]:
    try:
        codec = Compression(h.compression).name.lower()
    except ValueError:
        codec = f"unknown({h.compression})"
    return {
        "type": "batch",
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "count": h.records_count,
        "base_sequence": h.base_sequence,
        "last_sequence": h.last_sequence,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "partition_leader_epoch": h.partition_leader_epoch,
        "is_transactional": h.is_transactional,
        "is_control": h.is_control,
        "position": position,
        "timestamp_type": "LogAppendTime" if h.is_log_append_time else "CreateTime",
        "max_timestamp": h.max_timestamp,
        "size": h.size,
        "magic": h.magic,
        "compression": codec,
        "crc": h.crc,
        "valid": valid,
    }


def _record_entries(data: bytes, header: BatchHeader) -> Iterator[dict[str, Any]]:
    ts_type = "LogAppendTime" if header.is_log_append_time else "CreateTime"
    try:
        for i, rec in enumerate(iter_batch_records(data, 0, header)):
            yield {
                "type": "record",
                "offset": rec.offset,
                "timestamp_type": ts_type,
                "timestamp": rec.timestamp,
                "key_size": -1 if rec.key is None else len(rec.key),
                "value_size": -1 if rec.value is None else len(rec.value),
                "sequence": header.base_sequence + i if header.base_sequence >= 0 else -1,
                "header_keys": [_show_header_key(k) for k, _v in rec.headers],
                "key": _show(rec.key),
                "value": _show(rec.value),
            }
    except LograftError as exc:
        yield {"type": "record_error", "message": exc.message}


def entry_line(e: dict[str, Any]) -> str:
    """One entry as kafka-dump-log prints it."""
    kind = e["type"]
    if kind == "file":
        return f"Dumping {e['path']}"
    if kind == "log_start":
        return f"Log starting offset: {e['base_offset']}"
    if kind == "batch":
        return _batch_line(e)
    if kind == "record":
        return (
            f"| offset: {e['offset']} {e['timestamp_type']}: {e['timestamp']} "
            f"keySize: {e['key_size']} valueSize: {e['value_size']} sequence: {e['sequence']} "
            f"headerKeys: [{','.join(e['header_keys'])}] key: {_text(e['key'])} "
            f"payload: {_text(e['value'])}"
        )
    if kind == "record_error":
        return f"| records do not decode: {e['message']}"
    if kind == "index_entry":
        return f"offset: {e['offset']} position: {e['position']}"
    if kind == "time_index_entry":
        return f"timestamp: {e['timestamp']} offset: {e['offset']}"
    return f"Found {e['bytes']} invalid bytes at position {e['position']} (torn or corrupt tail)"


def _batch_line(e: dict[str, Any]) -> str:
    def flag(key: str) -> str:
        return str(e[key]).lower()

    return (
        f"baseOffset: {e['base_offset']} lastOffset: {e['last_offset']} count: {e['count']} "
        f"baseSequence: {e['base_sequence']} lastSequence: {e['last_sequence']} "
        f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} "
        f"partitionLeaderEpoch: {e['partition_leader_epoch']} "
        f"isTransactional: {flag('is_transactional')} "
        f"isControl: {flag('is_control')} position: {e['position']} "
        f"{e['timestamp_type']}: {e['max_timestamp']} size: {e['size']} magic: {e['magic']} "
        f"compresscodec: {e['compression']} crc: {e['crc']} isvalid: {flag('valid')}"
    )


def _text(value: str | None) -> str:
    return "null" if value is None else value


def _show_header_key(key: str) -> str:
    # A key that is not valid UTF-8 holds surrogate escapes, which stdout
    # cannot encode: show its bytes instead.
    raw = header_key_bytes(key)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


def _show(data: bytes | None) -> str | None:
    """UTF-8 text as it is (repr'd when not printable), else `base64:...`; None for null."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()
    return text if text.isprintable() else repr(text)

"""JSON <-> records at the HTTP edge.

Produce body (`POST /v1/topics/{topic}/records`)::

    {"value_format": "json" | "string" | "base64",     default "json"
     "key_format":   "string" | "base64" | "json",     default "string"
     "records": [{"key": ..., "value": ..., "headers": {"name": "text", ...}
                  or [{"key": "name", "value": "text" | null}, ...],
                  "partition": 0, "timestamp": 1700000000000}, ...]}

`json` values are stored as their compact UTF-8 JSON text; `string` as
UTF-8; `base64` as the decoded bytes. Header values are UTF-8 strings, or
base64 with `"header_format": "base64"`.

Fetched records are rendered with the same formats; `auto` (the default for
reading) shows a value as JSON when it parses as JSON, else as a string when
it is UTF-8, else as base64 with `"value_encoding": "base64"` beside it, so a
person with curl always sees something faithful.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from lograft.api.request_ints import INT32_MAX, INT64_MAX, json_int
from lograft.echo import shown
from lograft.errors import InvalidRequestError
from lograft.storage.batch import Header, Record, RecordInput, header_key_bytes

VALUE_FORMATS = ("json", "string", "base64")
READ_FORMATS = ("auto", "json", "string", "base64")
_RECORD_KEYS = {"key", "value", "headers", "partition", "timestamp"}
_BODY_KEYS = {"records", "value_format", "key_format", "header_format", "acks"}


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """One record of a produce request, with its requested partition (or None)."""

    index: int
    partition: int | None
    record: RecordInput


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    records: list[ProduceRecord]
    acks: str | None


def parse_produce_body(body: bytes, *, records_max: int) -> ProduceRequest:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidRequestError('request body must be a JSON object with a "records" list')
    unknown = set(doc) - _BODY_KEYS
    if unknown:
        raise InvalidRequestError(
            f"unknown field(s) {shown(sorted(unknown))}; allowed: {sorted(_BODY_KEYS)}"
        )
    value_format = _choice(doc.get("value_format", "json"), VALUE_FORMATS, "value_format")
    key_format = _choice(doc.get("key_format", "string"), VALUE_FORMATS, "key_format")
    header_format = _choice(
        doc.get("header_format", "string"), ("string", "base64"), "header_format"
    )
    raw_records = doc.get("records")
    if not isinstance(raw_records, list) or not raw_records:
        raise InvalidRequestError('"records" must be a non-empty list')
    if len(raw_records) > records_max:
        raise InvalidRequestError(
            f"{len(raw_records)} records in one request; the limit is {records_max}",
            limit=records_max,
        )
    acks = doc.get("acks")
    records = [
        _parse_record(i, r, value_format, key_format, header_format)
        for i, r in enumerate(raw_records)
    ]
    return ProduceRequest(records, None if acks is None else str(acks))


def _choice(value: Any, allowed: Sequence[str], name: str) -> str:
    if value not in allowed:
        raise InvalidRequestError(f"{name}={shown(value)}; use one of {', '.join(allowed)}")
    return str(value)


def _parse_record(
    i: int, raw: Any, value_format: str, key_format: str, header_format: str
) -> ProduceRecord:
    where = f"records[{i}]"
    if not isinstance(raw, dict):
        raise InvalidRequestError(f"{where} must be an object")
    unknown = set(raw) - _RECORD_KEYS
    if unknown:
        raise InvalidRequestError(
            f"{where} has unknown field(s) {sorted(unknown)}; allowed: {sorted(_RECORD_KEYS)}"
        )
    partition = raw.get("partition")
    if partition is not None:
        partition = json_int(partition, f"{where}.partition", maximum=INT32_MAX)
    # Milliseconds since the epoch: a batch stores it as an int64.
    timestamp = raw.get("timestamp")
    if timestamp is not None:
        timestamp = json_int(timestamp, f"{where}.timestamp", maximum=INT64_MAX)
    key = encode_value(raw.get("key"), key_format, f"{where}.key") if "key" in raw else None
    value = (
        encode_value(raw.get("value"), value_format, f"{where}.value") if "value" in raw else None
    )
    headers = _parse_headers(raw.get("headers"), header_format, f"{where}.headers")
    return ProduceRecord(i, partition, RecordInput(value, key, headers, timestamp))


def encode_value(value: Any, fmt: str, where: str) -> bytes | None:
    if value is None:
        return None
    if fmt == "json":
        return orjson.dumps(value)
    if not isinstance(value, str):
        raise InvalidRequestError(f"{where} must be a string with format {fmt}")
    if fmt == "string":
        return value.encode()
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"{where} is not valid base64") from None


def _parse_headers(raw: Any, fmt: str, where: str) -> tuple[Header, ...]:
    if raw is None:
        return ()
    pairs: list[tuple[Any, Any]]
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = []
        for j, h in enumerate(raw):
            if not isinstance(h, dict) or "key" not in h:
                raise InvalidRequestError(f'{where}[{j}] must be {{"key": ..., "value": ...}}')
            pairs.append((h["key"], h.get("value")))
    else:
        raise InvalidRequestError(f"{where} must be an object or a list")
    out: list[Header] = []
    for name, value in pairs:
        if not isinstance(name, str):
            raise InvalidRequestError(f"{where}: header names must be strings")
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"{where}.{name} must be a string or null")
        out.append((name, encode_value(value, fmt, f"{where}.{name}")))
    return tuple(out)


def render_value(data: bytes | None, fmt: str) -> tuple[Any, str | None]:
    """(JSON-ready value, encoding marker or None)."""
    if data is None:
        return None, None
    if fmt == "base64":
        return base64.b64encode(data).decode(), None
    if fmt in ("json", "auto"):
        try:
            return orjson.loads(data), None
        except orjson.JSONDecodeError:
            if fmt == "json":
                return base64.b64encode(data).decode(), "base64"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


def _header_name(name: str) -> str:
    """A header key that is not valid UTF-8 (decoded with surrogateescape by
    the codec) is shown with replacement characters, as JSON needs."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return header_key_bytes(name).decode("utf-8", errors="replace")
    return name


def render_record(
    rec: Record, partition: int, value_format: str, key_format: str
) -> dict[str, Any]:
    value, value_enc = render_value(rec.value, value_format)
    key, key_enc = render_value(rec.key, key_format)
    out: dict[str, Any] = {
        "partition": partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "key": key,
        "value": value,
    }
    if key_enc:
        out["key_encoding"] = key_enc
    if value_enc:
        out["value_encoding"] = value_enc
    if rec.headers:
        headers = []
        for name, hv in rec.headers:
            text, enc = render_value(hv, "string")
            item: dict[str, Any] = {"key": _header_name(name), "value": text}
            if enc:
                item["encoding"] = enc
            headers.append(item)
        out["headers"] = headers
    return out

"""One record as the JSON fetch API shows it: the read formats and the renderer.

The API's JSON fetch (`GET .../records`) and SSE stream render records on the
node; `lograft consume` renders the raw batches it fetches through the
client. Both use this module, so a record reads the same either way.

Read formats (`format`, `key_format`): `auto` shows bytes as JSON when they
parse as JSON, else as a string when they are UTF-8, else as base64 with an
`*_encoding: "base64"` marker beside them; `json` is JSON or base64 (marked);
`string` is UTF-8 or base64 (marked); `base64` is always base64 (unmarked:
asked for).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from lograft.protocol.batch import header_key_bytes

READ_FORMATS = ("auto", "json", "string", "base64")


class RecordView(Protocol):
    """What rendering reads of a record: `protocol.batch.Record` on a node,
    `client.ConsumerRecord` (without deserializers) in `lograft consume`."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


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


def header_name(name: str) -> str:
    """A header key that is not valid UTF-8 (decoded with surrogateescape by
    the codec) is shown with replacement characters, as JSON needs."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return header_key_bytes(name).decode("utf-8", errors="replace")
    return name


def render_record(
    rec: RecordView, partition: int, value_format: str, key_format: str
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
            item: dict[str, Any] = {"key": header_name(name), "value": text}
            if enc:
                item["encoding"] = enc
            headers.append(item)
        out["headers"] = headers
    return out

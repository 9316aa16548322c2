"""Serializers (value -> bytes) and deserializers (bytes -> value).

Built-ins: `serializers.bytes / .str / .json` and `deserializers.bytes /
.str / .json` (UTF-8 for str, orjson for JSON). Any callable of one argument
works too.

`None` is never passed to a (de)serializer: a None key is "no key" (keyless
partitioning) and a None value is a null value (a tombstone in a compacted
topic), both ways. To store the JSON text `null`, send `b"null"` with the
bytes serializer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

Serializer = Callable[[Any], bytes]
Deserializer = Callable[[bytes], Any]


def bytes_serializer(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(
        f"expected bytes, got {type(value).__name__}; pass a serializer "
        "(serializers.str, serializers.json or your own callable)"
    )


def str_serializer(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"serializers.str expects str, got {type(value).__name__}")
    return value.encode("utf-8")


def json_serializer(value: Any) -> bytes:
    return orjson.dumps(value)


def bytes_deserializer(data: bytes) -> bytes:
    return data


def str_deserializer(data: bytes) -> str:
    return data.decode("utf-8")


def json_deserializer(data: bytes) -> Any:
    return orjson.loads(data)


class serializers:  # a namespace: serializers.json
    """`serializers.bytes`, `serializers.str`, `serializers.json`."""

    bytes = staticmethod(bytes_serializer)
    str = staticmethod(str_serializer)
    json = staticmethod(json_serializer)


class deserializers:  # a namespace: deserializers.json
    """`deserializers.bytes`, `deserializers.str`, `deserializers.json`."""

    bytes = staticmethod(bytes_deserializer)
    str = staticmethod(str_deserializer)
    json = staticmethod(json_deserializer)

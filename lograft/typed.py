"""The one typed validation mechanism: msgspec Structs built from untrusted data.

Configs (TOML files, environment overrides), request bodies and metadata
records are all declared as `Record` subclasses: typed fields, constraints
(`Annotated[int, Meta(ge=1)]`), unknown fields refused, defaults in the
declaration. `build` turns a decoded value (a dict from TOML or JSON) into one,
`decode_json` goes straight from JSON bytes; both turn msgspec's
`ValidationError` into the caller's `LograftError` subclass with the path of
the bad field, so a person reads `http.port: Expected int >= 1, got 0`.

Why msgspec: one declaration gives validation, unknown-field refusal, tagged
unions (metadata records by `type`), a JSON codec at least as fast as orjson,
and a JSON Schema (`msgspec.json.schema`) for the OpenAPI document, where the
project had about twenty hand-written `from_dict` / `_int` parsers.

A leaf like `errors`: it imports nothing of lograft but `errors`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from lograft.errors import LograftError

__all__ = ["Record", "build", "decode_json", "encode_json", "field_path", "to_builtins"]

T = TypeVar("T")


class Record(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of every validated value: immutable, keyword-built, strict about keys."""


def build(
    value: Any, into: type[T], *, error: type[LograftError], where: str = "", strict: bool = True
) -> T:
    """`value` (builtins: dicts, lists, str, int, ...) as an `into`, or `error`.

    `strict=False` lets strings stand for numbers and booleans, for sources
    that only have strings (environment variables); JSON and TOML use strict.
    """
    try:
        return msgspec.convert(value, into, strict=strict)
    except msgspec.ValidationError as exc:
        raise error(_message(exc, where)) from None


def decode_json(
    data: bytes | str, into: type[T], *, error: type[LograftError], where: str = ""
) -> T:
    """JSON bytes as an `into`, or `error` (bad JSON and bad values alike)."""
    try:
        return msgspec.json.decode(data, type=into)
    except msgspec.ValidationError as exc:
        raise error(_message(exc, where)) from None
    except msgspec.DecodeError as exc:
        raise error(f"{where + ': ' if where else ''}not valid JSON ({exc})") from None


def encode_json(value: Any) -> bytes:
    """`value` (Records, builtins) as compact JSON bytes."""
    return msgspec.json.encode(value)


def to_builtins(value: Any) -> Any:
    """`value` with every Record turned into a dict (for rendering, TOML, logs)."""
    return msgspec.to_builtins(value)


def field_path(exc: msgspec.ValidationError) -> str:
    """The dotted path msgspec names (`$.http.port` -> `http.port`), or ''."""
    text = str(exc)
    marker = " - at `$"
    at = text.rfind(marker)
    if at < 0:
        return ""
    return text[at + len(marker) :].rstrip("`").lstrip(".")


def _message(exc: msgspec.ValidationError, where: str) -> str:
    text = str(exc)
    path = field_path(exc)
    cut = text.rfind(" - at `$")
    reason = text[:cut] if cut >= 0 else text
    place = ".".join(p for p in (where, path) if p)
    return f"{place}: {reason}" if place else reason

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

import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar, dataclass_transform

import msgspec
import msgspec.inspect
import msgspec.structs

from lograft.errors import LograftError

__all__ = [
    "FieldError",
    "NonNegative",
    "Positive",
    "Record",
    "build",
    "check_fields",
    "decode_json",
    "encode_json",
    "field_path",
    "to_builtins",
    "type_at",
]

T = TypeVar("T")


# Tells type checkers that subclasses inherit frozen, as msgspec does (without
# it mypy takes every subclass for a mutable class under a frozen one).
# kw_only is not inherited (msgspec applies it to the class's own fields).
@dataclass_transform(frozen_default=True, field_specifiers=(msgspec.field,))
class Record(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of every validated value: immutable and strict about keys.

    msgspec does not pass `kw_only` on to subclasses: their fields may be
    given by position unless the subclass says `kw_only=True` itself.

    Constraints (`Meta`) are checked when a Record is built from data
    (`build`, `decode_json`), not when code calls the constructor with values
    it already trusts; rules between fields go in `__post_init__` (raising
    `FieldError`), which runs either way.
    """


# The integer constraints most settings share.
Positive = Annotated[int, msgspec.Meta(ge=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class FieldError(ValueError):
    """A rule between fields broken, raised by a Record's `__post_init__`:
    `build` reports it as the caller's error at the path of `field`."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


def build(
    value: Any,
    into: type[T],
    *,
    error: type[LograftError],
    where: str = "",
    strict: bool = True,
    detail: str | None = None,
) -> T:
    """`value` (builtins: dicts, lists, str, int, ...) as an `into`, or `error`.

    `strict=False` lets strings stand for numbers and booleans, for sources
    that only have strings (environment variables); JSON and TOML use strict.
    `detail` names the error detail that carries the dotted path of the bad
    field (configs: "key"), so a caller can point at it without parsing text.
    A `pathlib.Path` field takes a string.
    """
    try:
        return msgspec.convert(value, into, strict=strict, dec_hook=_dec_hook)
    except msgspec.ValidationError as exc:
        place, reason = _explain(exc, where, value, into, strict)
        details = {detail: place} if detail is not None else {}
        raise error(f"{place}: {reason}" if place else reason, **details) from None


def check_fields(record: Record, *, error: type[LograftError], detail: str | None = None) -> None:
    """Check each field of `record` against its declared type and constraints,
    for a Record that code (not `build`) constructs from values a person
    chose: call it first in `__post_init__` (the client's settings do).
    Raises `error` naming the field."""
    for info in msgspec.structs.fields(record):
        value = getattr(record, info.name)
        try:
            msgspec.convert(value, info.type, dec_hook=_dec_hook)
        except msgspec.ValidationError as exc:
            _, reason = _explain(exc, "", value, info.type)
            if "got" not in reason:
                reason = f"{reason}, got {_clip(repr(value))}"
            details = {detail: info.encode_name} if detail is not None else {}
            raise error(f"{info.encode_name}: {reason}", **details) from None


# A decoder per type decoded, kept: msgspec.json.decode(type=...) resolves
# the type on every call (about 15 % of the decode of a 500-record produce
# body). Bounded by the types the code names; decoders are safe to share
# between threads (their state lives in each call).
_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decoder(into: type[T]) -> msgspec.json.Decoder[T]:
    try:
        decoder: msgspec.json.Decoder[T] | None = _DECODERS.get(into)
    except TypeError:  # an unhashable type form (Annotated with a dict): not kept
        return msgspec.json.Decoder(into, dec_hook=_dec_hook)
    if decoder is None:
        decoder = _DECODERS[into] = msgspec.json.Decoder(into, dec_hook=_dec_hook)
    return decoder


def decode_json(
    data: bytes | str,
    into: type[T],
    *,
    error: type[LograftError],
    where: str = "",
    detail: str | None = None,
) -> T:
    """JSON bytes as an `into`, or `error` (bad JSON and bad values alike).

    `detail` as for `build`. JSON nested deeper than the interpreter's
    recursion limit (msgspec recurses per level) is the caller's error too,
    never a RecursionError.
    """
    lead = f"{where}: " if where else ""
    try:
        return _decoder(into).decode(data)
    except msgspec.ValidationError as exc:
        # Only a refused document is decoded a second time, untyped, to show
        # the bad value as `build` does.
        place, reason = _explain(exc, where, _plain_json(data), into)
        details = {detail: place} if detail is not None else {}
        raise error(f"{place}: {reason}" if place else reason, **details) from None
    except msgspec.DecodeError as exc:
        raise error(f"{lead}not valid JSON ({exc})") from None
    except RecursionError:
        raise error(f"{lead}JSON nested too deeply") from None


def _plain_json(data: bytes | str) -> Any:
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return _MISSING


def encode_json(value: Any) -> bytes:
    """`value` (Records, builtins) as compact JSON bytes."""
    return msgspec.json.encode(value)


def to_builtins(value: Any) -> Any:
    """`value` with every Record turned into a dict (for rendering, TOML, logs)."""
    return msgspec.to_builtins(value, enc_hook=_enc_hook)


def type_at(into: Any, path: list[str]) -> msgspec.inspect.Type | None:
    """The declared type of the field at `path` (names of nested fields or
    dict keys) inside `into`, or None when `into` declares no such field.
    Optional fields (`X | None`) give X."""
    info: msgspec.inspect.Type = msgspec.inspect.type_info(into)
    for part in path:
        info = _unwrap(info)
        if isinstance(info, msgspec.inspect.StructType):
            named = [f for f in info.fields if f.encode_name == part]
            if not named:
                return None
            info = named[0].type
        elif isinstance(info, msgspec.inspect.DictType):
            info = info.value_type
        elif isinstance(info, _SEQUENCES) and (part.isdigit() or part == "..."):
            info = info.item_type
        else:
            return None
    return _unwrap(info)


_SEQUENCES = (msgspec.inspect.ListType, msgspec.inspect.VarTupleType, msgspec.inspect.SetType)


def _unwrap(info: msgspec.inspect.Type) -> msgspec.inspect.Type:
    if isinstance(info, msgspec.inspect.UnionType):
        rest = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(rest) == 1:
            return rest[0]
    return info


def _dec_hook(into: type, value: Any) -> Any:
    if into is Path and isinstance(value, str | Path):
        return Path(value)
    raise NotImplementedError


def _enc_hook(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError


_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_NAMED_FIELD = re.compile(r"^Object (?:contains unknown|missing required) field `([^`]*)`")
_SHOWN_CHARS_MAX = 80


def _explain(
    exc: msgspec.ValidationError, where: str, value: Any, into: Any, strict: bool = True
) -> tuple[str, str]:
    """(dotted path of the bad field, what is wrong with it), with msgspec's
    text made as precise as a hand-written check: an unknown or missing field
    is part of the path and an unknown one lists the known names, and a value
    out of bounds is shown."""
    text = str(exc)
    in_key = _IN_KEY.search(text)
    if in_key is not None:  # a dict key: "... - at `key` in `$.http.dial`"
        reason, path = text[: in_key.start()], in_key.group(1).lstrip(".")
        path = f"{path}[...]" if path else "[...]"
    else:
        cut = text.rfind(" - at `$")
        reason = text[:cut] if cut >= 0 else text
        path = field_path(exc)
    steps = [m.group(1) or m.group(2) for m in _STEP.finditer("." + path)] if path else []
    if "..." in steps:  # msgspec does not say which entry of a dict: find it
        key = _failing_key(value, into, steps, strict)
        if key is not None:
            path = path.replace("[...]", f".{key}", 1).lstrip(".")
            steps[steps.index("...")] = key
    named = _NAMED_FIELD.match(reason)
    cause = exc.__cause__
    if isinstance(cause, FieldError):
        path = f"{path}.{cause.field}" if path else cause.field
        reason = cause.rule
    elif named is not None:
        if reason.startswith("Object contains unknown"):
            known = _known_fields(into, steps)
            reason = f"unknown field; known: {', '.join(known)}" if known else "unknown field"
        else:
            reason = "required"
        path = f"{path}.{named.group(1)}" if path else named.group(1)
    elif "got" not in reason and not reason.startswith("Invalid enum value"):
        found = _value_at(value, steps)
        if found is not _MISSING:
            reason = f"{reason}, got {_clip(repr(found))}"
    # Names and values come from the data: never echo one of them whole.
    reason = _QUOTED.sub(lambda m: _clip(m.group(0)[:-1]) + m.group(0)[-1], reason)
    path = ".".join(_clip(step) for step in path.split("."))
    place = ".".join(p for p in (where, path) if p)
    return place, reason


_QUOTED = re.compile(rf"'[^']{{{_SHOWN_CHARS_MAX},}}'|`[^`]{{{_SHOWN_CHARS_MAX},}}`")


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS_MAX else text[:_SHOWN_CHARS_MAX] + "..."


_IN_KEY = re.compile(r" - at `key` in `\$([^`]*)`$")


def _failing_key(value: Any, into: Any, steps: list[str], strict: bool) -> str | None:
    """The key of the first dict entry (the `...` step) that does not convert,
    found by converting each entry on its own."""
    at = steps.index("...")
    table = _value_at(value, steps[:at])
    declared = _python_type_at(into, steps[:at])
    if not isinstance(table, dict) or declared is None:
        return None
    for key, item in table.items():
        try:
            msgspec.convert({key: item}, declared, strict=strict, dec_hook=_dec_hook)
        except msgspec.ValidationError:
            return str(key)
    return None


def _python_type_at(into: Any, steps: list[str]) -> Any:
    declared = into
    for step in steps:
        declared = _strip(declared)
        if isinstance(declared, type) and issubclass(declared, msgspec.Struct):
            named = [f for f in msgspec.structs.fields(declared) if f.encode_name == step]
            if not named:
                return None
            declared = named[0].type
        elif typing.get_origin(declared) is dict:
            declared = typing.get_args(declared)[1]
        elif typing.get_origin(declared) in (list, tuple) and step.isdigit():
            declared = typing.get_args(declared)[0]
        else:
            return None
    return _strip(declared)


def _strip(declared: Any) -> Any:
    """`X` of `Annotated[X, ...]` and of `X | None`."""
    if typing.get_origin(declared) is Annotated:
        declared = typing.get_args(declared)[0]
    args = [a for a in typing.get_args(declared) if a is not type(None)]
    if typing.get_origin(declared) in (typing.Union, types.UnionType) and len(args) == 1:
        return _strip(args[0])
    return declared


def _known_fields(into: Any, steps: list[str]) -> list[str]:
    try:
        info = type_at(into, steps)
    except TypeError:
        return []
    if isinstance(info, msgspec.inspect.StructType):
        return sorted(f.encode_name for f in info.fields)
    return []


_MISSING = object()


def _value_at(value: Any, steps: list[str]) -> Any:
    if value is _MISSING:
        return _MISSING
    for step in steps:
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list | tuple) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return _MISSING
    return value


def field_path(exc: msgspec.ValidationError) -> str:
    """The dotted path msgspec names (`$.http.port` -> `http.port`), or ''."""
    text = str(exc)
    marker = " - at `$"
    at = text.rfind(marker)
    if at < 0:
        return ""
    return text[at + len(marker) :].rstrip("`").lstrip(".")

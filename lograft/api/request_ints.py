"""Integers from requests, parsed one strict way everywhere: query parameters,
path segments, stream cursors and JSON bodies (docs/api.md, "Integers").

Text (query, path, cursor): ASCII digits only, with one leading `-` only
where the field has meaningful negatives; no `+`, no spaces, no `_`, no other
scripts' digits. Python's `int()` takes all of those (`int(" +0_0 ")` and
`int("٣")` are numbers to it), and `"²".isdigit()` is true though `int("²")`
fails, so neither may judge network input. At most 19 digits are read, so no
input makes `int()` work through a long string.

JSON: a JSON integer, not `true` (an int to Python), not `1.0`, within the
field's range: int64 unless the field is narrower (Kafka's int32 partitions
and epochs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lograft.echo import shown
from lograft.errors import InvalidRequestError

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
# Largest offset, size or time a query parameter may carry: far below int64,
# so arithmetic on it cannot overflow what Kafka's formats hold.
QUERY_INT_MAX = 1 << 62

# [0-9], not \d: \d matches every script's digits.
_UNSIGNED = re.compile(r"[0-9]{1,19}")
_SIGNED = re.compile(r"-?[0-9]{1,19}")
_TEXT_RULE = " (ASCII digits only)"


def parse_int(text: str, name: str, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """`text` as an integer in [minimum, maximum]; InvalidRequestError naming `name` if not."""
    pattern = _SIGNED if minimum < 0 else _UNSIGNED
    if pattern.fullmatch(text) is None:
        raise _out_of_range(f"{name}={shown(text)}", name, minimum, maximum, _TEXT_RULE)
    value = int(text)
    if not minimum <= value <= maximum:
        raise _out_of_range(f"{name}={value}", name, minimum, maximum, _TEXT_RULE)
    return value


def query_int(
    query: Mapping[str, str],
    name: str,
    default: int | None,
    *,
    minimum: int = 0,
    maximum: int = QUERY_INT_MAX,
) -> int:
    """A query parameter as an integer; `default` when absent (required when None)."""
    raw = query.get(name)
    if raw is None:
        if default is None:
            raise InvalidRequestError(f"query parameter {name} is required", field=name)
        return default
    return parse_int(raw, name, minimum=minimum, maximum=maximum)


def optional_query_int(
    query: Mapping[str, str], name: str, *, minimum: int = 0, maximum: int = QUERY_INT_MAX
) -> int | None:
    raw = query.get(name)
    return None if raw is None else parse_int(raw, name, minimum=minimum, maximum=maximum)


def parse_partition(text: str, name: str = "partition") -> int:
    """A partition number (Kafka's int32, never negative) from a path or query."""
    return parse_int(text, name, minimum=0, maximum=INT32_MAX)


def json_int(value: Any, name: str, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """A JSON body's integer field in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _out_of_range(f"{name}={shown(value)}", name, minimum, maximum)
    if not minimum <= value <= maximum:
        raise _out_of_range(f"{name}={shown(value)}", name, minimum, maximum)
    return value


def _out_of_range(
    what: str, name: str, minimum: int, maximum: int, rule: str = ""
) -> InvalidRequestError:
    return InvalidRequestError(
        f"{what}: must be an integer{rule} from {minimum} to {maximum}",
        field=name,
        minimum=minimum,
        maximum=maximum,
    )

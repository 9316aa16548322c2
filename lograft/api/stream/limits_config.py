"""`[stream]` in the node config: the streaming endpoint's limits.

    [stream]
    streams_max = 200
    [stream.source]
    fetch_wait_ms = 2000
    [stream.group]
    commit_interval_ms_default = 1000

Every key is a field of `StreamLimits` (or of its nested `source` and
`group` limits); every value is a positive integer. Unknown keys are refused
with the list of known ones, so a typo stops the node instead of being
ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from lograft.api.stream.routes import StreamLimits
from lograft.errors import InvalidConfigError

T = TypeVar("T")


def stream_limits_from_config(raw: Mapping[str, Any]) -> StreamLimits:
    return _build(StreamLimits, raw, "stream")


def _build(cls: type[T], raw: Mapping[str, Any], prefix: str) -> T:
    if not isinstance(raw, Mapping):
        raise InvalidConfigError(f"{prefix}: must be a table", key=prefix)
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"{prefix}.{key}"
        spec = known.get(key)
        if spec is None:
            raise InvalidConfigError(
                f"{name}: unknown setting; known: {', '.join(sorted(known))}", key=name
            )
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            values[key] = _build(type(default), value, name)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidConfigError(f"{name}: must be a positive integer, got {value!r}", key=name)
        else:
            values[key] = value
    return cls(**values)

"""Per-log configuration: every limit has a name, a default and a unit (last).

Names and defaults follow Kafka's topic configs with `.` turned into `_`
(segment.bytes -> segment_bytes). -1 means "unlimited" where Kafka says so.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass
from typing import Any

from lograft.echo import clip, shown
from lograft.errors import InvalidConfigError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
# Kafka types these configs as int (32-bit); every other integer one is a long.
_INT32_KEYS = frozenset(
    {"segment_bytes", "segment_index_bytes", "index_interval_bytes", "max_message_bytes"}
)
# An integer setting written as text: ASCII digits, maybe a leading '-' (int()
# would also take spaces, '_', '+' and other scripts' digits), at most 19 of
# them: longer is out of range anyway, and int() of it costly.
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")


class FlushPolicy(enum.StrEnum):
    NONE = "none"  # rely on replication and the page cache; flush at roll/close only
    INTERVAL_MS = "interval_ms"  # a background flusher fsyncs every flush_interval_ms
    EVERY_BATCH = "every_batch"  # fsync before an append returns


class CleanupPolicy(enum.StrEnum):
    DELETE = "delete"
    COMPACT = "compact"
    COMPACT_DELETE = "compact,delete"


class TimestampType(enum.StrEnum):
    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class LogConfig:
    # A segment is rolled when it would grow past this many bytes (<= 2 GiB,
    # since index positions are 32-bit).
    segment_bytes: int = 1 * GIB
    # ... or when its first batch is older than this many milliseconds.
    segment_ms: int = 7 * DAY_MS
    # Space preallocated for a segment's offset and time index files, bytes
    # (< 2 GiB: each file is created at this size and mapped into memory).
    segment_index_bytes: int = 10 * MIB
    # One offset-index entry per this many bytes of log.
    index_interval_bytes: int = 4 * KIB
    # Largest record batch accepted, bytes (Kafka's default 1 MiB + overhead).
    max_message_bytes: int = 1 * MIB + 12
    flush_policy: FlushPolicy = FlushPolicy.NONE
    flush_interval_ms: int = 1000
    # Delete whole segments whose newest record is older than this, ms (-1: never).
    retention_ms: int = 7 * DAY_MS
    # Delete oldest segments while the log is larger than this, bytes (-1: never).
    retention_bytes: int = -1
    cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE
    # Tombstones survive compaction for at least this long, ms.
    delete_retention_ms: int = 1 * DAY_MS
    # Compact only once this share of the log is dirty (0..1).
    min_cleanable_dirty_ratio: float = 0.5
    # A record younger than this is never compacted away, ms.
    min_compaction_lag_ms: int = 0
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    # CreateTime: the leader refuses a record timestamp more than this far
    # before its clock, ms (Kafka's default: no limit; timestamps below 0 are
    # always refused) ...
    message_timestamp_before_max_ms: int = INT64_MAX
    # ... or more than this far after it, ms (Kafka 4.0's default, 1 hour).
    message_timestamp_after_max_ms: int = HOUR_MS

    def __post_init__(self) -> None:
        _check(self.segment_bytes >= 1024, "segment_bytes", "must be >= 1024 bytes")
        _check(self.segment_bytes <= 2 * GIB - 1, "segment_bytes", "must be < 2 GiB")
        _check(self.segment_ms >= 1, "segment_ms", "must be >= 1 ms")
        _check(self.segment_index_bytes >= 4096, "segment_index_bytes", "must be >= 4096 bytes")
        # Every integer within Kafka's type for it: a topic config is applied by
        # every replica, and a value no file or mapping can have (an index of
        # 2**62 bytes) would put each of them out of service.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if type(value) is int:
                top = INT32_MAX if f.name in _INT32_KEYS else INT64_MAX
                _check(value <= top, f.name, f"must be <= {top}")
        _check(self.index_interval_bytes >= 0, "index_interval_bytes", "must be >= 0 bytes")
        _check(self.max_message_bytes >= 61, "max_message_bytes", "must be >= 61 bytes")
        _check(self.flush_interval_ms >= 1, "flush_interval_ms", "must be >= 1 ms")
        _check(self.retention_ms >= -1, "retention_ms", "must be -1 or >= 0 ms")
        _check(self.retention_bytes >= -1, "retention_bytes", "must be -1 or >= 0 bytes")
        _check(self.delete_retention_ms >= 0, "delete_retention_ms", "must be >= 0 ms")
        _check(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0,
            "min_cleanable_dirty_ratio",
            "must be between 0 and 1",
        )
        _check(self.min_compaction_lag_ms >= 0, "min_compaction_lag_ms", "must be >= 0 ms")
        for key in ("message_timestamp_before_max_ms", "message_timestamp_after_max_ms"):
            _check(0 <= getattr(self, key) <= INT64_MAX, key, f"must be 0..{INT64_MAX} ms")

    @property
    def compact(self) -> bool:
        return self.cleanup_policy in (CleanupPolicy.COMPACT, CleanupPolicy.COMPACT_DELETE)

    @property
    def delete(self) -> bool:
        return self.cleanup_policy in (CleanupPolicy.DELETE, CleanupPolicy.COMPACT_DELETE)

    def with_overrides(self, overrides: dict[str, Any]) -> LogConfig:
        """A copy with topic-level overrides applied, validating names and types."""
        return dataclasses.replace(self, **coerce_overrides(overrides))


_ENUMS: dict[str, type[enum.StrEnum]] = {
    "flush_policy": FlushPolicy,
    "cleanup_policy": CleanupPolicy,
    "message_timestamp_type": TimestampType,
}


def config_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(LogConfig)]


def coerce_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """Check names and convert values (strings from configs, JSON numbers)."""
    fields = {f.name: f for f in dataclasses.fields(LogConfig)}
    out: dict[str, Any] = {}
    for key, raw in overrides.items():
        if key not in fields:
            raise InvalidConfigError(
                f"unknown log config {shown(key)}; known: {', '.join(sorted(fields))}",
                key=clip(str(key)),
            )
        out[key] = _coerce(key, raw)
    return out


def _coerce(key: str, raw: Any) -> Any:
    if key in _ENUMS:
        try:
            return _ENUMS[key](str(raw))
        except ValueError:
            allowed = ", ".join(v.value for v in _ENUMS[key])
            raise InvalidConfigError(
                f"{key}={shown(raw)} is not one of {allowed}", key=key
            ) from None
    if key == "min_cleanable_dirty_ratio":
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key}={shown(raw)} is not a number", key=key) from None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and _INT_TEXT.fullmatch(raw):
        return int(raw)
    raise InvalidConfigError(
        f"{key}={shown(raw)} must be an integer (ASCII digits, at most 19)", key=key
    )


def _check(ok: bool, key: str, rule: str) -> None:
    if not ok:
        raise InvalidConfigError(f"{key} {rule}", key=key)

"""Per-log configuration: every limit has a name, a default and a unit (last).

Names and defaults follow Kafka's topic configs with `.` turned into `_`
(segment.bytes -> segment_bytes). -1 means "unlimited" where Kafka says so.

`LogConfig` is a typed Record (`lograft.typed`): each bound is in the field's
type, every integer within Kafka's type for it (int32 or int64): a topic
config is applied by every replica, and a value no file or mapping can have
(an index of 2**62 bytes) would put each of them out of service. `log_config`
builds one from overrides (topic configs are text, the node's log_defaults
TOML values).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Annotated, Any

from msgspec import Meta

from lograft.echo import clip, shown
from lograft.errors import InvalidConfigError
from lograft.typed import Record, build, to_builtins

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1


class FlushPolicy(enum.StrEnum):
    NONE = "none"  # rely on replication and the page cache; flush at roll/close only
    INTERVAL_MS = "interval_ms"  # a background flusher fsyncs every flush_interval_ms
    EVERY_BATCH = "every_batch"  # fsync before an append returns
    # acks=all answered once every ISR member has fsynced the batch; one
    # fsync, off the event loop, covers every append since the last
    # (lograft/brokers/group_commit.py). Flushes at roll/close like `none`.
    GROUP_COMMIT = "group_commit"


class CleanupPolicy(enum.StrEnum):
    DELETE = "delete"
    COMPACT = "compact"
    COMPACT_DELETE = "compact,delete"


class TimestampType(enum.StrEnum):
    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


class LogConfig(Record):
    # Every integer is within Kafka's type for it: int32 for segment_bytes,
    # segment_index_bytes, index_interval_bytes and max_message_bytes, int64
    # (long) for the rest.
    # A segment is rolled when it would grow past this many bytes (<= 2 GiB,
    # since index positions are 32-bit).
    segment_bytes: Annotated[int, Meta(ge=1024, le=INT32_MAX)] = 1 * GIB
    # ... or when its first batch is older than this many milliseconds.
    segment_ms: Annotated[int, Meta(ge=1, le=INT64_MAX)] = 7 * DAY_MS
    # Space preallocated for a segment's offset and time index files, bytes
    # (< 2 GiB: each file is created at this size and mapped into memory).
    segment_index_bytes: Annotated[int, Meta(ge=4096, le=INT32_MAX)] = 10 * MIB
    # One offset-index entry per this many bytes of log.
    index_interval_bytes: Annotated[int, Meta(ge=0, le=INT32_MAX)] = 4 * KIB
    # Largest record batch accepted, bytes (Kafka's default 1 MiB + overhead).
    max_message_bytes: Annotated[int, Meta(ge=61, le=INT32_MAX)] = 1 * MIB + 12
    flush_policy: FlushPolicy = FlushPolicy.NONE
    flush_interval_ms: Annotated[int, Meta(ge=1, le=INT64_MAX)] = 1000
    # Delete whole segments whose newest record is older than this, ms (-1: never).
    retention_ms: Annotated[int, Meta(ge=-1, le=INT64_MAX)] = 7 * DAY_MS
    # Delete oldest segments while the log is larger than this, bytes (-1: never).
    retention_bytes: Annotated[int, Meta(ge=-1, le=INT64_MAX)] = -1
    cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE
    # Tombstones survive compaction for at least this long, ms.
    delete_retention_ms: Annotated[int, Meta(ge=0, le=INT64_MAX)] = 1 * DAY_MS
    # Compact only once this share of the log is dirty (0..1).
    min_cleanable_dirty_ratio: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.5
    # A record younger than this is never compacted away, ms.
    min_compaction_lag_ms: Annotated[int, Meta(ge=0, le=INT64_MAX)] = 0
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    # CreateTime: the leader refuses a record timestamp more than this far
    # before its clock, ms (Kafka's default: no limit; timestamps below 0 are
    # always refused) ...
    message_timestamp_before_max_ms: Annotated[int, Meta(ge=0, le=INT64_MAX)] = INT64_MAX
    # ... or more than this far after it, ms (Kafka 4.0's default, 1 hour).
    message_timestamp_after_max_ms: Annotated[int, Meta(ge=0, le=INT64_MAX)] = HOUR_MS

    @property
    def compact(self) -> bool:
        return self.cleanup_policy in (CleanupPolicy.COMPACT, CleanupPolicy.COMPACT_DELETE)

    @property
    def delete(self) -> bool:
        return self.cleanup_policy in (CleanupPolicy.DELETE, CleanupPolicy.COMPACT_DELETE)

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
        """A copy with topic-level overrides applied, validating names and types."""
        return log_config(overrides, self)


# The integer settings: as text only ASCII digits, maybe a leading '-', at most
# 19 of them (int() would also take spaces, '_', '+' and other scripts'
# digits, msgspec '1e3' and '1.0'), so a stored topic config has one spelling
# that every broker reads the same.
_INT_KEYS = frozenset(
    name
    for name, value in zip(LogConfig.__struct_fields__, LogConfig.__struct_defaults__, strict=True)
    if type(value) is int
)
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")


def config_keys() -> list[str]:
    return list(LogConfig.__struct_fields__)


def log_config(overrides: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
    """`base` (the defaults if None) with `overrides` applied: text (topic configs)
    or typed values (TOML); raises InvalidConfigError naming the key."""
    for key, value in overrides.items():
        if key in _INT_KEYS and not (
            (type(value) is int) or (isinstance(value, str) and _INT_TEXT.fullmatch(value))
        ):
            raise InvalidConfigError(
                f"{key}={shown(value)} must be an integer (ASCII digits, at most 19)", key=key
            )
        if key not in LogConfig.__struct_fields__:
            raise InvalidConfigError(
                f"unknown log config {shown(key)}; known: {', '.join(sorted(config_keys()))}",
                key=clip(str(key)),
            )
    merged = {**(to_builtins(base) if base is not None else {}), **overrides}
    return build(merged, LogConfig, error=InvalidConfigError, detail="key", strict=False)

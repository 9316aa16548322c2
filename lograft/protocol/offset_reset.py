"""How a consumer group's committed offsets are reset: the strategies of
`POST /v1/groups/{group}/offsets/reset` and the rule that turns each
partition's bounds into its new offset.

The group coordinator applies it (`brokers/groups/admin.py`, through
`api/routes_group_admin.py`); `lograft groups reset-offsets --dry-run`
applies the same rule to bounds it reads through the client, so a dry run
shows what the reset would commit. Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from lograft.errors import InvalidRequestError
from lograft.protocol.topic_partition import TopicPartition


class OffsetResetStrategy(enum.StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"
    OFFSET = "offset"


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    log_start_offset: int
    high_watermark: int
    # For TIMESTAMP: the first offset whose timestamp is >= the timestamp
    # (the time index lookup), None when no record is that recent.
    offset_for_timestamp: int | None = None


def resolve_reset_offsets(
    strategy: OffsetResetStrategy,
    bounds: Mapping[TopicPartition, PartitionBounds],
    offset: int | None = None,
) -> dict[TopicPartition, int]:
    """The offset each partition is reset to, always within [log start, HW].

    TIMESTAMP with no record that recent resets to the high watermark, and
    OFFSET outside the partition's range is clamped into it, as Kafka's
    kafka-consumer-groups tool does.
    """
    if strategy is OffsetResetStrategy.OFFSET and (offset is None or offset < 0):
        raise InvalidRequestError("reset to an offset needs a non-negative offset")
    out: dict[TopicPartition, int] = {}
    for tp, b in bounds.items():
        if not 0 <= b.log_start_offset <= b.high_watermark:
            raise ValueError(f"{tp}: bad bounds {b}")
        if strategy is OffsetResetStrategy.EARLIEST:
            target = b.log_start_offset
        elif strategy is OffsetResetStrategy.LATEST:
            target = b.high_watermark
        elif strategy is OffsetResetStrategy.TIMESTAMP:
            found = b.offset_for_timestamp
            target = b.high_watermark if found is None else found
        else:
            assert offset is not None
            target = offset
        out[tp] = min(max(target, b.log_start_offset), b.high_watermark)
    return out

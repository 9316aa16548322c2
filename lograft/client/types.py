"""The values the client hands to and returns from user code.

`TopicPartition` is a NamedTuple (hashable, unpackable, ordered) as in
kafka-python. `RecordMetadata` is what a send resolves to; `ConsumerRecord`
is what a poll returns. Offsets are absolute; timestamps are milliseconds
since the epoch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from lograft.protocol.topic_partition import TopicPartition

__all__ = ["ConsumerRecord", "Header", "RecordMetadata", "TimestampType", "TopicPartition"]

Header = tuple[str, bytes | None]


class TimestampType(enum.IntEnum):
    """Kafka's timestamp types: set by the producer, or by the broker on append."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed.

    `offset` is -1 with acks=0 (the broker does not answer). `timestamp` is the
    record's own timestamp, or the broker's append time when the topic uses
    `message_timestamp_type=LogAppendTime`.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as a consumer returns it, key and value deserialized."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: Any
    value: Any
    headers: tuple[Header, ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

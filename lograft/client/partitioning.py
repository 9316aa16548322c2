"""Which partition a record goes to, as Kafka's default producer does.

- An explicit `partition` is used as given (checked against the count).
- A key: Kafka's murmur2 of the serialized key (`partition_for_key`), so a
  key lands on the partition Kafka would pick for the same partition count.
- No key: sticky partitioning (Kafka's KIP-480). Every keyless record of a
  topic goes to the topic's current sticky partition until the batch there
  is closed (sent or full); the next keyless record then switches to the
  next partition that has a leader (round robin from a random start, via
  `KeylessPartitioner`), so batches fill up instead of every partition
  getting a one-record batch.

State is one sticky partition and one counter per topic. Loop-bound.
"""

from __future__ import annotations

import random

from lograft.client.metadata import TopicMetadata
from lograft.errors import UnknownTopicOrPartitionError
from lograft.protocol.partitioner import KeylessPartitioner, partition_for_key


class StickyPartitioner:
    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        self._rotation: dict[str, KeylessPartitioner] = {}
        self._sticky: dict[str, int] = {}

    def partition(self, meta: TopicMetadata, key: bytes | None, explicit: int | None) -> int:
        if explicit is not None:
            if not 0 <= explicit < meta.count:
                raise UnknownTopicOrPartitionError(
                    f"partition {explicit} of topic {meta.name!r} does not exist; it has "
                    f"{meta.count} (0..{meta.count - 1})",
                    topic=meta.name,
                    partition=explicit,
                )
            return explicit
        if key is not None:
            return partition_for_key(key, meta.count)
        current = self._sticky.get(meta.name)
        if current is None or current >= meta.count:
            current = self._next(meta)
        return current

    def on_new_batch(self, meta: TopicMetadata, previous: int) -> int:
        """The sticky partition's batch is closed: move on (once per batch)."""
        if self._sticky.get(meta.name) == previous:
            return self._next(meta)
        return self._sticky.get(meta.name, previous)

    def _next(self, meta: TopicMetadata) -> int:
        rot = self._rotation.get(meta.name)
        if rot is None:
            rot = self._rotation[meta.name] = KeylessPartitioner(self._rng.randrange(1 << 31))
        choice = rot.next_request_partition(meta.count, meta.available())
        self._sticky[meta.name] = choice
        return choice

"""`TopicPartition`: the name of one partition, shared by servers and clients.

A NamedTuple (hashable, unpackable, ordered) as in kafka-python, so a user's
`("orders", 0)` compares equal to it and sorting a list of them is stable.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

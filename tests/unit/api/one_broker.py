"""A one-broker metadata view for route tests that run a real ReplicaManager
on an aiohttp test server (groups, group streams)."""

from __future__ import annotations

from types import MappingProxyType

from lograft.api.services import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import PartitionMeta
from lograft.protocol.topic_partition import TopicPartition

BROKER = 1


class OneBrokerMetadata:
    """This broker's view: every partition has one replica, on `BROKER`.
    `url` is where this broker serves (the test server's address, once
    known); other brokers answer at made-up addresses."""

    def __init__(self) -> None:
        self.views: dict[str, TopicView] = {}
        self.url: str | None = None

    def set_topic(
        self, name: str, partitions: int, leader: int = BROKER, leader_epoch: int = 1
    ) -> None:
        a = Assignment((BROKER,), (BROKER,), leader, leader_epoch, 0)
        self.views[name] = TopicView(
            name, f"id-{name}", MappingProxyType(dict.fromkeys(range(partitions), a))
        )

    def topic(self, name: str) -> TopicView | None:
        return self.views.get(name)

    def topics(self) -> list[TopicView]:
        return list(self.views.values())

    def broker_url(self, broker_id: int) -> str | None:
        if broker_id == BROKER and self.url is not None:
            return self.url
        return f"http://broker-{broker_id}:9092"

    def live_brokers(self) -> list[int]:
        return [BROKER]

    def wanted(self) -> dict[TopicPartition, PartitionMeta]:
        """What the replica manager should host: every partition of every topic."""
        return {
            TopicPartition(name, p): PartitionMeta(view.topic_id, a)
            for name, view in self.views.items()
            for p, a in view.partitions.items()
        }

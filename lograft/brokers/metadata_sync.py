"""From the metadata image to what a broker acts on.

`ImageView` answers the HTTP layer's questions (topic partitions, leaders,
broker addresses) from one immutable `MetadataImage`; `hosted_partitions`
lists the partitions whose replicas include a broker, for
`ReplicaManager.apply_metadata`. Both are pure reads of an image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lograft.brokers.partition import Assignment, TopicPartition
from lograft.brokers.replica_manager import PartitionMeta
from lograft.quorum.image import MetadataImage, PartitionState, TopicImage
from lograft.quorum.records import ConfigResourceType

HTTP_LISTENER = "http"


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str
    partitions: Mapping[int, Assignment]
    config: Mapping[str, Any] = field(default_factory=dict)


def assignment_of(p: PartitionState) -> Assignment:
    return Assignment(p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch)


class ImageView:
    """A MetadataView over one immutable image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def _view(self, topic: TopicImage) -> TopicView:
        return TopicView(
            topic.name,
            topic.topic_id,
            {p.partition: assignment_of(p) for p in topic.partitions},
            dict(self.image.config(ConfigResourceType.TOPIC, topic.name)),
        )

    def topic(self, name: str) -> TopicView | None:
        topic = self.image.topic(name)
        return None if topic is None else self._view(topic)

    def topics(self) -> list[TopicView]:
        return [
            self._view(self.image.topics[tid]) for _n, tid in sorted(self.image.topic_ids.items())
        ]

    def broker_url(self, broker_id: int) -> str | None:
        reg = self.image.brokers.get(broker_id)
        if reg is None:
            return None
        return dict(reg.endpoints).get(HTTP_LISTENER)

    def live_brokers(self) -> list[int]:
        return self.image.usable_broker_ids()


def hosted_partitions(image: MetadataImage, broker_id: int) -> dict[TopicPartition, PartitionMeta]:
    """Every partition with a replica on `broker_id`, with its topic config."""
    out: dict[TopicPartition, PartitionMeta] = {}
    for name, topic_id in image.topic_ids.items():
        topic = image.topics[topic_id]
        config = dict(image.config(ConfigResourceType.TOPIC, name))
        for p in topic.partitions:
            if broker_id in p.replicas:
                out[TopicPartition(name, p.partition)] = PartitionMeta(
                    topic_id, assignment_of(p), config
                )
    return out

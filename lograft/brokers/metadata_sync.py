"""From the metadata image to what a broker acts on.

`ImageView` answers the HTTP layer's questions (topic partitions, leaders,
broker addresses) from one immutable `MetadataImage`; `hosted_partitions`
lists the partitions whose replicas include a broker, for
`ReplicaManager.apply_metadata`. Both are pure reads of an image.

A topic's view (one `Assignment` per partition) is built once per image and
shared: every produce and fetch request asks for it, and rebuilding it cost
O(partitions of the topic) per request (a 2,000-partition topic: thousands of
objects for each request). Views are read-only mappings for that reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
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


class _TopicViews:
    """Topic views of the last `IMAGES_MAX` images asked about, by image identity."""

    IMAGES_MAX = 2  # the newest image and the one the replica manager applied

    def __init__(self) -> None:
        self._by_image: list[tuple[MetadataImage, dict[str, TopicView]]] = []

    def get(self, image: MetadataImage, topic: str, build: Callable[[], TopicView]) -> TopicView:
        views = next((v for img, v in self._by_image if img is image), None)
        if views is None:
            views = {}
            self._by_image = [(image, views), *self._by_image[: self.IMAGES_MAX - 1]]
        view = views.get(topic)
        if view is None:
            view = views[topic] = build()
        return view


_topic_views = _TopicViews()


class ImageView:
    """A MetadataView over one immutable image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def _view(self, topic: TopicImage) -> TopicView:
        return _topic_views.get(self.image, topic.name, lambda: self._build_view(topic))

    def _build_view(self, topic: TopicImage) -> TopicView:
        return TopicView(
            topic.name,
            topic.topic_id,
            MappingProxyType({p.partition: assignment_of(p) for p in topic.partitions}),
            MappingProxyType(dict(self.image.config(ConfigResourceType.TOPIC, topic.name))),
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

"""From the metadata image to what a broker acts on.

`ImageView` answers the HTTP layer's questions (topic partitions, leaders,
broker addresses) from one immutable `MetadataImage`; `hosted_partitions`
lists the partitions whose replicas include a broker, for
`ReplicaManager.apply_metadata`. Both are pure reads of an image.

A topic's view (one `Assignment` per partition) is built once per image and
shared: every produce and fetch request asks for it, and rebuilding it cost
O(partitions of the topic) per request (a 2,000-partition topic: thousands of
objects for each request). Views are read-only mappings for that reason.

`hosted_partitions` is incremental for the same reason: the broker calls it
on every metadata commit, and a commit usually changes a few partitions (an
ISR change, one leader move). It reuses, from its previous answer for the
same broker, the entries of every topic whose `TopicImage` object and config
are unchanged (replay shares unchanged topics and partition states between
images), and within a changed topic the entries of unchanged partition
states. The `PartitionMeta` objects are then the very objects of the previous
answer, which is what lets `ReplicaManager.apply_metadata` skip them with an
identity check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import PartitionMeta
from lograft.errors import InvalidRequestError, UnknownTopicOrPartitionError
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.image import MetadataImage, PartitionState, TopicImage
from lograft.quorum.records import ConfigResourceType

HTTP_LISTENER = "http"


# Kafka's partition numbers are int32.
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str
    partitions: Mapping[int, Assignment]
    config: Mapping[str, Any] = field(default_factory=dict)


def partition_of(view: TopicView, partition: int) -> TopicPartition:
    """Partition `partition` of `view`, refused as a raw produce's URL would
    refuse it: past Kafka's int32, INVALID_REQUEST; a number the topic lacks,
    UNKNOWN_TOPIC_OR_PARTITION (it may exist once partitions are added)."""
    if not 0 <= partition <= _INT32_MAX:
        raise InvalidRequestError(
            f"partition={partition}: must be an integer (ASCII digits only) from 0 to {_INT32_MAX}",
            field="partition",
            minimum=0,
            maximum=_INT32_MAX,
        )
    if partition not in view.partitions:
        raise UnknownTopicOrPartitionError(
            f"topic {view.name!r} has no partition {partition}; it has "
            f"{len(view.partitions)} (0..{len(view.partitions) - 1})",
            topic=view.name,
            partition=partition,
        )
    return TopicPartition(view.name, partition)


def assignment_of(p: PartitionState) -> Assignment:
    return Assignment(p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch)


class _TopicViews:
    """Topic views of the last `IMAGES_MAX` images asked about, by image identity."""

    IMAGES_MAX = 2  # the newest image and the one the replica manager applied

    def __init__(self) -> None:
        self._by_image: list[tuple[MetadataImage, dict[str, TopicView]]] = []

    def get(self, image: MetadataImage, topic: str, build: Callable[[], TopicView]) -> TopicView:
        # The newest image first, without a generator: every data request asks.
        by_image = self._by_image
        if by_image and by_image[0][0] is image:
            views: dict[str, TopicView] | None = by_image[0][1]
        else:
            views = next((v for img, v in by_image if img is image), None)
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


@dataclass(slots=True)
class _HostedTopic:
    """One topic's part of a `hosted_partitions` answer, and what it was built from."""

    topic: TopicImage
    config: dict[str, Any]
    # Per partition index: (the state it was built from, its meta or None when
    # the partition has no replica on the broker).
    entries: list[tuple[PartitionState, PartitionMeta | None]]
    hosted: dict[TopicPartition, PartitionMeta]


class _HostedCache:
    """The last answer per broker id, by topic id (a process hosts one broker;
    tests build several)."""

    BROKERS_MAX = 8

    def __init__(self) -> None:
        self._by_broker: dict[int, dict[str, _HostedTopic]] = {}

    def answer(self, image: MetadataImage, broker_id: int) -> dict[TopicPartition, PartitionMeta]:
        previous = self._by_broker.get(broker_id, {})
        current: dict[str, _HostedTopic] = {}
        out: dict[TopicPartition, PartitionMeta] = {}
        for name, topic_id in image.topic_ids.items():
            topic = image.topics[topic_id]
            config = dict(image.config(ConfigResourceType.TOPIC, name))
            hosted = _topic_hosted(topic, config, previous.get(topic_id), broker_id)
            current[topic_id] = hosted
            out.update(hosted.hosted)
        if broker_id not in self._by_broker and len(self._by_broker) >= self.BROKERS_MAX:
            self._by_broker.pop(next(iter(self._by_broker)))
        self._by_broker[broker_id] = current
        return out


def _topic_hosted(
    topic: TopicImage, config: dict[str, Any], before: _HostedTopic | None, broker_id: int
) -> _HostedTopic:
    if before is not None and before.config != config:
        before = None  # every partition's meta carries the config
    if before is not None and before.topic is topic:
        return before
    old: list[tuple[PartitionState, PartitionMeta | None]] = []
    if before is not None:
        old, config = before.entries, before.config  # an equal config: share the one dict
    entries: list[tuple[PartitionState, PartitionMeta | None]] = []
    hosted: dict[TopicPartition, PartitionMeta] = {}
    for p in topic.partitions:
        if p.partition < len(old) and old[p.partition][0] is p:
            meta = old[p.partition][1]
        elif broker_id in p.replicas:
            meta = PartitionMeta(topic.topic_id, assignment_of(p), config)
        else:
            meta = None
        entries.append((p, meta))
        if meta is not None:
            hosted[TopicPartition(topic.name, p.partition)] = meta
    return _HostedTopic(topic, config, entries, hosted)


_hosted = _HostedCache()


def hosted_partitions(image: MetadataImage, broker_id: int) -> dict[TopicPartition, PartitionMeta]:
    """Every partition with a replica on `broker_id`, with its topic config.

    Entries unchanged since the previous call for this broker are the same
    objects as in that answer (see the module docstring)."""
    return _hosted.answer(image, broker_id)

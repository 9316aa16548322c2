"""Topic handlers: create, delete, add partitions; and Kafka's topic-name rules.

Names: 1 to 249 characters from [a-zA-Z0-9._-], not "." or "..". As Kafka,
a name may not collide with an existing one once '.' and '_' are treated as
equal (metric names replace one by the other).

A new partition starts with its replicas as the ISR and its preferred replica
as leader, epochs 0: placement only uses usable brokers, so all are eligible.
Topic ids are minted by the caller (a UUID4) so that these functions stay pure.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lograft.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from lograft.quorum.configs import validate_config_entries
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.image import MetadataImage, TopicImage
from lograft.quorum.internal_topics import check_create_partitions, check_delete_topic
from lograft.quorum.placement import broker_loads, place_replicas
from lograft.quorum.records import (
    Config,
    ConfigResourceType,
    Partition,
    Record,
    RemoveTopic,
    Topic,
)
from lograft.quorum.result import ControllerResult

TOPIC_NAME_LENGTH_MAX = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    if not name or len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(
            f"topic name must have 1 to {TOPIC_NAME_LENGTH_MAX} characters", topic=name
        )
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}", topic=name)
    if not _LEGAL_NAME.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters outside [a-zA-Z0-9._-]", topic=name
        )


def _check_collision(image: MetadataImage, name: str) -> None:
    if name in image.topic_ids:
        raise TopicAlreadyExistsError(f"topic {name!r} already exists", topic=name)
    folded = name.replace(".", "_")
    for existing in image.topic_ids:
        if existing.replace(".", "_") == folded:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {existing!r}", topic=name
            )


def _usable_racks(image: MetadataImage) -> dict[int, str | None]:
    return {b.broker_id: b.rack for b in image.brokers.values() if b.usable}


def _new_partitions(
    image: MetadataImage, topic_id: str, first: int, count: int, replication_factor: int
) -> list[Partition]:
    racks = _usable_racks(image)
    loads = broker_loads(image, sorted(racks))
    placements = place_replicas(racks, loads, count, replication_factor)
    return [
        Partition(topic_id, first + i, replicas, replicas, replicas[0], 0, 0)
        for i, replicas in enumerate(placements)
    ]


def _check_counts(
    image: MetadataImage, partitions: int, replication_factor: int, config: ControllerConfig
) -> None:
    if not 1 <= partitions <= config.partitions_per_topic_max:
        raise InvalidPartitionsError(
            f"partitions must be within 1..{config.partitions_per_topic_max}, got {partitions}",
            partitions=partitions,
        )
    usable = len(image.usable_broker_ids())
    if not 1 <= replication_factor <= usable:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} must be within 1..{usable} (usable brokers)",
            replication_factor=replication_factor,
            usable_brokers=usable,
        )


def _check_topic_id(image: MetadataImage, topic_id: str) -> None:
    try:
        canonical = str(uuid.UUID(topic_id))
    except ValueError:
        canonical = None
    if canonical != topic_id or topic_id in image.topics:
        raise InvalidRequestError(f"topic id {topic_id!r} is not a fresh canonical UUID")


def _no_configs() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=_no_configs)


@dataclass(frozen=True, slots=True)
class CreateTopicResponse:
    name: str
    topic_id: str
    assignments: tuple[tuple[int, ...], ...]  # replicas of partition i, preferred first


def create_topic(
    image: MetadataImage, request: CreateTopicRequest, topic_id: str, config: ControllerConfig
) -> ControllerResult[CreateTopicResponse]:
    validate_topic_name(request.name)
    _check_collision(image, request.name)
    _check_counts(image, request.partitions, request.replication_factor, config)
    validate_config_entries(request.configs, config)
    _check_topic_id(image, topic_id)
    parts = _new_partitions(image, topic_id, 0, request.partitions, request.replication_factor)
    configs = [
        Config(ConfigResourceType.TOPIC, request.name, key, value)
        for key, value in sorted(request.configs.items())
    ]
    records: tuple[Record, ...] = (Topic(request.name, topic_id), *parts, *configs)
    assignments = tuple(p.replicas for p in parts)
    return ControllerResult(records, CreateTopicResponse(request.name, topic_id, assignments))


def _existing(image: MetadataImage, name: str) -> TopicImage:
    topic = image.topic(name)
    if topic is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {name!r}", topic=name)
    return topic


def delete_topic(image: MetadataImage, name: str) -> ControllerResult[str]:
    """Remove a topic (its partitions and configs go with it). Response: its id."""
    topic = _existing(image, name)
    check_delete_topic(name)
    return ControllerResult((RemoveTopic(topic.topic_id),), topic.topic_id)


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    name: str
    # Replica lists of the new partitions only, numbered from the old count.
    new_assignments: tuple[tuple[int, ...], ...]


def create_partitions(
    image: MetadataImage, name: str, total_partitions: int, config: ControllerConfig
) -> ControllerResult[CreatePartitionsResponse]:
    """Grow a topic to `total_partitions`, with its existing replication factor."""
    topic = _existing(image, name)
    check_create_partitions(name)
    current = len(topic.partitions)
    if total_partitions <= current:
        raise InvalidPartitionsError(
            f"topic {name!r} has {current} partitions; the new count must be larger",
            partitions=total_partitions,
        )
    replication_factor = len(topic.partitions[0].replicas)
    _check_counts(image, total_partitions, replication_factor, config)
    parts = _new_partitions(
        image, topic.topic_id, current, total_partitions - current, replication_factor
    )
    response = CreatePartitionsResponse(name, tuple(p.replicas for p in parts))
    return ControllerResult(tuple(parts), response)

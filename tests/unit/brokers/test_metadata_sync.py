"""ImageView: topic views are built once per image and shared by every request."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from lograft.brokers.metadata_sync import ImageView, hosted_partitions
from lograft.brokers.partition import Assignment
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.image import MetadataImage, PartitionState, TopicImage
from lograft.quorum.records import ConfigResourceType


def _image(partitions: int, leader: int = 1, offset: int = 10) -> MetadataImage:
    parts = tuple(
        PartitionState("id-1", p, (1, 2, 3), (1, 2, 3), leader, 0, 0) for p in range(partitions)
    )
    return MetadataImage(
        offset=offset,
        topics=MappingProxyType({"id-1": TopicImage("wide", "id-1", parts)}),
        topic_ids=MappingProxyType({"wide": "id-1"}),
        configs=MappingProxyType(
            {(ConfigResourceType.TOPIC, "wide"): MappingProxyType({"retention_ms": "1000"})}
        ),
    )


def test_a_topic_view_is_built_once_per_image():
    image = _image(2000)
    first = ImageView(image).topic("wide")
    assert first is not None
    assert len(first.partitions) == 2000
    assert first.partitions[1999] == Assignment((1, 2, 3), (1, 2, 3), 1, 0, 0)
    assert dict(first.config) == {"retention_ms": "1000"}
    # Every request makes its own ImageView of the same image: same view object.
    assert ImageView(image).topic("wide") is first
    assert ImageView(image).topics() == [first]
    assert ImageView(image).topic("nope") is None


def test_a_new_image_gets_a_new_view():
    old = _image(3, leader=1)
    old_view = ImageView(old).topic("wide")
    new = _image(3, leader=2, offset=11)
    new_view = ImageView(new).topic("wide")
    assert new_view is not old_view
    assert new_view is not None and new_view.partitions[0].leader == 2
    # The previous image is still served (the replica manager's applied image
    # may lag the newest), and still from its own view.
    assert ImageView(old).topic("wide") is old_view


def test_shared_views_are_read_only():
    view = ImageView(_image(2)).topic("wide")
    assert view is not None
    with pytest.raises(TypeError):
        view.partitions[5] = Assignment((1,), (1,), 1, 0, 0)  # type: ignore[index]
    with pytest.raises(TypeError):
        view.config["x"] = "y"  # type: ignore[index]


def test_hosted_partitions_lists_the_brokers_replicas():
    image = _image(2)
    image = replace(
        image,
        topics=MappingProxyType(
            {
                "id-1": TopicImage(
                    "wide",
                    "id-1",
                    (
                        PartitionState("id-1", 0, (1, 2), (1, 2), 1, 0, 0),
                        PartitionState("id-1", 1, (2, 3), (2, 3), 2, 0, 0),
                    ),
                )
            }
        ),
    )
    hosted = hosted_partitions(image, 1)
    assert list(hosted) == [TopicPartition("wide", 0)]
    assert hosted[TopicPartition("wide", 0)].topic_config == {"retention_ms": "1000"}

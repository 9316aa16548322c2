"""Batched AlterPartition: one request from one leader changes many partitions'
ISRs, each item checked on its own, every accepted change in one record batch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lograft.errors import (
    InvalidRequestError,
    InvalidUpdateVersionError,
    IsrWithoutLeaderError,
    StaleBrokerEpochError,
)
from lograft.quorum.alter_partition import (
    ALTER_PARTITION_ITEMS_MAX,
    AlterPartitionItem,
    AlterPartitionResponse,
    AlterPartitionsRequest,
    alter_partitions,
)
from lograft.quorum.image import PartitionState
from lograft.quorum.records import PartitionChange

from .metadata_cluster import Cluster, cluster_of


def led_by(cluster: Cluster, topic_id: str, leader: int, count: int) -> list[PartitionState]:
    topic = cluster.image.topics[topic_id]
    return [p for p in topic.partitions if p.leader == leader][:count]


def shrink(p: PartitionState) -> AlterPartitionItem:
    """Drop the last follower from the ISR."""
    isr = tuple(b for b in p.isr if b != p.replicas[-1] or b == p.leader)
    return AlterPartitionItem(p.topic_id, p.partition, p.leader_epoch, p.partition_epoch, isr)


def setup(count: int = 4) -> tuple[Cluster, str, int, list[PartitionState]]:
    cluster = cluster_of(range(3))
    topic_id = cluster.create("wide", 12, 3)
    leader = cluster.partition(topic_id, 0).leader
    parts = led_by(cluster, topic_id, leader, count)
    assert len(parts) == count
    return cluster, topic_id, leader, parts


def test_every_change_commits_in_one_batch():
    cluster, topic_id, leader, parts = setup()
    request = AlterPartitionsRequest(
        leader, cluster.epochs[leader], tuple(shrink(p) for p in parts)
    )
    result = alter_partitions(cluster.image, request)
    assert result.records == tuple(
        PartitionChange(topic_id, p.partition, isr=shrink(p).new_isr) for p in parts
    )
    offset_before = cluster.image.offset
    answers = cluster.apply(result)
    assert cluster.image.offset == offset_before + 1  # one batch, one metadata commit
    for p, answer in zip(parts, answers, strict=True):
        after = cluster.partition(topic_id, p.partition)
        assert after.isr == shrink(p).new_isr
        assert answer == AlterPartitionResponse(
            after.leader, after.leader_epoch, after.partition_epoch, after.isr
        )
        assert after.partition_epoch == p.partition_epoch + 1


def test_a_refused_item_does_not_stop_the_others():
    cluster, topic_id, leader, parts = setup(3)
    good, stale, headless = (shrink(p) for p in parts)
    items = (
        good,
        replace(stale, partition_epoch=stale.partition_epoch + 5),
        replace(headless, new_isr=tuple(b for b in headless.new_isr if b != leader)),
    )
    request = AlterPartitionsRequest(leader, cluster.epochs[leader], items)
    result = alter_partitions(cluster.image, request)
    assert result.records == (PartitionChange(topic_id, good.partition, isr=good.new_isr),)
    ok, refused_version, refused_headless = result.response
    assert isinstance(ok, AlterPartitionResponse)
    assert isinstance(refused_version, InvalidUpdateVersionError)
    assert isinstance(refused_headless, IsrWithoutLeaderError)
    cluster.apply(result)
    assert cluster.partition(topic_id, parts[1].partition) == parts[1]
    assert cluster.partition(topic_id, parts[2].partition) == parts[2]


def test_a_partition_named_twice_is_refused_the_second_time():
    cluster, _topic_id, leader, parts = setup(1)
    item = shrink(parts[0])
    result = alter_partitions(
        cluster.image, AlterPartitionsRequest(leader, cluster.epochs[leader], (item, item))
    )
    assert len(result.records) == 1
    assert isinstance(result.response[0], AlterPartitionResponse)
    assert isinstance(result.response[1], InvalidRequestError)


def test_a_stale_broker_epoch_refuses_the_whole_request():
    cluster, _topic_id, leader, parts = setup(2)
    request = AlterPartitionsRequest(
        leader, cluster.epochs[leader] - 1, tuple(shrink(p) for p in parts)
    )
    with pytest.raises(StaleBrokerEpochError):
        alter_partitions(cluster.image, request)


def test_too_many_items_are_refused_before_any_is_decided():
    cluster, _topic_id, leader, parts = setup(1)
    items = (shrink(parts[0]),) * (ALTER_PARTITION_ITEMS_MAX + 1)
    with pytest.raises(InvalidRequestError):
        alter_partitions(
            cluster.image, AlterPartitionsRequest(leader, cluster.epochs[leader], items)
        )

from __future__ import annotations

import uuid

import pytest

from lograft.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from lograft.quorum.records import ConfigResourceType, Partition, Topic
from lograft.quorum.topics import (
    TOPIC_NAME_LENGTH_MAX,
    CreateTopicRequest,
    create_partitions,
    create_topic,
    delete_topic,
    validate_topic_name,
)

from .metadata_cluster import cluster_of


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "x" * TOPIC_NAME_LENGTH_MAX, "...", "_", "-.-"])
def test_legal_topic_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "x" * (TOPIC_NAME_LENGTH_MAX + 1), "a b", "a/b", "é", "a\n", "a:b"]
)
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_create_topic_records_and_response():
    cluster = cluster_of(range(3))
    topic_id = str(uuid.uuid4())
    request = CreateTopicRequest("orders", 4, 2, {"retention_ms": "1000"})
    result = create_topic(cluster.image, request, topic_id, cluster.config)
    topic, *parts, config = result.records
    assert topic == Topic("orders", topic_id)
    assert [type(p) for p in parts] == [Partition] * 4
    for p, replicas in zip(parts, result.response.assignments, strict=True):
        # New partitions: all replicas in sync, preferred replica leads, epochs 0.
        assert p.replicas == p.isr == replicas and p.leader == replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert (config.resource_type, config.key, config.value) == (
        ConfigResourceType.TOPIC,
        "retention_ms",
        "1000",
    )
    cluster.apply(result)
    assert cluster.image.topic("orders").topic_id == topic_id
    assert dict(cluster.image.config(ConfigResourceType.TOPIC, "orders")) == {
        "retention_ms": "1000"
    }


def test_create_topic_validation():
    cluster = cluster_of(range(3), partitions_per_topic_max=10)
    cluster.create("taken.name", 1, 1)

    def create(name="t", partitions=1, rf=1, topic_id=None, **configs):
        request = CreateTopicRequest(name, partitions, rf, configs)
        topic_id = topic_id or str(uuid.uuid4())
        return create_topic(cluster.image, request, topic_id, cluster.config)

    with pytest.raises(TopicAlreadyExistsError):
        create("taken.name")
    with pytest.raises(InvalidTopicError, match="collides"):
        create("taken_name")
    with pytest.raises(InvalidTopicError):
        create("bad name")
    for partitions in (0, -1, 11):
        with pytest.raises(InvalidPartitionsError):
            create(partitions=partitions)
    for rf in (0, 4):
        with pytest.raises(InvalidReplicationFactorError):
            create(rf=rf)
    existing_id = cluster.image.topic("taken.name").topic_id
    for topic_id in ("not-a-uuid", existing_id, str(uuid.uuid4()).upper()):
        with pytest.raises(InvalidRequestError):
            create(topic_id=topic_id)
    with pytest.raises(InvalidConfigError):
        create(**{"bad key": "v"})
    with pytest.raises(InvalidConfigError):
        create(unclean_leader_election="yes")
    assert create(partitions=10, rf=3).records


def test_replication_factor_counts_only_usable_brokers():
    cluster = cluster_of(range(3))
    cluster.now_ms = cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(0)
    assert set(cluster.fence_tick()) == {1, 2}
    with pytest.raises(InvalidReplicationFactorError):
        cluster.create("t", 1, 2)
    cluster.create("t", 3, 1)


def test_no_usable_brokers_means_no_topic():
    cluster = cluster_of([])
    with pytest.raises(InvalidReplicationFactorError):
        cluster.create("t", 1, 1)


def test_delete_topic():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 3, 2, retention_ms="5")
    assert cluster.apply(delete_topic(cluster.image, "t")) == topic_id
    assert cluster.image.topic("t") is None
    assert dict(cluster.image.config(ConfigResourceType.TOPIC, "t")) == {}
    with pytest.raises(UnknownTopicOrPartitionError):
        delete_topic(cluster.image, "t")


def test_create_partitions():
    cluster = cluster_of(range(4))
    topic_id = cluster.create("t", 2, 3)
    before = cluster.image.topics[topic_id].partitions
    response = cluster.apply(create_partitions(cluster.image, "t", 6, cluster.config))
    after = cluster.image.topics[topic_id].partitions
    assert len(after) == 6 and after[:2] == before
    assert tuple(p.replicas for p in after[2:]) == response.new_assignments
    assert all(len(p.replicas) == 3 for p in after[2:])
    for total in (6, 5):
        with pytest.raises(InvalidPartitionsError):
            create_partitions(cluster.image, "t", total, cluster.config)
    with pytest.raises(UnknownTopicOrPartitionError):
        create_partitions(cluster.image, "nope", 9, cluster.config)


def test_two_thousand_partitions():
    cluster = cluster_of(range(5))
    cluster.create("big", 2000, 3)
    assert len(cluster.image.topic("big").partitions) == 2000
    # Fencing a broker touches hundreds of partitions in one batch.
    cluster.now_ms = cluster.config.broker_session_timeout_ms + 1
    for b in range(4):
        cluster.heartbeat(b)
    assert cluster.fence_tick() == (4,)
    parts = cluster.image.topic("big").partitions
    assert not any(4 in p.isr or p.leader == 4 for p in parts)
    assert all(p.leader in p.isr for p in parts)

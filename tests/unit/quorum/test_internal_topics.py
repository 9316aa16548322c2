"""The controller refuses to delete `__consumer_offsets`, to add partitions to it
and to make it anything but compacted; the same changes to any other topic pass."""

from __future__ import annotations

import pytest

from lograft.brokers.groups.placement import CONSUMER_OFFSETS_TOPIC as BROKERS_NAME
from lograft.errors import InternalTopicProtectedError
from lograft.quorum.configs import AlterConfigRequest, alter_config
from lograft.quorum.internal_topics import CONSUMER_OFFSETS_TOPIC, check_topic_config_changes
from lograft.quorum.records import ConfigResourceType
from lograft.quorum.topics import create_partitions, delete_topic

from .metadata_cluster import cluster_of

OFFSETS = CONSUMER_OFFSETS_TOPIC


def test_the_quorum_and_the_coordinator_name_the_same_topic():
    assert CONSUMER_OFFSETS_TOPIC == BROKERS_NAME


def _cluster_with_offsets_topic():
    cluster = cluster_of(range(3))
    cluster.create(OFFSETS, 4, 3, cleanup_policy="compact")
    cluster.create("orders", 4, 3, cleanup_policy="compact")
    return cluster


def test_deleting_the_offsets_topic_is_refused():
    cluster = _cluster_with_offsets_topic()
    with pytest.raises(InternalTopicProtectedError) as exc:
        delete_topic(cluster.image, OFFSETS)
    assert exc.value.details == {"topic": OFFSETS, "operation": "delete_topic"}
    cluster.apply(delete_topic(cluster.image, "orders"))
    assert cluster.image.topic("orders") is None


def test_adding_partitions_to_the_offsets_topic_is_refused_with_the_reason():
    cluster = _cluster_with_offsets_topic()
    with pytest.raises(InternalTopicProtectedError) as exc:
        create_partitions(cluster.image, OFFSETS, 8, cluster.config)
    assert "coordinator" in exc.value.message
    assert exc.value.details["operation"] == "create_partitions"
    cluster.apply(create_partitions(cluster.image, "orders", 8, cluster.config))
    assert len(cluster.image.topic("orders").partitions) == 8


@pytest.mark.parametrize("value", ["delete", "compact,delete", None])
def test_the_offsets_topic_stays_compacted_only(value):
    cluster = _cluster_with_offsets_topic()
    request = AlterConfigRequest(ConfigResourceType.TOPIC, OFFSETS, "cleanup_policy", value)
    with pytest.raises(InternalTopicProtectedError) as exc:
        alter_config(cluster.image, request, cluster.config)
    assert exc.value.details["value"] == value
    other = AlterConfigRequest(ConfigResourceType.TOPIC, "orders", "cleanup_policy", value)
    cluster.apply(alter_config(cluster.image, other, cluster.config))
    assert cluster.image.config(ConfigResourceType.TOPIC, "orders").get("cleanup_policy") == value


def test_other_configs_of_the_offsets_topic_may_change():
    cluster = _cluster_with_offsets_topic()
    for key, value in (("cleanup_policy", "compact"), ("retention_ms", "1000")):
        request = AlterConfigRequest(ConfigResourceType.TOPIC, OFFSETS, key, value)
        cluster.apply(alter_config(cluster.image, request, cluster.config))
    assert dict(cluster.image.config(ConfigResourceType.TOPIC, OFFSETS)) == {
        "cleanup_policy": "compact",
        "retention_ms": "1000",
    }


def test_a_request_with_a_refused_key_is_refused_whole():
    # The controller RPC commits key by key; this check runs first on the whole set.
    with pytest.raises(InternalTopicProtectedError):
        check_topic_config_changes(OFFSETS, {"retention_ms": "1", "cleanup_policy": "delete"})
    check_topic_config_changes("orders", {"cleanup_policy": "delete"})

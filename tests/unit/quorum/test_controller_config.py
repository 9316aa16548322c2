from __future__ import annotations

import pytest

from lograft.errors import InvalidConfigError, UnknownTopicOrPartitionError
from lograft.quorum.configs import AlterConfigRequest, alter_config, effective_topic_config
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.records import ConfigResourceType
from lograft.typed import build

from .metadata_cluster import cluster_of

TOPIC = ConfigResourceType.TOPIC
CLUSTER = ConfigResourceType.CLUSTER
LAN_FAILOVER_BUDGET_MS = 2_000


def test_defaults_replace_a_dead_leader_in_about_two_seconds_without_flapping():
    config = ControllerConfig()
    # Worst-case detection: a full session plus one fence-check period.
    detection_ms = config.broker_session_timeout_ms + config.fence_check_interval_ms
    assert detection_ms < LAN_FAILOVER_BUDGET_MS
    # At least three heartbeats per session: one lost heartbeat never fences.
    assert config.broker_session_timeout_ms >= 3 * config.broker_heartbeat_interval_ms


@pytest.mark.parametrize(
    "changes",
    [
        {"broker_heartbeat_interval_ms": 0},
        {"broker_session_timeout_ms": 999, "broker_heartbeat_interval_ms": 500},
        {"leader_imbalance_ratio_max": 1.5},
        {"producer_id_block_size": -1},
        {"partitions_per_topic_max": 1.5},
    ],
)
def test_bad_limits_are_refused_naming_the_key(changes):
    with pytest.raises(InvalidConfigError) as raised:
        build(changes, ControllerConfig, error=InvalidConfigError, detail="key")
    assert raised.value.details["key"] in changes
    assert raised.value.details["key"] in raised.value.message


def test_topic_config_falls_back_to_the_cluster():
    cluster = cluster_of([1])
    cluster.create("t", 1, 1)
    assert effective_topic_config(cluster.image, "t", "retention_ms") is None
    for kind, name, value in [
        (ConfigResourceType.CLUSTER, "", "100"),
        (ConfigResourceType.TOPIC, "t", "5"),
    ]:
        request = AlterConfigRequest(kind, name, "retention_ms", value)
        cluster.apply(alter_config(cluster.image, request, cluster.config))
    assert effective_topic_config(cluster.image, "t", "retention_ms") == "5"
    delete = AlterConfigRequest(ConfigResourceType.TOPIC, "t", "retention_ms", None)
    cluster.apply(alter_config(cluster.image, delete, cluster.config))
    assert effective_topic_config(cluster.image, "t", "retention_ms") == "100"


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (AlterConfigRequest(TOPIC, "missing", "k", "v"), UnknownTopicOrPartitionError),
        (AlterConfigRequest(CLUSTER, "x", "k", "v"), InvalidConfigError),
        (AlterConfigRequest(TOPIC, "t", "bad key", "v"), InvalidConfigError),
        (AlterConfigRequest(TOPIC, "t", "k" * 256, "v"), InvalidConfigError),
        (AlterConfigRequest(TOPIC, "t", "unclean_leader_election", "1"), InvalidConfigError),
        (AlterConfigRequest(TOPIC, "t", "k", "x" * 5000), InvalidConfigError),
    ],
)
def test_alter_config_validation(request_, error):
    cluster = cluster_of([1])
    cluster.create("t", 1, 1)
    with pytest.raises(error):
        alter_config(cluster.image, request_, cluster.config)

from __future__ import annotations

from collections import Counter

from lograft.quorum.alter_partition import AlterPartitionRequest, alter_partition
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.leader_balance import (
    BalanceSchedule,
    balance_preferred_leaders,
    imbalance_ratios,
)

from .metadata_cluster import Cluster, cluster_of


def bounce(cluster: Cluster, broker_id: int) -> None:
    """Fence `broker_id` by a missed session, then let it catch up and return."""
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    for b in cluster.image.usable_broker_ids():
        if b != broker_id:
            cluster.heartbeat(b)
    assert cluster.fence_tick() == (broker_id,)
    assert not cluster.heartbeat(broker_id).fenced


def rejoin_isrs(cluster: Cluster, broker_id: int) -> None:
    """What the leaders do once the follower has caught up: put it back in the ISR."""
    for p in list(cluster.image.all_partitions()):
        if broker_id in p.replicas and broker_id not in p.isr:
            request = AlterPartitionRequest(
                p.leader,
                cluster.epochs[p.leader],
                p.topic_id,
                p.partition,
                p.leader_epoch,
                p.partition_epoch,
                (*p.isr, broker_id),
            )
            cluster.apply(alter_partition(cluster.image, request))


def test_leadership_returns_to_the_preferred_replica():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 9, 3)
    bounce(cluster, 0)
    assert imbalance_ratios(cluster.image)[0] == 1.0
    # Back but not yet in sync: nothing may move to it.
    assert balance_preferred_leaders(cluster.image, cluster.config).records == ()
    rejoin_isrs(cluster, 0)
    moved = cluster.apply(balance_preferred_leaders(cluster.image, cluster.config))
    preferred_by_0 = {
        (topic_id, p.partition)
        for p in cluster.image.topics[topic_id].partitions
        if p.preferred_leader == 0
    }
    assert set(moved) == preferred_by_0
    assert all(p.leader == p.preferred_leader for p in cluster.image.all_partitions())
    assert max(imbalance_ratios(cluster.image).values()) == 0.0
    leaders = Counter(p.leader for p in cluster.image.all_partitions())
    assert set(leaders.values()) == {3}


def test_imbalance_at_or_below_the_threshold_is_left_alone():
    cluster = cluster_of(range(3), leader_imbalance_ratio_max=0.5)
    cluster.create("t", 6, 3)
    bounce(cluster, 0)
    rejoin_isrs(cluster, 0)
    # Give broker 0 back exactly half of its preferred partitions by hand.
    moved_all = balance_preferred_leaders(cluster.image, ControllerConfig())
    preferred_by_0 = len(moved_all.records)
    assert preferred_by_0 == 2
    half = moved_all.records[: preferred_by_0 // 2]
    cluster.image = cluster.image.apply_batch(cluster.image.offset + 1, half)
    assert imbalance_ratios(cluster.image)[0] == 0.5
    assert balance_preferred_leaders(cluster.image, cluster.config).records == ()


def test_moves_per_round_are_bounded():
    cluster = cluster_of(
        range(2), preferred_elections_per_round_max=3, leader_imbalance_ratio_max=0.0
    )
    cluster.create("t", 20, 2)
    bounce(cluster, 0)
    rejoin_isrs(cluster, 0)
    rounds = 0
    while (result := balance_preferred_leaders(cluster.image, cluster.config)).records:
        assert len(result.records) <= 3
        cluster.apply(result)
        rounds += 1
    assert rounds == 4  # 10 partitions prefer broker 0: 3 + 3 + 3 + 1
    assert all(p.leader == p.preferred_leader for p in cluster.image.all_partitions())


def test_a_rejoined_broker_gets_its_leaderships_back_without_the_periodic_check():
    """The schedule the controller runtime keeps: after the periodic check, a
    broker bounced and back in its ISRs changes the image, and the check runs
    again one minimum interval after the last one, not a whole period later;
    once its moves are applied, one more check finds nothing and then only
    the periodic one is due."""
    config = ControllerConfig(
        leader_imbalance_check_interval_ms=30_000, leader_balance_min_interval_ms=5_000
    )
    cluster = cluster_of(range(3))
    cluster.create("t", 9, 3)
    schedule = BalanceSchedule()
    now = 1_000_000
    assert schedule.due(now, cluster.image.offset, config)  # the first check: at once
    schedule.checked(now, cluster.image.offset, config)
    assert balance_preferred_leaders(cluster.image, config).records == ()
    bounce(cluster, 0)
    rejoin_isrs(cluster, 0)
    # Changed, but within the minimum interval of the last check.
    assert not schedule.due(now + 4_999, cluster.image.offset, config)
    assert schedule.due(now + 5_000, cluster.image.offset, config)
    now += 5_000
    schedule.checked(now, cluster.image.offset, config)
    moved = cluster.apply(balance_preferred_leaders(cluster.image, config))
    assert len(moved) == 3
    assert all(p.leader == p.preferred_leader for p in cluster.image.all_partitions())
    # Its own moves changed the image: one more check, which moves nothing...
    assert schedule.due(now + 5_000, cluster.image.offset, config)
    now += 5_000
    schedule.checked(now, cluster.image.offset, config)
    assert balance_preferred_leaders(cluster.image, config).records == ()
    # ... and an unchanged image waits for the periodic check.
    assert not schedule.due(now + 29_999, cluster.image.offset, config)
    assert schedule.due(now + 30_000, cluster.image.offset, config)


def test_a_broker_that_keeps_bouncing_moves_leaderships_at_most_once_per_minimum_interval():
    config = ControllerConfig(
        leader_imbalance_check_interval_ms=30_000, leader_balance_min_interval_ms=5_000
    )
    schedule = BalanceSchedule()
    checks = []
    # the runtime's duty tick; the image changes at each
    for offset, now in enumerate(range(0, 20_000, 50), start=1):
        if schedule.due(now, offset, config):
            schedule.checked(now, offset, config)
            checks.append(now)
    assert checks == [0, 5_000, 10_000, 15_000]

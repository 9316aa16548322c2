from __future__ import annotations

import pytest

from lograft.quorum.configs import AlterConfigRequest, alter_config
from lograft.quorum.election import (
    Election,
    changes_without_brokers,
    elect_leader,
    isr_without,
    preferred_leader_change,
)
from lograft.quorum.image import NO_LEADER, PartitionState
from lograft.quorum.records import ConfigResourceType, PartitionChange

from .metadata_cluster import Cluster, cluster_of


@pytest.mark.parametrize(
    ("replicas", "isr", "usable", "unclean", "expected"),
    [
        # First replica in preferred order that is in the ISR and usable.
        ((1, 2, 3), (1, 2, 3), {1, 2, 3}, False, Election(1, (1, 2, 3))),
        ((1, 2, 3), (2, 3), {1, 2, 3}, False, Election(2, (2, 3))),
        ((1, 2, 3), (1, 2, 3), {3, 2}, False, Election(2, (1, 2, 3))),
        ((3, 1, 2), (1, 2), {1, 2}, False, Election(1, (1, 2))),
        # Nobody in the ISR is usable: offline, the ISR is kept.
        ((1, 2, 3), (1,), {2, 3}, False, Election(NO_LEADER, (1,))),
        # ... unless the topic allows an unclean election: the one usable
        # replica leads at once; several wait for their log ends.
        ((1, 2, 3), (1,), {3}, True, Election(3, (3,), unclean=True)),
        ((1, 2, 3), (1,), {3, 2}, True, Election(NO_LEADER, (1,))),
        # Unclean is only a fallback: a clean candidate still wins.
        ((1, 2, 3), (3,), {2, 3}, True, Election(3, (3,))),
        ((1, 2), (1,), set(), True, Election(NO_LEADER, (1,))),
    ],
)
def test_elect_leader(replicas, isr, usable, unclean, expected):
    assert elect_leader(replicas, isr, usable, unclean) == expected


def test_isr_without_keeps_the_last_members():
    assert isr_without((1, 2, 3), {2}) == (1, 3)
    assert isr_without((1, 2), {1, 2}) == (1, 2)
    assert isr_without((2,), {2}) == (2,)
    assert isr_without((1, 2), {9}) == (1, 2)


def kill(cluster: Cluster, *dead: int) -> tuple[int, ...]:
    """Let `dead` miss their sessions while the others heartbeat; run the fence tick."""
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    for b in cluster.image.usable_broker_ids():
        if b not in dead:
            cluster.heartbeat(b)
    return cluster.fence_tick()


def revive(cluster: Cluster, broker_id: int) -> None:
    assert not cluster.heartbeat(broker_id).fenced


def test_leader_fenced_moves_leadership_to_next_in_sync_replica():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 1, 3)
    p = cluster.partition(topic_id, 0)
    leader, second, third = p.replicas
    assert kill(cluster, leader) == (leader,)
    after = cluster.partition(topic_id, 0)
    assert after.leader == second
    assert after.isr == (second, third)
    assert after.leader_epoch == p.leader_epoch + 1


def test_follower_fenced_only_leaves_the_isr():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 1, 3)
    p = cluster.partition(topic_id, 0)
    kill(cluster, p.replicas[2])
    after = cluster.partition(topic_id, 0)
    assert (after.leader, after.leader_epoch) == (p.leader, p.leader_epoch)
    assert after.isr == p.replicas[:2]
    assert after.partition_epoch == p.partition_epoch + 1


def test_partition_goes_offline_and_returns_with_its_last_isr_member():
    cluster = cluster_of(range(3))
    # min_insync_replicas 1: an ISR of one moves the HW, so no ELR (see the ELR tests).
    topic_id = cluster.create("t", 1, 2, min_insync_replicas="1")
    first, second = cluster.partition(topic_id, 0).replicas
    kill(cluster, second)
    assert cluster.partition(topic_id, 0).isr == (first,)
    kill(cluster, first)
    offline = cluster.partition(topic_id, 0)
    # Offline, and the ISR still names the last member: it has every committed record.
    assert (offline.leader, offline.isr) == (NO_LEADER, (first,))
    # The other replica is not in the ISR: no clean election for it.
    revive(cluster, second)
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    # The last ISR member returns: it leads again, in the same batch as its unfencing.
    revive(cluster, first)
    back = cluster.partition(topic_id, 0)
    assert (back.leader, back.isr) == (first, (first,))
    assert back.leader_epoch == offline.leader_epoch + 1


def test_simultaneous_loss_keeps_the_whole_isr():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 1, 2)
    first, second = cluster.partition(topic_id, 0).replicas
    assert set(kill(cluster, first, second)) == {first, second}
    offline = cluster.partition(topic_id, 0)
    assert (offline.leader, set(offline.isr)) == (NO_LEADER, {first, second})
    # Either one coming back is a clean leader; the one still away leaves the
    # ISR, so that the new leader does not wait for it.
    revive(cluster, second)
    back = cluster.partition(topic_id, 0)
    assert (back.leader, back.isr) == (second, (second,))


def test_unclean_election_only_when_configured():
    for unclean in (False, True):
        cluster = cluster_of(range(2))
        configs = {"unclean_leader_election": "true"} if unclean else {}
        topic_id = cluster.create("t", 1, 2, min_insync_replicas="1", **configs)
        first, second = cluster.partition(topic_id, 0).replicas
        kill(cluster, second)
        kill(cluster, first)
        revive(cluster, second)
        p = cluster.partition(topic_id, 0)
        if unclean:
            assert (p.leader, p.isr) == (second, (second,))
        else:
            assert (p.leader, p.isr) == (NO_LEADER, (first,))


def test_cluster_wide_unclean_default_and_topic_override():
    cluster = cluster_of(range(2))
    cluster.apply(
        alter_config(
            cluster.image,
            AlterConfigRequest(ConfigResourceType.CLUSTER, "", "unclean_leader_election", "true"),
            cluster.config,
        )
    )
    loose = cluster.create("loose", 1, 2, min_insync_replicas="1")
    strict = cluster.create(
        "strict", 1, 2, unclean_leader_election="false", min_insync_replicas="1"
    )
    for b in (0, 1):
        kill(cluster, b)
    # Broker 1 went last, so it is the last ISR member of both; 0 is outside.
    assert cluster.partition(loose, 0).isr == cluster.partition(strict, 0).isr == (1,)
    outsider = 0
    revive(cluster, outsider)
    assert cluster.partition(loose, 0).leader == outsider
    assert cluster.partition(strict, 0).leader == NO_LEADER


def test_enabling_unclean_election_elects_offline_partitions_at_once():
    cluster = cluster_of(range(2))
    topic_id = cluster.create("t", 1, 2, min_insync_replicas="1")
    first, second = cluster.partition(topic_id, 0).replicas
    kill(cluster, second)
    kill(cluster, first)
    revive(cluster, second)
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    request = AlterConfigRequest(ConfigResourceType.TOPIC, "t", "unclean_leader_election", "true")
    result = alter_config(cluster.image, request, cluster.config)
    elected = PartitionChange(topic_id, 0, isr=(second,), leader=second, last_known_leader=-1)
    assert elected in result.records
    cluster.apply(result)
    assert cluster.partition(topic_id, 0).leader == second


def test_changes_carry_only_changed_fields():
    p = PartitionState("t", 0, (1, 2, 3), (1, 2, 3), 1, 4, 9)

    class Image:
        def all_partitions(self):
            return iter([p])

    (follower,) = changes_without_brokers(Image(), {3}, {1, 2}, ())
    assert (follower.isr, follower.leader) == ((1, 2), None)
    (leader,) = changes_without_brokers(Image(), {1}, {2, 3}, ())
    assert (leader.isr, leader.leader) == ((2, 3), 2)
    assert changes_without_brokers(Image(), {7}, {1, 2, 3}, ()) == []


def test_preferred_leader_change():
    p = PartitionState("t", 0, (1, 2, 3), (1, 2, 3), 2, 4, 9)
    assert preferred_leader_change(p, {1, 2, 3}) == PartitionChange("t", 0, leader=1)
    assert preferred_leader_change(p, {2, 3}) is None
    out_of_sync = PartitionState("t", 0, (1, 2, 3), (2, 3), 2, 4, 9)
    assert preferred_leader_change(out_of_sync, {1, 2, 3}) is None
    already = PartitionState("t", 0, (1, 2, 3), (1, 2, 3), 1, 4, 9)
    assert preferred_leader_change(already, {1, 2, 3}) is None

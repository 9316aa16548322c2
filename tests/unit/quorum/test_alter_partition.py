from __future__ import annotations

from dataclasses import replace

import pytest

from lograft.errors import (
    BrokerIdNotRegisteredError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    IsrWithoutLeaderError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from lograft.quorum.alter_partition import AlterPartitionRequest, alter_partition
from lograft.quorum.records import PartitionChange

from .metadata_cluster import Cluster, cluster_of


def setup() -> tuple[Cluster, AlterPartitionRequest]:
    """Four brokers, a partition on three of them; a valid request from its leader."""
    cluster = cluster_of(range(4))
    topic_id = cluster.create("t", 1, 3)
    p = cluster.partition(topic_id, 0)
    request = AlterPartitionRequest(
        broker_id=p.leader,
        broker_epoch=cluster.epochs[p.leader],
        topic_id=topic_id,
        partition=0,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        new_isr=p.replicas[:2],
    )
    return cluster, request


def test_shrink_then_expand():
    cluster, request = setup()
    before = cluster.partition(request.topic_id, 0)
    response = cluster.apply(alter_partition(cluster.image, request))
    after = cluster.partition(request.topic_id, 0)
    assert after.isr == request.new_isr
    assert (response.isr, response.partition_epoch) == (after.isr, before.partition_epoch + 1)
    assert (response.leader, response.leader_epoch) == (before.leader, before.leader_epoch)
    expand = replace(request, partition_epoch=after.partition_epoch, new_isr=before.replicas)
    cluster.apply(alter_partition(cluster.image, expand))
    assert cluster.partition(request.topic_id, 0).isr == before.replicas


def test_isr_is_stored_in_replica_order():
    cluster, request = setup()
    shuffled = replace(request, new_isr=tuple(reversed(request.new_isr)))
    result = alter_partition(cluster.image, shuffled)
    assert result.records == (PartitionChange(request.topic_id, 0, isr=request.new_isr),)


def test_unchanged_isr_appends_nothing():
    cluster, request = setup()
    current = cluster.partition(request.topic_id, 0)
    result = alter_partition(cluster.image, replace(request, new_isr=current.isr))
    assert result.records == ()
    assert result.response.partition_epoch == current.partition_epoch


def test_retry_after_success_is_rejected_as_stale():
    cluster, request = setup()
    cluster.apply(alter_partition(cluster.image, request))
    with pytest.raises(InvalidUpdateVersionError):
        alter_partition(cluster.image, replace(request, new_isr=request.new_isr[:1]))


def mutate(cluster: Cluster, request: AlterPartitionRequest, case: str) -> AlterPartitionRequest:
    p = cluster.partition(request.topic_id, 0)
    follower = p.replicas[1]
    outsider = next(b for b in range(4) if b not in p.replicas)
    return {
        "unknown broker": replace(request, broker_id=99),
        "stale broker epoch": replace(request, broker_epoch=request.broker_epoch - 1),
        "unknown topic": replace(request, topic_id="00000000-0000-0000-0000-000000000000"),
        "unknown partition": replace(request, partition=1),
        "old leader epoch": replace(request, leader_epoch=p.leader_epoch - 1),
        "future leader epoch": replace(request, leader_epoch=p.leader_epoch + 1),
        "not leader": replace(request, broker_id=follower, broker_epoch=cluster.epochs[follower]),
        "stale partition epoch": replace(request, partition_epoch=p.partition_epoch - 1),
        "drops leader": replace(request, new_isr=p.replicas[1:]),
        "empty isr": replace(request, new_isr=()),
        "duplicates": replace(request, new_isr=(p.leader, p.leader)),
        "not a replica": replace(request, new_isr=(p.leader, outsider)),
        "unknown replica": replace(request, new_isr=(p.leader, 42)),
    }[case]


CASES = [
    ("unknown broker", BrokerIdNotRegisteredError),
    ("stale broker epoch", StaleBrokerEpochError),
    ("unknown topic", UnknownTopicOrPartitionError),
    ("unknown partition", UnknownTopicOrPartitionError),
    ("old leader epoch", FencedLeaderEpochError),
    ("future leader epoch", UnknownLeaderEpochError),
    ("not leader", NotLeaderOrFollowerError),
    ("stale partition epoch", InvalidUpdateVersionError),
    ("drops leader", IsrWithoutLeaderError),
    ("empty isr", IsrWithoutLeaderError),
    ("duplicates", InvalidRequestError),
    ("not a replica", IneligibleReplicaError),
    ("unknown replica", IneligibleReplicaError),
]


@pytest.mark.parametrize(("case", "error"), CASES, ids=[c for c, _ in CASES])
def test_rejections(case, error):
    cluster, request = setup()
    # Make the epochs non-zero so "older" has a value to take.
    cluster.apply(alter_partition(cluster.image, request))
    p = cluster.partition(request.topic_id, 0)
    request = replace(request, partition_epoch=p.partition_epoch, new_isr=p.replicas)
    assert alter_partition(cluster.image, request).records  # the unmutated request is fine
    bad = mutate(cluster, request, case)
    with pytest.raises(error) as raised:
        alter_partition(cluster.image, bad)
    assert type(raised.value) is error


def test_the_issue_s_rejections_have_distinct_codes():
    """Stale epochs, non-leaders, ineligible replicas, an ISR without the leader."""
    named = [
        "stale partition epoch",
        "old leader epoch",
        "not leader",
        "not a replica",
        "drops leader",
    ]
    errors = dict(CASES)
    assert len({errors[case].code for case in named}) == len(named)


def test_fenced_replica_cannot_rejoin():
    cluster, request = setup()
    p = cluster.partition(request.topic_id, 0)
    follower = p.replicas[2]
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    for b in range(4):
        if b != follower:
            cluster.heartbeat(b)
    assert cluster.fence_tick() == (follower,)
    p = cluster.partition(request.topic_id, 0)
    assert follower not in p.isr
    rejoin = replace(request, partition_epoch=p.partition_epoch, new_isr=p.replicas)
    with pytest.raises(IneligibleReplicaError):
        alter_partition(cluster.image, rejoin)


def test_leader_epoch_is_checked_before_leadership():
    """A deposed leader with its old epoch learns it is fenced, not merely "not leader"."""
    cluster, request = setup()
    p = cluster.partition(request.topic_id, 0)
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    for b in range(4):
        if b != p.leader:
            cluster.heartbeat(b)
    cluster.fence_tick()
    cluster.heartbeat(p.leader)  # back and unfenced, but no longer leader
    assert cluster.partition(request.topic_id, 0).leader != p.leader
    with pytest.raises(FencedLeaderEpochError):
        alter_partition(cluster.image, request)

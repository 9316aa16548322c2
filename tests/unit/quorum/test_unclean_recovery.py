"""Elections by log end (KIP-966): unclean recovery, unclean elections among
several replicas, and the fsynced-topic exemption: lograft/quorum/
unclean_recovery.py and election.elect_by_log_end / elect_unclean_by_log_end,
driven through the controller's handlers as brokers would call them."""

from __future__ import annotations

import pytest

from lograft.errors import InvalidRequestError, StaleBrokerEpochError
from lograft.quorum.configs import AlterConfigRequest, alter_config
from lograft.quorum.controller_config import ControllerConfig
from lograft.quorum.image import NO_LEADER
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.records import ConfigResourceType, encode_batch
from lograft.quorum.unclean_recovery import (
    LOG_ENDS_PER_REQUEST_MAX,
    ReplicaLogEnd,
    ReportLogEndsRequest,
    awaiting_log_ends,
    elect_after_report_wait,
    report_log_ends,
)
from lograft.typed import FieldError

from .metadata_cluster import Cluster, cluster_of
from .test_eligible_leader_replicas import kill, restart, three_replicas


def report(cluster: Cluster, broker: int, topic_id: str, last_epoch: int, end: int) -> int:
    request = ReportLogEndsRequest(
        broker, cluster.epochs[broker], (ReplicaLogEnd(topic_id, 0, last_epoch, end),)
    )
    return cluster.apply(
        report_log_ends(cluster.image, cluster.sessions, request, cluster.now_ms, cluster.config)
    )


def all_dead_then_unclean_restarts(**configs: str) -> tuple[Cluster, str, tuple[int, ...]]:
    cluster, topic_id, replicas = three_replicas(**configs)
    kill(cluster, *replicas)
    for b in replicas:
        restart(cluster, b, clean=False)
    return cluster, topic_id, replicas


def test_the_longest_log_leads_once_every_replica_has_reported():
    cluster, topic_id, (a, b, c) = all_dead_then_unclean_restarts()
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    assert report(cluster, a, topic_id, last_epoch=3, end=100) == 0
    assert report(cluster, b, topic_id, last_epoch=3, end=140) == 0
    # Not before the last one: `c` might hold more than `b`.
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    assert report(cluster, c, topic_id, last_epoch=3, end=120) == 1
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr, p.last_known_leader) == (b, (b,), (), NO_LEADER)


def test_a_later_epoch_beats_a_longer_log_of_an_earlier_one():
    cluster, topic_id, (a, b, c) = all_dead_then_unclean_restarts()
    report(cluster, a, topic_id, last_epoch=2, end=500)  # a tail the later leader never had
    report(cluster, b, topic_id, last_epoch=4, end=300)
    report(cluster, c, topic_id, last_epoch=-1, end=0)  # an empty log
    assert cluster.partition(topic_id, 0).leader == b


def test_equal_logs_go_to_the_preferred_replica():
    cluster, topic_id, (a, b, c) = all_dead_then_unclean_restarts()
    for broker in (c, b, a):
        report(cluster, broker, topic_id, last_epoch=3, end=100)
    assert cluster.partition(topic_id, 0).leader == a


def test_a_report_of_an_earlier_incarnation_does_not_count():
    cluster, topic_id, (a, b, c) = all_dead_then_unclean_restarts()
    report(cluster, a, topic_id, 3, 100)
    report(cluster, b, topic_id, 3, 900)
    kill(cluster, b)  # b dies again: its report describes a log that may have changed
    restart(cluster, b, clean=False)
    report(cluster, c, topic_id, 3, 120)
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    report(cluster, b, topic_id, 3, 90)  # what the new incarnation holds
    assert cluster.partition(topic_id, 0).leader == c


def test_a_replica_still_away_keeps_the_partition_offline():
    cluster, topic_id, (a, b, c) = three_replicas()
    kill(cluster, a, b, c)
    restart(cluster, a, clean=False)
    restart(cluster, b, clean=False)
    report(cluster, a, topic_id, 3, 100)
    report(cluster, b, topic_id, 3, 100)
    assert cluster.partition(topic_id, 0).leader == NO_LEADER


def test_a_report_from_a_stale_epoch_is_refused():
    cluster, topic_id, (a, _b, _c) = all_dead_then_unclean_restarts()
    request = ReportLogEndsRequest(a, cluster.epochs[a] - 1, (ReplicaLogEnd(topic_id, 0, 3, 1),))
    with pytest.raises(StaleBrokerEpochError):
        report_log_ends(cluster.image, cluster.sessions, request, 0, cluster.config)


@pytest.mark.parametrize(
    "bad",
    [ReplicaLogEnd("t", -1, 0, 0), ReplicaLogEnd("t", 0, -2, 0), ReplicaLogEnd("t", 0, 0, -1)],
)
def test_a_malformed_log_end_is_refused(bad: ReplicaLogEnd):
    cluster, _topic_id, (a, _b, _c) = all_dead_then_unclean_restarts()
    with pytest.raises(InvalidRequestError):
        report_log_ends(
            cluster.image,
            cluster.sessions,
            ReportLogEndsRequest(a, cluster.epochs[a], (bad,)),
            0,
            cluster.config,
        )


def test_a_report_naming_too_many_partitions_is_refused():
    cluster, topic_id, (a, _b, _c) = all_dead_then_unclean_restarts()
    ends = (ReplicaLogEnd(topic_id, 0, 1, 1),) * (LOG_ENDS_PER_REQUEST_MAX + 1)
    with pytest.raises(InvalidRequestError):
        report_log_ends(
            cluster.image,
            cluster.sessions,
            ReportLogEndsRequest(a, cluster.epochs[a], ends),
            0,
            cluster.config,
        )


def test_reports_for_partitions_that_need_no_recovery_are_not_kept():
    cluster, topic_id, (a, _b, _c) = three_replicas()
    report(cluster, a, topic_id, 3, 100)  # a healthy partition: led, full ISR
    assert dict(cluster.sessions.log_ends) == {}


def test_reports_are_forgotten_once_the_partition_is_led():
    cluster, topic_id, (a, b, c) = all_dead_then_unclean_restarts()
    for broker in (a, b, c):
        report(cluster, broker, topic_id, 3, 100)
    assert cluster.partition(topic_id, 0).leader == a
    report(cluster, b, topic_id, 3, 100)  # the next periodic report
    assert dict(cluster.sessions.log_ends) == {}


@pytest.mark.parametrize("policy", ["group_commit", "every_batch"])
def test_an_unclean_restart_keeps_its_place_on_a_topic_whose_isr_fsyncs(policy: str):
    # Every ISR member fsynced each acknowledged record: an unclean shutdown
    # took nothing acknowledged, so the kept ISR still leads cleanly.
    cluster, topic_id, (a, b, c) = three_replicas(flush_policy=policy)
    kill(cluster, c)
    kill(cluster, b)
    kill(cluster, a)
    restart(cluster, a, clean=False)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr) == (a, (a,))


def test_an_unclean_restart_leaves_the_kept_isr_of_a_page_cache_topic():
    cluster, topic_id, (a, b, c) = three_replicas(flush_policy="interval_ms")
    kill(cluster, c)
    kill(cluster, b)
    kill(cluster, a)
    restart(cluster, a, clean=False)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr) == (NO_LEADER, ())


def test_the_cluster_default_flush_policy_counts():
    cluster = cluster_of(range(3))
    switch_flush_policy(cluster, "group_commit", topic="")
    topic_id = cluster.create("t", 1, 3)  # fsynced from its creation on
    last = kill_all_then_restart_the_last_isr_member_uncleanly(cluster, topic_id)
    assert cluster.partition(topic_id, 0).leader == last


def lagging_followers_then_leader_dies() -> tuple[Cluster, str, tuple[int, ...]]:
    """min_insync_replicas 1 and unclean election on: the followers leave the
    ISR (not into the ELR: the HW kept moving with the leader alone) and come
    back behind; then the leader dies. Two usable replicas, both unclean."""
    cluster, topic_id, (a, b, c) = three_replicas(
        min_insync_replicas="1", unclean_leader_election="true"
    )
    kill(cluster, c)
    kill(cluster, b)
    restart(cluster, b, clean=True)
    restart(cluster, c, clean=True)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr) == (a, (a,), ())
    kill(cluster, a)
    return cluster, topic_id, (a, b, c)


def wait_duty(cluster: Cluster) -> int:
    return cluster.apply(
        elect_after_report_wait(cluster.image, cluster.sessions, cluster.now_ms, cluster.config)
    )


def test_an_unclean_election_picks_the_longest_log_not_the_preferred_replica():
    cluster, topic_id, (_a, b, c) = lagging_followers_then_leader_dies()
    # Before log ends were used, `b` (first usable in preferred order) led at
    # once, truncating what `c` held beyond it.
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    assert report(cluster, b, topic_id, last_epoch=3, end=100) == 0
    assert report(cluster, c, topic_id, last_epoch=3, end=140) == 1
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr, p.last_known_leader) == (c, (c,), (), NO_LEADER)


def test_an_unclean_election_compares_the_last_epoch_first():
    cluster, topic_id, (_a, b, c) = lagging_followers_then_leader_dies()
    report(cluster, b, topic_id, last_epoch=4, end=100)
    report(cluster, c, topic_id, last_epoch=3, end=900)
    assert cluster.partition(topic_id, 0).leader == b


def test_an_unclean_election_waits_for_reports_only_so_long():
    cluster, topic_id, (_a, _b, c) = lagging_followers_then_leader_dies()
    wait_duty(cluster)  # the wait starts when the controller first sees it
    report(cluster, c, topic_id, last_epoch=3, end=50)  # `b` never reports
    cluster.now_ms += cluster.config.unclean_election_report_wait_ms - 1
    assert wait_duty(cluster) == 0
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    cluster.now_ms += 1
    # The longest of those that reported, though `b` is preferred.
    assert wait_duty(cluster) == 1
    assert cluster.partition(topic_id, 0).leader == c
    wait_duty(cluster)  # the next round forgets the wait of a led partition
    assert dict(cluster.sessions.unclean_since) == {}


def test_a_clean_candidate_back_during_the_wait_still_leads_cleanly():
    cluster, topic_id, (a, _b, c) = lagging_followers_then_leader_dies()
    report(cluster, c, topic_id, last_epoch=3, end=140)
    restart(cluster, a, clean=True)  # the last ISR member, whose log is whole
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr) == (a, (a,))


def test_the_brokers_report_for_partitions_awaiting_an_unclean_election():
    cluster, topic_id, _replicas = lagging_followers_then_leader_dies()
    assert [(p.topic_id, p.partition) for p in awaiting_log_ends(cluster.image)] == [(topic_id, 0)]


def test_the_report_wait_is_at_least_one_report_interval():
    with pytest.raises(FieldError):
        ControllerConfig(broker_heartbeat_interval_ms=500, unclean_election_report_wait_ms=499)


def switch_flush_policy(cluster: Cluster, policy: str, *, topic: str = "t") -> None:
    kind = ConfigResourceType.TOPIC if topic else ConfigResourceType.CLUSTER
    request = AlterConfigRequest(kind, topic, "flush_policy", policy)
    cluster.apply(alter_config(cluster.image, request, cluster.config))


def kill_all_then_restart_the_last_isr_member_uncleanly(cluster: Cluster, topic_id: str) -> int:
    for broker in reversed(cluster.partition(topic_id, 0).replicas):
        kill(cluster, broker)
    (last,) = cluster.partition(topic_id, 0).isr  # the kept ISR
    restart(cluster, last, clean=False)
    return last


@pytest.mark.parametrize("topic", ["t", ""], ids=["topic", "cluster"])
def test_a_topic_switched_to_group_commit_is_not_exempt_for_incarnations_from_before(
    topic: str,
):
    # Records written under `none` before the switch may never have been
    # flushed: a broker that was running then is still judged unclean.
    cluster, topic_id, _replicas = three_replicas()
    switch_flush_policy(cluster, "group_commit", topic=topic)
    assert topic_id in cluster.image.fsynced_since
    kill_all_then_restart_the_last_isr_member_uncleanly(cluster, topic_id)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr) == (NO_LEADER, ())


def test_a_topic_switched_to_group_commit_is_exempt_for_incarnations_started_after():
    cluster, topic_id, (a, b, c) = three_replicas()
    switch_flush_policy(cluster, "group_commit")
    for broker in (a, b, c):  # each restarts (cleanly) once after the switch
        kill(cluster, broker)
        restart(cluster, broker, clean=True)
    last = kill_all_then_restart_the_last_isr_member_uncleanly(cluster, topic_id)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr) == (last, (last,))


def test_switching_away_and_back_dates_the_exemption_from_the_last_switch():
    cluster, topic_id, _replicas = three_replicas(flush_policy="group_commit")
    assert cluster.image.fsynced_since[topic_id] == -1  # fsynced since creation
    switch_flush_policy(cluster, "none")
    assert topic_id not in cluster.image.fsynced_since
    switch_flush_policy(cluster, "every_batch")
    assert cluster.image.fsynced_since[topic_id] == cluster.image.offset
    kill_all_then_restart_the_last_isr_member_uncleanly(cluster, topic_id)
    assert cluster.partition(topic_id, 0).isr == ()


def test_a_snapshot_keeps_when_a_topic_started_to_fsync():
    cluster, switched, _replicas = three_replicas()
    created = cluster.create("born-fsynced", 1, 3, flush_policy="group_commit")
    switch_flush_policy(cluster, "group_commit")
    store = MetadataStore()
    store.apply(cluster.image.offset, encode_batch(cluster.image.to_records()))
    restored = MetadataStore()
    restored.restore(store.snapshot())  # records only: the switch date is lost
    assert restored.image.fsynced_since[switched] == -1
    original = MetadataStore()
    original._image = cluster.image  # the image as replayed from the log
    restored.restore(original.snapshot())
    assert dict(restored.image.fsynced_since) == dict(cluster.image.fsynced_since)
    assert restored.image.fsynced_since[created] == -1
    assert restored.image.fsynced_since[switched] > 0

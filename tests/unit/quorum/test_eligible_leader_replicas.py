"""Eligible leader replicas (KIP-966) and the last known leader: each rule of
lograft/quorum/election.py, driven through the controller's handlers."""

from __future__ import annotations

from lograft.quorum.alter_partition import AlterPartitionRequest, alter_partition
from lograft.quorum.configs import AlterConfigRequest, alter_config
from lograft.quorum.election import elect_leader
from lograft.quorum.image import NO_LEADER
from lograft.quorum.records import ConfigResourceType
from lograft.quorum.unclean_recovery import elect_after_report_wait

from .metadata_cluster import Cluster, cluster_of


def kill(cluster: Cluster, *dead: int) -> tuple[int, ...]:
    """Let `dead` miss their sessions while the others heartbeat; run the fence tick."""
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    for b in cluster.image.usable_broker_ids():
        if b not in dead:
            cluster.heartbeat(b)
    return cluster.fence_tick()


def restart(cluster: Cluster, broker_id: int, *, clean: bool) -> None:
    """A new incarnation registers (naming its last epoch if it shut down
    cleanly, -1 if not), catches up and is unfenced."""
    previous = cluster.epochs[broker_id] if clean else -1
    cluster.register(broker_id, previous_broker_epoch=previous)
    assert not cluster.heartbeat(broker_id).fenced


def three_replicas(**configs: str) -> tuple[Cluster, str, tuple[int, ...]]:
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 1, 3, **configs)
    return cluster, topic_id, cluster.partition(topic_id, 0).replicas


def test_a_replica_leaving_an_isr_still_at_min_isr_is_not_eligible():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    p = cluster.partition(topic_id, 0)
    # ISR (leader, second) is still min_insync_replicas 2: its HW moves on
    # without `third`, which will miss committed records.
    assert (p.isr, p.elr) == ((leader, second), ())


def test_a_replica_leaving_an_isr_below_min_isr_is_eligible():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    kill(cluster, second)
    p = cluster.partition(topic_id, 0)
    # ISR (leader,) is below min ISR: the HW stops, `second` holds all of it.
    assert (p.leader, p.isr, p.elr) == (leader, (leader,), (second,))


def test_an_elr_member_is_elected_cleanly_when_the_last_isr_member_is_away():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    kill(cluster, second)
    kill(cluster, leader)
    offline = cluster.partition(topic_id, 0)
    assert (offline.leader, offline.isr, offline.elr) == (NO_LEADER, (leader,), (second,))
    assert offline.last_known_leader == leader
    # `third` left while the ISR was at min ISR: not eligible, no election.
    restart(cluster, third, clean=True)
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    # `second` is in the ELR: it leads, alone in the ISR; the kept ISR member
    # still away (`leader`) held everything too and moves to the ELR.
    restart(cluster, second, clean=True)
    back = cluster.partition(topic_id, 0)
    assert (back.leader, back.isr, back.elr) == (second, (second,), (leader,))
    assert back.last_known_leader == NO_LEADER
    assert back.leader_epoch == offline.leader_epoch + 1


def test_without_the_elr_the_same_history_stays_offline():
    # min_insync_replicas 1: an ISR of one moves the HW, so nobody who left is
    # eligible; only the last ISR member may lead again.
    cluster, topic_id, (leader, second, third) = three_replicas(min_insync_replicas="1")
    kill(cluster, third)
    kill(cluster, second)
    kill(cluster, leader)
    restart(cluster, second, clean=True)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (leader,), ())


def test_a_controlled_shutdown_below_min_isr_joins_the_elr():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    cluster.heartbeat(second, shutdown=True)
    p = cluster.partition(topic_id, 0)
    assert (p.isr, p.elr) == ((leader,), (second,))


def test_the_isr_back_at_min_isr_empties_the_elr():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    kill(cluster, second)
    restart(cluster, second, clean=True)
    p = cluster.partition(topic_id, 0)
    assert p.elr == (second,)
    request = AlterPartitionRequest(
        leader, cluster.epochs[leader], topic_id, 0, p.leader_epoch, p.partition_epoch,
        (leader, second),
    )  # fmt: skip
    cluster.apply(alter_partition(cluster.image, request))
    p = cluster.partition(topic_id, 0)
    assert (p.isr, p.elr) == ((leader, second), ())


def test_a_follower_dropped_for_lag_below_min_isr_joins_the_elr():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    p = cluster.partition(topic_id, 0)
    request = AlterPartitionRequest(
        leader, cluster.epochs[leader], topic_id, 0, p.leader_epoch, p.partition_epoch, (leader,)
    )
    cluster.apply(alter_partition(cluster.image, request))
    p = cluster.partition(topic_id, 0)
    assert (p.isr, p.elr) == ((leader,), (second,))


def test_an_unclean_restart_leaves_the_elr_and_is_not_elected():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    kill(cluster, second)
    kill(cluster, leader)
    # `second` was SIGKILLed or lost power: its log may lack records it had.
    restart(cluster, second, clean=False)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (leader,), ())
    # The last ISR member, restarted cleanly, leads; `second` may rejoin its
    # ISR only by catching up (AlterPartition from the leader).
    restart(cluster, leader, clean=True)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr) == (leader, (leader,), ())


def test_an_unclean_restart_of_the_last_isr_member_empties_the_isr():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    kill(cluster, second)
    kill(cluster, leader)
    restart(cluster, leader, clean=False)
    p = cluster.partition(topic_id, 0)
    # Nobody may lead it without loss but `second` (ELR), still away.
    assert (p.leader, p.isr, p.elr, p.last_known_leader) == (NO_LEADER, (), (second,), leader)
    restart(cluster, second, clean=True)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr) == (second, (second,), ())


def test_an_unclean_restart_of_the_only_candidate_keeps_the_partition_offline():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, leader, second, third)
    offline = cluster.partition(topic_id, 0)
    assert (offline.isr, offline.elr) == ((leader, second, third), ())
    for b in (leader, second, third):
        restart(cluster, b, clean=False)
    p = cluster.partition(topic_id, 0)
    # Every replica may have lost acknowledged records: no clean election.
    assert (p.leader, p.isr, p.elr, p.last_known_leader) == (NO_LEADER, (), (), leader)


def test_a_clean_restart_of_the_whole_isr_elects_as_before():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, leader, second, third)
    restart(cluster, third, clean=True)
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr) == (third, (third,), (leader, second))


def test_a_registration_that_names_no_previous_epoch_is_taken_as_clean():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, leader, second, third)
    cluster.register(third)  # previous_broker_epoch None: a broker from before the field
    assert not cluster.heartbeat(third).fenced
    assert cluster.partition(topic_id, 0).leader == third


def test_a_stale_previous_epoch_is_an_unclean_shutdown():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, leader, second, third)
    stale = cluster.epochs[third]
    restart(cluster, third, clean=True)  # clean, then killed again
    kill(cluster, third)
    cluster.register(third, previous_broker_epoch=stale)
    assert not cluster.heartbeat(third).fenced
    assert cluster.partition(topic_id, 0).leader == NO_LEADER


def test_an_unclean_restart_of_a_broker_still_unfenced_does_not_enter_the_elr():
    cluster, topic_id, (leader, second, third) = three_replicas()
    kill(cluster, third)
    # `second` restarts before it was fenced (its session has expired, the
    # fence check has not run): its old incarnation leaves the ISR in the
    # registration's batch, and must not become eligible.
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(leader)
    assert not cluster.image.brokers[second].fenced
    cluster.register(second, previous_broker_epoch=-1)
    p = cluster.partition(topic_id, 0)
    assert (p.isr, p.elr) == ((leader,), ())


def test_unclean_election_without_reports_prefers_the_last_known_leader():
    cluster, topic_id, (leader, second, third) = three_replicas(unclean_leader_election="false")
    kill(cluster, leader, second, third)
    for b in (third, leader):
        restart(cluster, b, clean=False)
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    request = AlterConfigRequest(ConfigResourceType.TOPIC, "t", "unclean_leader_election", "true")
    cluster.apply(alter_config(cluster.image, request, cluster.config))
    # Two usable replicas: the election waits for their log ends...
    assert cluster.partition(topic_id, 0).leader == NO_LEADER
    wait = cluster.config.unclean_election_report_wait_ms
    for step in (0, wait - 1):
        cluster.now_ms += step
        cluster.apply(
            elect_after_report_wait(cluster.image, cluster.sessions, cluster.now_ms, cluster.config)
        )
        assert cluster.partition(topic_id, 0).leader == NO_LEADER
    # ... and with none reported once the wait is over, both may lack
    # records; the last leader was in sync last, so it goes first.
    cluster.now_ms += 1
    cluster.apply(
        elect_after_report_wait(cluster.image, cluster.sessions, cluster.now_ms, cluster.config)
    )
    p = cluster.partition(topic_id, 0)
    assert (p.leader, p.isr, p.elr, p.last_known_leader) == (leader, (leader,), (), NO_LEADER)


def test_an_unclean_restart_after_a_controlled_shutdown_leaves_the_elr():
    cluster, topic_id, (_leader, second, third) = three_replicas()
    kill(cluster, third)
    cluster.heartbeat(second, shutdown=True)
    assert cluster.partition(topic_id, 0).elr == (second,)
    cluster.register(second, previous_broker_epoch=-1)  # it crashed on its way out
    assert cluster.partition(topic_id, 0).elr == ()


def test_elect_leader_order():
    # ISR first, then ELR, then (unclean) the last known leader, then preferred order.
    assert elect_leader((1, 2, 3), (1,), {2, 3}, False, elr=(3, 2)).leader == 2
    assert elect_leader((1, 2, 3), (1,), {3}, False, elr=(2,)).leader == NO_LEADER
    unclean = elect_leader((1, 2, 3), (1,), {3}, True, last_known_leader=2)
    assert (unclean.leader, unclean.isr, unclean.unclean) == (3, (3,), True)


def test_changing_min_isr_empties_the_elr():
    cluster, topic_id, (_leader, second, third) = three_replicas()
    kill(cluster, third)
    kill(cluster, second)
    assert cluster.partition(topic_id, 0).elr == (second,)
    request = AlterConfigRequest(ConfigResourceType.TOPIC, "t", "min_insync_replicas", "1")
    cluster.apply(alter_config(cluster.image, request, cluster.config))
    # With min ISR 1 the leader's HW moves again: `second` falls behind.
    assert cluster.partition(topic_id, 0).elr == ()

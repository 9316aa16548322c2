from __future__ import annotations

import uuid

import pytest

from lograft.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InvalidRequestError,
    StaleBrokerEpochError,
)
from lograft.quorum.broker_lifecycle import (
    HeartbeatRequest,
    RegisterBrokerRequest,
    broker_heartbeat,
    fence_expired_brokers,
    register_broker,
    unregister_broker,
)
from lograft.quorum.image import NO_LEADER, BrokerState
from lograft.quorum.records import BrokerAction, BrokerRegistrationChange, endpoints_from
from lograft.quorum.sessions import BrokerSessions, sessions_after_failover

from .metadata_cluster import Cluster, cluster_of

ENDPOINTS = endpoints_from({"http": "127.0.0.1:9000"})


def register(cluster: Cluster, broker_id: int, incarnation: str, endpoints=ENDPOINTS, rack=None):
    request = RegisterBrokerRequest(broker_id, incarnation, endpoints, rack)
    return register_broker(cluster.image, cluster.sessions, request, cluster.now_ms, cluster.config)


# --- registration ----------------------------------------------------------------


def test_new_broker_registers_fenced():
    cluster = Cluster()
    result = register(cluster, 1, "inc-a", rack="r1")
    epoch = cluster.apply(result).broker_epoch
    broker = cluster.image.brokers[1]
    assert (broker.state, broker.broker_epoch, broker.rack) == (BrokerState.FENCED, epoch, "r1")
    assert cluster.sessions.alive(
        1,
        cluster.now_ms,
        cluster.config.broker_session_timeout_ms,
        cluster.config.refused_overdue_ms,
    )


def test_same_incarnation_is_idempotent():
    cluster = Cluster()
    epoch = cluster.apply(register(cluster, 1, "inc-a")).broker_epoch
    again = register(cluster, 1, "inc-a")
    assert again.records == ()
    assert again.response.broker_epoch == epoch
    with pytest.raises(InvalidRequestError, match="other endpoints"):
        register(cluster, 1, "inc-a", endpoints=endpoints_from({"http": "10.0.0.1:1"}))


def test_new_incarnation_gets_a_new_epoch_once_the_old_session_is_gone():
    cluster = cluster_of([1])
    old_epoch = cluster.epochs[1]
    # The old incarnation is unfenced and alive: a second process may not take the id.
    with pytest.raises(DuplicateBrokerRegistrationError) as raised:
        register(cluster, 1, "inc-new")
    assert raised.value.retriable
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    new_epoch = cluster.apply(register(cluster, 1, "inc-new")).broker_epoch
    assert new_epoch > old_epoch
    assert cluster.image.brokers[1].incarnation_id == "inc-new"
    assert cluster.image.brokers[1].fenced


def test_epochs_grow_even_across_unregistration():
    cluster = cluster_of([1, 2])
    first = cluster.epochs[1]
    cluster.apply(unregister_broker(cluster.image, cluster.sessions, 1))
    assert 1 not in cluster.image.brokers
    assert cluster.register(1) > first


def test_replacing_an_unfenced_incarnation_takes_it_out_of_isrs():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 3, 3)
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    # Broker 0 restarted before the fence tick noticed: its old session has expired.
    result = register(cluster, 0, str(uuid.uuid4()))
    cluster.apply(result)
    for p in cluster.image.topics[topic_id].partitions:
        assert 0 not in p.isr and p.leader != 0


def test_broker_in_controlled_shutdown_may_be_replaced_at_once():
    cluster = cluster_of([1, 2])
    cluster.heartbeat(1, shutdown=True)
    cluster.apply(register(cluster, 1, "inc-restarted"))
    assert cluster.image.brokers[1].incarnation_id == "inc-restarted"


@pytest.mark.parametrize(
    "request_",
    [
        RegisterBrokerRequest(-1, "i", ENDPOINTS),
        RegisterBrokerRequest(1, "", ENDPOINTS),
        RegisterBrokerRequest(1, "i", ()),
        RegisterBrokerRequest(1, "i", ENDPOINTS, rack=""),
    ],
)
def test_registration_is_validated(request_):
    cluster = Cluster()
    with pytest.raises(InvalidRequestError):
        register_broker(cluster.image, cluster.sessions, request_, 0, cluster.config)


def test_unregister_unknown_broker():
    cluster = Cluster()
    with pytest.raises(BrokerIdNotRegisteredError):
        unregister_broker(cluster.image, cluster.sessions, 3)


def test_unregister_moves_leadership_first():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 6, 2)
    cluster.apply(unregister_broker(cluster.image, cluster.sessions, 1))
    for p in cluster.image.topics[topic_id].partitions:
        assert p.leader != 1 and p.leader in p.isr
    assert 1 not in cluster.sessions.last_heartbeat_ms


# --- heartbeats and fencing --------------------------------------------------------


def test_heartbeat_from_unknown_or_stale_broker():
    cluster = cluster_of([1])
    with pytest.raises(BrokerIdNotRegisteredError):
        broker_heartbeat(
            cluster.image, cluster.sessions, HeartbeatRequest(2, 0, 0), 0, cluster.config
        )
    stale = HeartbeatRequest(1, cluster.epochs[1] - 1, cluster.image.offset)
    with pytest.raises(StaleBrokerEpochError):
        broker_heartbeat(cluster.image, cluster.sessions, stale, 0, cluster.config)


def test_fenced_broker_is_unfenced_only_once_caught_up():
    cluster = Cluster()
    cluster.register(1)
    catch_up = cluster.image.brokers[1].catch_up_offset
    behind = cluster.heartbeat(1, offset=catch_up - 1)
    assert behind.fenced and cluster.image.brokers[1].fenced
    caught_up = cluster.heartbeat(1, offset=catch_up)
    assert not caught_up.fenced
    assert cluster.image.brokers[1].state is BrokerState.UNFENCED


def test_broker_that_misses_its_session_is_fenced():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 6, 3)
    timeout = cluster.config.broker_session_timeout_ms
    start = cluster.now_ms
    # Exactly at the timeout the session still holds; one ms later it does not.
    for now, expected in ((start + timeout, ()), (start + timeout + 1, (2,))):
        cluster.now_ms = now
        cluster.heartbeat(0)
        cluster.heartbeat(1)
        assert cluster.fence_tick() == expected
    assert cluster.image.brokers[2].fenced
    for p in cluster.image.topics[topic_id].partitions:
        assert 2 not in p.isr and p.leader in (0, 1)


def test_fence_records_come_in_one_batch_with_the_elections():
    cluster = cluster_of(range(2))
    topic_id = cluster.create("t", 2, 2)
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(0)
    result = fence_expired_brokers(cluster.image, cluster.sessions, cluster.now_ms, cluster.config)
    assert result.records[0] == BrokerRegistrationChange(1, cluster.epochs[1], BrokerAction.FENCE)
    led_by_1 = [p for p in cluster.image.topics[topic_id].partitions if p.leader == 1]
    assert led_by_1
    changed = {(r.topic_id, r.partition): r for r in result.records[1:]}
    for p in led_by_1:
        assert changed[(topic_id, p.partition)].leader == 0


def test_refenced_broker_must_catch_up_past_its_fencing():
    cluster = cluster_of(range(2))
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(0)
    assert cluster.fence_tick() == (1,)
    fenced_at = cluster.image.offset
    assert cluster.image.brokers[1].catch_up_offset == fenced_at
    # It comes back without having applied its own fencing: stays fenced.
    assert cluster.heartbeat(1, offset=fenced_at - 1).fenced
    assert not cluster.heartbeat(1, offset=fenced_at).fenced


def test_fenced_brokers_are_not_fenced_again():
    cluster = cluster_of(range(2))
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(0)
    assert cluster.fence_tick() == (1,)
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(0)
    assert cluster.fence_tick() == ()


def test_broker_without_session_gets_a_fresh_one():
    cluster = cluster_of(range(2))
    cluster.sessions = BrokerSessions()
    cluster.now_ms += 10 * cluster.config.broker_session_timeout_ms
    assert cluster.fence_tick() == ()
    assert set(cluster.sessions.last_heartbeat_ms) == {0, 1}
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    assert set(cluster.fence_tick()) == {0, 1}


def test_failover_gives_every_broker_a_fresh_session():
    cluster = cluster_of(range(3))
    # The old controller saw broker 2 last long ago; the new one knows nothing of that.
    cluster.now_ms = 50_000
    cluster.sessions = sessions_after_failover(cluster.image, cluster.now_ms)
    assert dict(cluster.sessions.last_heartbeat_ms) == dict.fromkeys(range(3), 50_000)
    cluster.now_ms += cluster.config.broker_session_timeout_ms
    assert cluster.fence_tick() == ()
    cluster.now_ms += 1
    cluster.heartbeat(0)
    cluster.heartbeat(1)
    assert cluster.fence_tick() == (2,)


def test_controlled_shutdown():
    cluster = cluster_of(range(3))
    topic_id = cluster.create("t", 6, 2)
    led = [p.partition for p in cluster.image.topics[topic_id].partitions if p.leader == 1]
    assert led
    response = cluster.heartbeat(1, shutdown=True)
    assert response.in_controlled_shutdown and response.should_shut_down
    assert not response.fenced
    assert cluster.image.brokers[1].state is BrokerState.CONTROLLED_SHUTDOWN
    for p in cluster.image.topics[topic_id].partitions:
        assert p.leader != 1 and 1 not in p.isr
    # Repeated requests append nothing; its session then ends and it is fenced.
    again = broker_heartbeat(
        cluster.image,
        cluster.sessions,
        HeartbeatRequest(1, cluster.epochs[1], cluster.image.offset, want_shutdown=True),
        cluster.now_ms,
        cluster.config,
    )
    assert again.records == () and again.response.should_shut_down
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(0)
    cluster.heartbeat(2)
    assert cluster.fence_tick() == (1,)


def test_controlled_shutdown_of_the_only_replica_takes_it_offline():
    cluster = cluster_of(range(2))
    topic_id = cluster.create("t", 2, 1)
    p = next(p for p in cluster.image.topics[topic_id].partitions if p.leader == 0)
    cluster.heartbeat(0, shutdown=True)
    after = cluster.partition(topic_id, p.partition)
    assert (after.leader, after.isr) == (NO_LEADER, (0,))


def test_fenced_broker_asking_to_shut_down_may_go_at_once():
    cluster = Cluster()
    cluster.register(1)
    response = cluster.heartbeat(1, offset=-1, shutdown=True)
    assert response.fenced and response.should_shut_down


def test_unfencing_elects_leaders_for_partitions_waiting_on_the_broker():
    cluster = cluster_of(range(2))
    topic_id = cluster.create("t", 4, 1)
    on_1 = [p.partition for p in cluster.image.topics[topic_id].partitions if p.leader == 1]
    cluster.now_ms += cluster.config.broker_session_timeout_ms + 1
    cluster.heartbeat(0)
    cluster.fence_tick()
    assert all(cluster.partition(topic_id, i).offline for i in on_1)
    result = broker_heartbeat(
        cluster.image,
        cluster.sessions,
        HeartbeatRequest(1, cluster.epochs[1], cluster.image.offset),
        cluster.now_ms,
        cluster.config,
    )
    assert result.records[0].action is BrokerAction.UNFENCE
    assert sorted(r.partition for r in result.records[1:]) == on_1
    cluster.apply(result)
    assert all(cluster.partition(topic_id, i).leader == 1 for i in on_1)

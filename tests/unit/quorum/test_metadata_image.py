from __future__ import annotations

from dataclasses import replace

import pytest

from lograft.errors import MetadataRecordError
from lograft.quorum.image import (
    NO_LEADER,
    BrokerState,
    MetadataDelta,
    MetadataImage,
)
from lograft.quorum.records import (
    BrokerAction,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnregisterBroker,
    endpoints_from,
)

from .metadata_cluster import dump

T1 = "00000000-0000-0000-0000-000000000001"
T2 = "00000000-0000-0000-0000-000000000002"
TOPIC = ConfigResourceType.TOPIC
CLUSTER = ConfigResourceType.CLUSTER


def register(broker_id: int, epoch: int, fenced: bool = True, rack: str | None = None):
    return RegisterBroker(
        broker_id, f"inc-{broker_id}-{epoch}", epoch, endpoints_from({"http": "h:1"}), rack, fenced
    )


def build(*batches) -> MetadataImage:
    image = MetadataImage.empty()
    for offset, batch in enumerate(batches, start=1):
        image = image.apply_batch(offset, batch)
    return image


def with_topic(partitions: int = 2) -> MetadataImage:
    parts = [Partition(T1, i, (1, 2, 3), (1, 2, 3), 1, 0, 0) for i in range(partitions)]
    return build([register(b, b, fenced=False) for b in (1, 2, 3)], [Topic("a", T1), *parts])


# --- brokers ---------------------------------------------------------------------


def test_register_broker():
    image = build([register(1, 5, rack="r1")])
    broker = image.brokers[1]
    assert (broker.broker_epoch, broker.rack, broker.state) == (5, "r1", BrokerState.FENCED)
    assert broker.catch_up_offset == image.offset == 1
    assert not broker.usable


def test_reregistration_needs_a_newer_epoch():
    image = build([register(1, 5)])
    newer = image.replay(register(1, 6, fenced=False), 2)
    assert newer.brokers[1].broker_epoch == 6 and newer.brokers[1].usable
    for epoch in (5, 4):
        with pytest.raises(MetadataRecordError, match="epoch"):
            image.replay(register(1, epoch), 2)


@pytest.mark.parametrize(
    ("start", "action", "end"),
    [
        (BrokerState.FENCED, BrokerAction.UNFENCE, BrokerState.UNFENCED),
        (BrokerState.UNFENCED, BrokerAction.FENCE, BrokerState.FENCED),
        (BrokerState.UNFENCED, BrokerAction.CONTROLLED_SHUTDOWN, BrokerState.CONTROLLED_SHUTDOWN),
        (BrokerState.CONTROLLED_SHUTDOWN, BrokerAction.FENCE, BrokerState.FENCED),
    ],
)
def test_broker_registration_change(start, action, end):
    batches = [[register(1, 1)]]
    if start is not BrokerState.FENCED:
        batches.append([BrokerRegistrationChange(1, 1, BrokerAction.UNFENCE)])
    if start is BrokerState.CONTROLLED_SHUTDOWN:
        batches.append([BrokerRegistrationChange(1, 1, BrokerAction.CONTROLLED_SHUTDOWN)])
    image = build(*batches)
    assert image.brokers[1].state is start
    after = image.replay(BrokerRegistrationChange(1, 1, action), 10)
    assert after.brokers[1].state is end
    # Fencing moves the catch-up mark to the fencing batch; other changes keep it.
    expected = 10 if action is BrokerAction.FENCE else image.brokers[1].catch_up_offset
    assert after.brokers[1].catch_up_offset == expected


@pytest.mark.parametrize(
    ("unfenced", "action"),
    [
        (False, BrokerAction.FENCE),
        (False, BrokerAction.CONTROLLED_SHUTDOWN),
        (True, BrokerAction.UNFENCE),
    ],
)
def test_illegal_broker_transitions_fail_loudly(unfenced, action):
    image = build([register(1, 1, fenced=not unfenced)])
    with pytest.raises(MetadataRecordError, match="illegal broker transition"):
        image.replay(BrokerRegistrationChange(1, 1, action), 2)


def test_broker_change_for_another_incarnation_is_refused():
    image = build([register(1, 3)])
    with pytest.raises(MetadataRecordError, match="not registered"):
        image.replay(BrokerRegistrationChange(1, 2, BrokerAction.UNFENCE), 2)
    with pytest.raises(MetadataRecordError, match="not registered"):
        image.replay(BrokerRegistrationChange(9, 3, BrokerAction.UNFENCE), 2)


def test_unregister_broker():
    image = build([register(1, 1), register(2, 1)])
    after = image.replay(UnregisterBroker(1, 1), 2)
    assert set(after.brokers) == {2}
    with pytest.raises(MetadataRecordError):
        image.replay(UnregisterBroker(1, 0), 2)


# --- topics and partitions -----------------------------------------------------------


def test_topic_and_partitions():
    image = with_topic(partitions=3)
    topic = image.topic("a")
    assert topic is not None and topic.topic_id == T1
    assert [p.partition for p in topic.partitions] == [0, 1, 2]
    assert image.partition(T1, 2) == topic.partitions[2]
    assert image.partition(T1, 3) is None and image.partition(T2, 0) is None


def test_duplicate_topic_name_or_id_is_refused():
    image = with_topic()
    for record in (Topic("a", T2), Topic("b", T1), Topic("", T2)):
        with pytest.raises(MetadataRecordError):
            image.replay(record, 5)


def test_partitions_must_be_dense():
    image = build([Topic("a", T1)])
    with pytest.raises(MetadataRecordError, match="next index"):
        image.replay(Partition(T1, 1, (1,), (1,), 1, 0, 0), 2)
    with pytest.raises(MetadataRecordError, match="unknown topic"):
        image.replay(Partition(T2, 0, (1,), (1,), 1, 0, 0), 2)


@pytest.mark.parametrize(
    ("replicas", "isr", "leader", "problem"),
    [
        ((), (), NO_LEADER, "replicas"),
        ((1, 1), (1,), 1, "replicas"),
        ((1, -2), (1,), 1, ">= 0"),
        ((1, 2), (), 1, "isr may be empty only while offline"),
        ((1, 2), (1, 3), 1, "subset"),
        ((1, 2), (2,), 1, "leader"),
    ],
)
def test_partition_invariants(replicas, isr, leader, problem):
    image = build([Topic("a", T1)])
    with pytest.raises(MetadataRecordError, match=problem):
        image.replay(Partition(T1, 0, replicas, isr, leader, 0, 0), 2)


@pytest.mark.parametrize(
    ("elr", "last_known_leader", "problem"),
    [
        ((2, 2), -1, "elr: distinct replicas"),
        ((4,), -1, "elr: distinct replicas"),
        ((1,), -1, "elr and isr must be disjoint"),
        ((), 4, "last known leader"),
    ],
)
def test_elr_invariants(elr, last_known_leader, problem):
    image = build([Topic("a", T1)])
    with pytest.raises(MetadataRecordError, match=problem):
        image.replay(Partition(T1, 0, (1, 2, 3), (1,), 1, 0, 0, elr, last_known_leader), 2)


def test_an_offline_partition_may_have_an_empty_isr():
    image = build([Topic("a", T1)])
    after = image.replay(Partition(T1, 0, (1, 2), (), NO_LEADER, 3, 5, (2,), 1), 2)
    p = after.partition(T1, 0)
    assert p is not None
    assert (p.isr, p.elr, p.last_known_leader) == ((), (2,), 1)
    assert after.to_records()[-1] == Partition(T1, 0, (1, 2), (), NO_LEADER, 3, 5, (2,), 1)


def test_a_change_of_the_elr_alone_moves_only_the_partition_epoch():
    image = build([Topic("a", T1), Partition(T1, 0, (1, 2, 3), (1,), 1, 4, 7)])
    after = image.replay(PartitionChange(T1, 0, elr=(2,), last_known_leader=3), 2)
    p = after.partition(T1, 0)
    assert p is not None
    assert (p.elr, p.last_known_leader, p.leader_epoch, p.partition_epoch) == ((2,), 3, 4, 8)


def test_partition_change_epochs():
    image = with_topic()
    p0 = image.partition(T1, 0)
    assert p0 is not None
    shrunk = image.replay(PartitionChange(T1, 0, isr=(1, 2)), 3).partition(T1, 0)
    assert shrunk is not None
    # ISR only: partition epoch +1, leader epoch unchanged.
    assert (shrunk.isr, shrunk.leader) == ((1, 2), 1)
    assert shrunk.partition_epoch == p0.partition_epoch + 1
    assert shrunk.leader_epoch == p0.leader_epoch
    moved = image.replay(PartitionChange(T1, 0, leader=2), 3).partition(T1, 0)
    assert moved is not None
    assert (moved.leader, moved.leader_epoch) == (2, p0.leader_epoch + 1)
    assert moved.partition_epoch == p0.partition_epoch + 1
    # Setting the same leader is not a leader change.
    same = image.replay(PartitionChange(T1, 0, leader=1), 3).partition(T1, 0)
    assert same is not None and same.leader_epoch == p0.leader_epoch


def test_offline_and_back_bump_the_leader_epoch_each_time():
    image = with_topic()
    offline = image.replay(PartitionChange(T1, 0, isr=(3,), leader=NO_LEADER), 3)
    back = offline.replay(PartitionChange(T1, 0, leader=3), 4)
    states = [i.partition(T1, 0) for i in (image, offline, back)]
    assert [s.leader for s in states] == [1, NO_LEADER, 3]
    assert [s.leader_epoch for s in states] == [0, 1, 2]
    assert [s.partition_epoch for s in states] == [0, 1, 2]


def test_partition_change_that_breaks_an_invariant_is_refused():
    image = with_topic()
    for change in (
        PartitionChange(T1, 0, isr=(2, 3)),  # drops leader 1
        PartitionChange(T1, 0, leader=4),
        PartitionChange(T1, 5, isr=(1,)),
        PartitionChange(T2, 0, isr=(1,)),
        PartitionChange(T1, 0, replicas=(1, 2)),  # ISR member 3 not a replica any more
    ):
        with pytest.raises(MetadataRecordError):
            image.replay(change, 3)


def test_remove_topic_takes_its_configs():
    image = with_topic().apply_batch(
        3, [Config(TOPIC, "a", "retention_ms", "5"), Config(CLUSTER, "", "k", "v")]
    )
    after = image.replay(RemoveTopic(T1), 4)
    assert after.topic("a") is None and T1 not in after.topics
    assert dict(after.config(TOPIC, "a")) == {}
    assert dict(after.config(CLUSTER, "")) == {"k": "v"}
    # The name is free again, and a new topic of that name starts without configs.
    again = after.apply_batch(5, [Topic("a", T2), Partition(T2, 0, (1,), (1,), 1, 0, 0)])
    assert again.topic("a").topic_id == T2 and dict(again.config(TOPIC, "a")) == {}
    with pytest.raises(MetadataRecordError):
        after.replay(RemoveTopic(T1), 5)


# --- configs and producer ids --------------------------------------------------------


def test_config_set_overwrite_delete():
    image = with_topic()
    image = image.apply_batch(3, [Config(TOPIC, "a", "k", "1"), Config(TOPIC, "a", "j", "2")])
    image = image.replay(Config(TOPIC, "a", "k", "3"), 4)
    assert dict(image.config(TOPIC, "a")) == {"k": "3", "j": "2"}
    image = image.apply_batch(5, [Config(TOPIC, "a", "k", None), Config(TOPIC, "a", "j", None)])
    assert dict(image.config(TOPIC, "a")) == {}
    assert (TOPIC, "a") not in image.configs


def test_config_resources_must_exist():
    image = with_topic()
    for record in (
        Config(TOPIC, "missing", "k", "v"),
        Config(CLUSTER, "x", "k", "v"),
        Config(TOPIC, "a", "", "v"),
    ):
        with pytest.raises(MetadataRecordError):
            image.replay(record, 3)


def test_producer_ids_only_grow():
    image = build([ProducerIds(1, 1, 1000)])
    assert image.next_producer_id == 1000
    assert image.replay(ProducerIds(1, 1, 2000), 2).next_producer_id == 2000
    with pytest.raises(MetadataRecordError):
        image.replay(ProducerIds(1, 1, 1000), 2)


# --- offsets, immutability, snapshots --------------------------------------------------


def test_offsets_must_grow():
    image = with_topic()
    with pytest.raises(MetadataRecordError, match="offset"):
        image.apply_batch(image.offset, [])
    assert image.apply_batch(image.offset + 7, []).offset == image.offset + 7


def test_a_failed_batch_leaves_the_image_untouched():
    image = with_topic()
    before = dump(image)
    with pytest.raises(MetadataRecordError):
        image.apply_batch(3, [PartitionChange(T1, 0, isr=(1, 2)), RemoveTopic(T2)])
    assert dump(image) == before


def test_delta_builds_one_image():
    delta = MetadataDelta(with_topic(), 3)
    delta.replay(PartitionChange(T1, 0, isr=(1, 2)))
    delta.image()
    with pytest.raises(AssertionError):
        delta.replay(PartitionChange(T1, 1, isr=(1, 2)))


def test_replay_shares_what_it_does_not_touch():
    image = with_topic().apply_batch(3, [Topic("b", T2), Partition(T2, 0, (1,), (1,), 1, 0, 0)])
    after = image.replay(PartitionChange(T1, 0, isr=(1, 2)), 4)
    assert after.topics[T2] is image.topics[T2]
    assert after.topics[T1].partitions[1] is image.topics[T1].partitions[1]
    assert after.brokers is image.brokers and after.configs is image.configs


def test_snapshot_records_rebuild_the_image():
    image = with_topic().apply_batch(
        3,
        [
            Config(TOPIC, "a", "k", "v"),
            Config(CLUSTER, "", "c", "d"),
            ProducerIds(1, 1, 3000),
            PartitionChange(T1, 1, isr=(2,), leader=2),
            BrokerRegistrationChange(3, 3, BrokerAction.CONTROLLED_SHUTDOWN),
            register(4, 4),
        ],
    )
    restored = MetadataImage.empty().apply_batch(image.offset, image.to_records())
    # Only the catch-up marks differ: a restored node counts from the snapshot.
    assert {b.broker_id: b.catch_up_offset for b in restored.brokers.values()} == dict.fromkeys(
        image.brokers, image.offset
    )
    normalised = {b: replace(reg, catch_up_offset=image.offset) for b, reg in image.brokers.items()}
    assert replace(restored, brokers=normalised) == replace(image, brokers=normalised)

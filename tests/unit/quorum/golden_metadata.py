"""The metadata records behind the golden fixtures (tests/fixtures/golden/).

The fixture bytes were written by the hand-written JSON codec of
lograft/quorum/records.py as of main eef0599, before records became msgspec
Structs; the tests decode them with the current code and compare with these
values, so a codec change that stops reading an existing Raft log or snapshot
fails here. Never regenerate the fixtures with the current codec.
"""

from __future__ import annotations

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

T1 = "6f1c2a9e-0d4b-4c1e-9a55-3b2f7e8d1a01"
T2 = "0b7e8f3c-5a2d-4e6f-8c9b-1d0e2f3a4b02"

# One record of every type, with the edge values a codec can get wrong:
# None fields, empty tuples, non-ASCII text, 64-bit ints, every enum value.
EVERY_TYPE = [
    RegisterBroker(
        broker_id=1,
        incarnation_id="inc-1",
        broker_epoch=7,
        endpoints=endpoints_from({"raft": "h1:9093", "http": "http://h1:9092"}),
        rack="rack-é",
        fenced=False,
    ),
    RegisterBroker(
        broker_id=2,
        incarnation_id="inc-2",
        broker_epoch=2**62,
        endpoints=endpoints_from({}),
        rack=None,
    ),
    BrokerRegistrationChange(broker_id=1, broker_epoch=7, action=BrokerAction.FENCE),
    BrokerRegistrationChange(broker_id=1, broker_epoch=7, action=BrokerAction.UNFENCE),
    BrokerRegistrationChange(broker_id=1, broker_epoch=7, action=BrokerAction.CONTROLLED_SHUTDOWN),
    UnregisterBroker(broker_id=2, broker_epoch=-1),
    Topic(name="orders.ünïcode", topic_id=T1),
    Partition(
        topic_id=T1,
        partition=0,
        replicas=(1, 2, 3),
        isr=(2, 1),
        leader=2,
        leader_epoch=5,
        partition_epoch=9,
    ),
    PartitionChange(topic_id=T1, partition=0),
    PartitionChange(topic_id=T1, partition=1, isr=(), leader=-1, replicas=(3,)),
    RemoveTopic(topic_id=T2),
    Config(
        resource_type=ConfigResourceType.TOPIC,
        resource_name="orders",
        key="retention.ms",
        value="86400000",
    ),
    Config(resource_type=ConfigResourceType.CLUSTER, resource_name="", key="x.y", value=None),
    ProducerIds(broker_id=-1, broker_epoch=-1, next_producer_id=2**63 - 1),
]


def _register(broker_id: int) -> RegisterBroker:
    return RegisterBroker(
        broker_id=broker_id,
        incarnation_id=f"inc-{broker_id}",
        broker_epoch=broker_id + 10,
        endpoints=endpoints_from(
            {"http": f"http://h{broker_id}:9092", "raft": f"h{broker_id}:9093"}
        ),
        rack=None if broker_id == 3 else f"r{broker_id % 2}",
    )


# A replayable history: the batches of a Raft log, offsets 1.., whose image the
# golden snapshot holds (taken after the last batch).
HISTORY = [
    [_register(1), _register(2), _register(3)],
    [
        BrokerRegistrationChange(broker_id=b, broker_epoch=b + 10, action=BrokerAction.UNFENCE)
        for b in (1, 2, 3)
    ],
    [
        Topic(name="orders", topic_id=T1),
        Partition(
            topic_id=T1,
            partition=0,
            replicas=(1, 2, 3),
            isr=(1, 2, 3),
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        ),
        Partition(
            topic_id=T1,
            partition=1,
            replicas=(2, 3, 1),
            isr=(2, 3, 1),
            leader=2,
            leader_epoch=0,
            partition_epoch=0,
        ),
        Config(
            resource_type=ConfigResourceType.TOPIC,
            resource_name="orders",
            key="cleanup.policy",
            value="compact",
        ),
    ],
    [PartitionChange(topic_id=T1, partition=0, isr=(2, 3), leader=2)],
    [
        Topic(name="logs", topic_id=T2),
        Partition(
            topic_id=T2,
            partition=0,
            replicas=(3,),
            isr=(3,),
            leader=3,
            leader_epoch=0,
            partition_epoch=0,
        ),
    ],
    [
        ProducerIds(broker_id=1, broker_epoch=11, next_producer_id=1000),
        Config(
            resource_type=ConfigResourceType.CLUSTER,
            resource_name="",
            key="min.insync.replicas",
            value="2",
        ),
    ],
    [
        BrokerRegistrationChange(
            broker_id=3, broker_epoch=13, action=BrokerAction.CONTROLLED_SHUTDOWN
        )
    ],
    [],
]

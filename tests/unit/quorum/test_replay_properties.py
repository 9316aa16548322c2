"""Property tests: random controller workloads, replayed and checked.

Hypothesis draws a sequence of requests (registrations, heartbeats, clock
advances with fence ticks, topic changes, AlterPartition, configs, producer
ids, leader balance); each goes through its pure handler and its records are
applied as the runtime would. Rejected requests (LograftError) append nothing.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lograft.errors import DuplicateBrokerRegistrationError, LograftError
from lograft.quorum.alter_partition import AlterPartitionRequest, alter_partition
from lograft.quorum.broker_lifecycle import unregister_broker
from lograft.quorum.configs import AlterConfigRequest, alter_config
from lograft.quorum.image import MetadataImage
from lograft.quorum.leader_balance import balance_preferred_leaders
from lograft.quorum.producer_ids import allocate_producer_ids
from lograft.quorum.records import ConfigResourceType, Record, decode_batch, encode_batch
from lograft.quorum.topics import CreateTopicRequest, create_partitions, create_topic, delete_topic

from .metadata_cluster import Cluster, dump

KINDS = [
    "register",
    "tick",
    "tick",
    "crash",
    "crash_pair",
    "recover",
    "shutdown",
    "create",
    "create",
    "delete",
    "grow",
    "alter",
    "balance",
    "config",
    "producer_ids",
    "unregister",
]
steps = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.integers(min_value=0, max_value=4),
        st.integers(min_value=0, max_value=7),
        st.integers(min_value=0, max_value=3),
    ),
    min_size=10,
    max_size=80,
)


def _alter(cluster: Cluster, a: int, mask: int) -> object:
    parts = list(cluster.image.all_partitions())
    led = [p for p in parts if not p.offline]
    if not led:
        return None
    p = led[a % len(led)]
    others = [r for i, r in enumerate(p.replicas) if mask >> i & 1 and r != p.leader]
    request = AlterPartitionRequest(
        p.leader,
        cluster.epochs.get(p.leader, -1),
        p.topic_id,
        p.partition,
        p.leader_epoch,
        p.partition_epoch,
        (p.leader, *others),
    )
    return alter_partition(cluster.image, request)


def _lifecycle(cluster: Cluster, down: set[int], kind: str, a: int, b: int, c: int) -> None:
    """Broker processes: they (re)start, crash, come back possibly behind, shut down."""
    if kind == "register":  # a (re)started process: a new incarnation
        try:
            cluster.register(a, rack=f"r{b % 2}")
        except DuplicateBrokerRegistrationError:
            return  # the old incarnation's session is still live: retried later
        down.discard(a)
    elif kind == "tick":  # time passes; live brokers heartbeat, caught up
        cluster.now_ms += (c + 1) * cluster.config.broker_heartbeat_interval_ms
        for broker in sorted(set(cluster.epochs) - down):
            if broker in cluster.image.brokers:
                cluster.heartbeat(broker)
        cluster.fence_tick()
    elif kind == "crash":
        down.add(a)
    elif kind == "crash_pair":  # e.g. a rack loses power: both go in one fence tick
        down.update((a, (a + 1) % 5))
    elif kind in ("recover", "shutdown") and a in cluster.image.brokers:
        # A recovering broker may still be behind on the metadata log.
        cluster.heartbeat(a, offset=cluster.image.offset - c, shutdown=kind == "shutdown")
        if kind == "shutdown":
            down.add(a)
        else:
            down.discard(a)


LIFECYCLE = frozenset({"register", "tick", "crash", "crash_pair", "recover", "shutdown"})


def _step(cluster: Cluster, number: int, kind: str, a: int, b: int, c: int) -> object:
    image, config = cluster.image, cluster.config
    name = f"t{a}"
    if kind == "create":
        request = CreateTopicRequest(name, b + 1, c + 1)
        return create_topic(image, request, str(uuid.UUID(int=number + 1)), config)
    if kind == "delete":
        return delete_topic(image, name)
    if kind == "grow":
        topic = image.topic(name)
        total = (len(topic.partitions) if topic else 0) + b + 1
        return create_partitions(image, name, total, config)
    if kind == "alter":
        return _alter(cluster, a, b)
    if kind == "balance":
        return balance_preferred_leaders(image, config)
    if kind == "config":
        value = "true" if b % 2 else "false"
        if c == 0:
            request = AlterConfigRequest(
                ConfigResourceType.CLUSTER, "", "unclean_leader_election", value
            )
        else:
            request = AlterConfigRequest(
                ConfigResourceType.TOPIC, name, "unclean_leader_election", value
            )
        return alter_config(image, request, config)
    if kind == "producer_ids":
        return allocate_producer_ids(image, a, cluster.epochs.get(a, -1), config)
    assert kind == "unregister"
    return unregister_broker(image, cluster.sessions, a)


def run(workload) -> tuple[Cluster, list[tuple[int, list[Record]]]]:
    """Drive the workload; return the cluster and every committed batch, in order."""
    cluster = Cluster()
    down: set[int] = set()
    # Start from a few live brokers so that topics can exist from the first steps.
    prelude = [("register", b, b, 0) for b in range(3)] + [("tick", 0, 0, 0), ("create", 0, 3, 1)]
    for number, (kind, a, b, c) in enumerate(prelude + workload):
        before = cluster.image
        if kind in LIFECYCLE:
            _lifecycle(cluster, down, kind, a, b, c)
        else:
            try:
                result = _step(cluster, number, kind, a, b, c)
            except LograftError:
                continue  # rejected: nothing to append
            if result is not None:
                cluster.apply(result)
        check_invariants(before, cluster.image)
    return cluster, cluster.batch_log


def check_invariants(before: MetadataImage, after: MetadataImage) -> None:
    for p in after.all_partitions():
        usable = {b for b in p.isr if b in after.brokers and after.brokers[b].usable}
        if p.offline:
            # Offline only while no ISR member could lead.
            assert not usable, p
        else:
            assert after.brokers[p.leader].usable, p
            assert usable == set(p.isr), p
        old = before.partition(p.topic_id, p.partition)
        if old is not None:
            assert p.leader_epoch >= old.leader_epoch
            assert p.partition_epoch >= old.partition_epoch
            assert (p.leader != old.leader) == (p.leader_epoch == old.leader_epoch + 1) or (
                p.leader == old.leader and p.leader_epoch == old.leader_epoch
            )
    for broker_id, broker in after.brokers.items():
        old = before.brokers.get(broker_id)
        assert old is None or broker.broker_epoch >= old.broker_epoch
    assert after.next_producer_id >= before.next_producer_id


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_replaying_the_same_batches_gives_equal_images_and_mutates_nothing(workload):
    cluster, batches = run(workload)
    images = []
    for _ in range(2):
        image = MetadataImage.empty()
        for offset, records in batches:
            snapshot = dump(image)
            nxt = image.apply_batch(offset, decode_batch(encode_batch(records)))
            assert dump(image) == snapshot, "replay mutated its input image"
            image = nxt
        images.append(image)
    assert images[0] == images[1] == cluster.image


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_snapshot_of_any_image_rebuilds_it(workload):
    cluster, _ = run(workload)
    image = cluster.image
    restored = MetadataImage.empty().apply_batch(
        image.offset + 1, decode_batch(encode_batch(image.to_records()))
    )
    assert restored.to_records() == image.to_records()
    assert dict(restored.topic_ids) == dict(image.topic_ids)

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.quorum.placement import BrokerLoad, place_replicas, rack_alternating_order

from .metadata_cluster import cluster_of


def spread(counts: dict[int, int]) -> int:
    return max(counts.values()) - min(counts.values())


def run_topics(racks, replication_factor, partition_counts):
    """Place topic after topic, feeding the loads back, like the controller does."""
    loads = {b: BrokerLoad(0, 0) for b in racks}
    placed = []
    for count in partition_counts:
        for replicas in place_replicas(racks, loads, count, replication_factor):
            placed.append(replicas)
            for b in replicas:
                loads[b] = BrokerLoad(loads[b].replicas + 1, loads[b].preferred_leaders)
            lead = replicas[0]
            loads[lead] = BrokerLoad(loads[lead].replicas, loads[lead].preferred_leaders + 1)
            yield placed, loads


def check_balanced(loads):
    assert spread({b: load.replicas for b, load in loads.items()}) <= 1
    assert spread({b: load.preferred_leaders for b, load in loads.items()}) <= 1


@settings(max_examples=300)
@given(
    brokers=st.integers(min_value=1, max_value=12),
    data=st.data(),
    partition_counts=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=25),
)
def test_balanced_without_racks(brokers, data, partition_counts):
    replication_factor = data.draw(st.integers(min_value=1, max_value=brokers))
    racks = dict.fromkeys(range(brokers))
    for placed, loads in run_topics(racks, replication_factor, partition_counts):
        # Balanced after every single partition, not only at the end.
        check_balanced(loads)
        assert len(set(placed[-1])) == replication_factor


@settings(max_examples=300)
@given(
    rack_count=st.integers(min_value=2, max_value=3),
    per_rack=st.integers(min_value=1, max_value=4),
    data=st.data(),
    partition_counts=st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=20),
)
def test_balanced_and_rack_aware_with_equal_racks(rack_count, per_rack, data, partition_counts):
    brokers = rack_count * per_rack
    replication_factor = data.draw(st.integers(min_value=1, max_value=brokers))
    # Any assignment of brokers to equally sized racks, not only an id pattern.
    rack_list = data.draw(st.permutations([f"r{i % rack_count}" for i in range(brokers)]))
    racks = dict(enumerate(rack_list))
    for placed, loads in run_topics(racks, replication_factor, partition_counts):
        check_balanced(loads)
        per_partition = Counter(racks[b] for b in placed[-1])
        assert len(per_partition) == min(replication_factor, rack_count)
        # Beyond one per rack, extra replicas are spread evenly over racks too.
        assert max(per_partition.values()) - min(per_partition.values()) <= 1


@settings(max_examples=200)
@given(
    racks=st.dictionaries(
        st.integers(min_value=0, max_value=30), st.sampled_from(["a", "b", "c", "d"]), min_size=1
    ),
    data=st.data(),
    partitions=st.integers(min_value=1, max_value=40),
)
def test_replicas_on_distinct_racks_even_with_unequal_racks(racks, data, partitions):
    replication_factor = data.draw(st.integers(min_value=1, max_value=len(racks)))
    rack_count = len(set(racks.values()))
    loads = {b: BrokerLoad(0, 0) for b in racks}
    for replicas in place_replicas(racks, loads, partitions, replication_factor):
        assert len(set(replicas)) == replication_factor
        assert set(replicas) <= set(racks)
        assert len({racks[b] for b in replicas}) == min(replication_factor, rack_count)


def test_existing_load_is_taken_into_account():
    racks = dict.fromkeys(range(4))
    loads = {0: BrokerLoad(3, 3), 1: BrokerLoad(3, 3), 2: BrokerLoad(0, 0), 3: BrokerLoad(0, 0)}
    placed = place_replicas(racks, loads, 6, 1)
    assert Counter(r[0] for r in placed) == {2: 3, 3: 3}


def test_rack_alternating_order():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: None}
    # Racks in name order ("" for none), each rack's brokers in id order.
    assert rack_alternating_order(racks) == [6, 1, 3, 5, 2, 4]


def test_placement_is_deterministic():
    racks = {b: f"r{b % 3}" for b in range(9)}
    loads = {b: BrokerLoad(b % 2, b % 3) for b in racks}
    assert place_replicas(racks, loads, 50, 3) == place_replicas(dict(racks), loads, 50, 3)


def test_many_topics_through_the_controller_stay_balanced():
    """The handler counts the load already in the image, topic after topic."""
    cluster = cluster_of(range(5))
    for i, partitions in enumerate([1, 7, 3, 12, 5, 2, 9, 4, 6, 11, 8, 1, 1, 10]):
        cluster.create(f"topic-{i}", partitions, 3)
    replicas = Counter(b for p in cluster.image.all_partitions() for b in p.replicas)
    leaders = Counter(p.leader for p in cluster.image.all_partitions())
    assert set(replicas) == set(leaders) == set(range(5))
    assert max(replicas.values()) - min(replicas.values()) <= 1
    assert max(leaders.values()) - min(leaders.values()) <= 1


def test_fenced_brokers_get_no_new_replicas():
    cluster = cluster_of(range(4))
    cluster.now_ms = cluster.config.broker_session_timeout_ms + 1
    for b in (0, 1, 2):
        cluster.heartbeat(b)
    assert cluster.fence_tick() == (3,)
    topic_id = cluster.create("t", 12, 3)
    used = {b for p in cluster.image.topics[topic_id].partitions for b in p.replicas}
    assert used == {0, 1, 2}

"""The toxiproxy topology on a real three-node cluster: each Network operation does
what it says, and heal() gives the cluster back.

One cluster serves the module (starting one costs seconds); every test heals
in `finally` and waits until the cluster has converged again (one agreed
controller, every broker unfenced), so the next test starts from a whole
cluster. Reachability between nodes is judged with `Network.probe`, a request
through the very proxy a node dials; a cut pair can only look reachable if
bytes really pass, so checks wait for the expected picture with `eventually`
(a probe slowed by load past its timeout is retried, never believed).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import tomllib
import urllib.request
from collections.abc import Iterator

import pytest

from tests.chaos.network import SERVER_PATH, Link, Network
from tests.integration.cluster_harness import (
    ClusterNode,
    LograftCluster,
    eventually,
)

pytestmark = pytest.mark.skipif(
    not SERVER_PATH.exists(), reason="toxiproxy server not built (scripts/setup.sh needs Go)"
)

TOPIC = "net"
# Enough partitions that every node leads at least one.
PARTITIONS = 6
# Waits for the cluster to react, s (elections and fencing take ~1-3 s here).
REACT_S = 30.0
# One produce request of the one-way test, s: its answer is cut, so it times out.
HELD_REQUEST_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def cluster_net(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LograftCluster, Network]]:
    cluster = LograftCluster(
        tmp_path_factory.mktemp("network"),
        3,
        # Leaderships go back to their preferred replicas soon after a fault heals.
        controller={"leader_imbalance_check_interval_ms": 500},
    )
    with Network(cluster) as net:
        try:
            cluster.start()
            cluster.create_topic(TOPIC, PARTITIONS, 3)
            converge(cluster)
            yield cluster, net
        finally:
            print(cluster.logs(lines=80))
            cluster.close()


@pytest.fixture
def healed(cluster_net: tuple[LograftCluster, Network]) -> Iterator[tuple[LograftCluster, Network]]:
    cluster, net = cluster_net
    try:
        yield cluster, net
    finally:
        net.heal()
        assert net.toxics() == {}
        converge(cluster)


def converge(cluster: LograftCluster) -> ClusterNode:
    """One controller that every node names, every broker unfenced in every view, and
    every partition led by its preferred replica with a full ISR."""
    controller = cluster.active_controller(timeout_s=REACT_S)

    def whole() -> bool:
        if any(b["fenced"] for n in cluster for b in n.brokers().values()):
            return False
        doc = controller.topic(TOPIC)
        return doc is None or all(
            p["leader"] == p["replicas"][0] and sorted(p["isr"]) == sorted(p["replicas"])
            for p in doc["partitions"]
        )

    cluster.eventually(whole, REACT_S, "brokers unfenced, preferred leaders, full ISRs")
    return controller


def leaders(cluster: LograftCluster, via: ClusterNode) -> dict[int, int]:
    return cluster.leaders(TOPIC, via)


def log_end(node: ClusterNode, partition: int) -> int:
    doc = node.ok("GET", f"/v1/topics/{TOPIC}/partitions/{partition}/offsets")
    return int(doc["log_end_offset"])


def expect_reachability(net: Network, cut: set[frozenset[int]]) -> None:
    """Every ordered pair answers, except pairs in `cut` (both directions)."""
    expected = {(a, b): frozenset((a, b)) not in cut for a, b in net.reachability()}
    eventually(lambda: net.reachability() == expected, REACT_S, f"reachability {expected}")


def test_every_inter_node_link_has_its_own_proxy_and_clients_stay_direct(cluster_net):
    cluster, net = cluster_net
    names = {link.name for link in net.proxies}
    assert names == {
        f"{k}-{a}-{b}" for k in ("raft", "http") for a in (1, 2, 3) for b in (1, 2, 3) if a != b
    }
    node_ports = cluster.ports
    for node in cluster:
        cfg = tomllib.loads(node.config_path.read_text())
        others = [m for m in (1, 2, 3) if m != node.node_id]
        assert cfg["raft"]["dial"] == {
            str(m): net.listen_address(Link("raft", node.node_id, m)) for m in others
        }
        assert cfg["http"]["dial"] == {
            str(m): net.listen_address(Link("http", node.node_id, m)) for m in others
        }
        for address in [*cfg["raft"]["dial"].values(), *cfg["http"]["dial"].values()]:
            assert int(address.rsplit(":", 1)[1]) not in node_ports
    # What clients are told: every broker's own, direct address.
    brokers = cluster[1].brokers()
    assert {b: brokers[b]["endpoints"]["http"] for b in brokers} == {
        n.node_id: n.url for n in cluster
    }
    assert all(net.reachability(timeout_s=5.0).values())  # generous: a loaded machine


def test_streams_of_a_direction_are_the_forward_upstreams_and_backward_downstreams(cluster_net):
    _cluster, net = cluster_net
    found = net.streams(1, 2)
    assert found == [
        ("raft-1-2", "upstream"),
        ("raft-2-1", "downstream"),
        ("http-1-2", "upstream"),
        ("http-2-1", "downstream"),
    ]
    assert net.streams(3, 1, kinds=("http",)) == [
        ("http-3-1", "upstream"),
        ("http-1-3", "downstream"),
    ]
    with pytest.raises(ValueError):
        net.partition([{1}, {2}])
    with pytest.raises(ValueError):
        net.cut(2, 2)


def test_isolating_the_controller_elects_another_and_fences_it_while_clients_reach_it(healed):
    cluster, net = healed
    old = converge(cluster)
    others = [n for n in cluster if n is not old]
    net.isolate(old.node_id)
    expect_reachability(net, {frozenset((old.node_id, m.node_id)) for m in others})

    def elected() -> ClusterNode | None:
        new = cluster.active_controller(among=others, timeout_s=REACT_S)
        return new if new is not old else None

    new = cluster.eventually(elected, REACT_S, "a controller among the other two")
    cluster.eventually(
        lambda: new.brokers()[old.node_id]["fenced"], REACT_S, f"broker {old.node_id} fenced"
    )
    # Clients still reach the isolated node, which learns it no longer leads.
    cluster.eventually(
        lambda: old.cluster_view()["raft"]["role"] != "leader",
        REACT_S,
        f"node {old.node_id} to step down",
    )


def test_a_one_way_cut_stops_that_direction_only(healed):
    cluster, net = healed
    controller = converge(cluster)
    # Two brokers that are not the controller, so the cut leaves heartbeats alone.
    a, b = (n for n in cluster if n is not controller)
    led = leaders(cluster, controller)
    pa = next(p for p, leader in led.items() if leader == a.node_id)
    pb = next(p for p, leader in led.items() if leader == b.node_id)
    a_end, b_end = log_end(a, pa), log_end(b, pb)
    net.cut(a.node_id, b.node_id, kinds=("http",))

    def produce(via: ClusterNode, partition: int, value: str) -> None:
        # acks=1: the leader answers once it appended, whatever its followers hear.
        body = {"records": [{"value": value, "partition": partition}]}
        # The answer is cut for both of these sends: a timeout is expected.
        with contextlib.suppress(OSError):
            via.post(f"/v1/topics/{TOPIC}/records?acks=1", body, timeout_s=HELD_REQUEST_TIMEOUT_S)

    # a forwards to b (a -> b: cut) and b forwards to a (b -> a: flows).
    senders = [
        threading.Thread(target=produce, args=(a, pb, "a-to-b")),
        threading.Thread(target=produce, args=(b, pa, "b-to-a")),
    ]
    for t in senders:
        t.start()
    cluster.eventually(lambda: log_end(a, pa) == a_end + 1, REACT_S, "b's forward appended at a")
    # The cut was in place before either was sent: a's forward never reaches b.
    assert log_end(b, pb) == b_end
    for t in senders:
        t.join()
    net.heal()

    def forwarded() -> tuple[int] | None:
        body = {"records": [{"value": "after-heal", "partition": pb}]}
        resp = a.post(f"/v1/topics/{TOPIC}/records?acks=1", body)
        return (resp.body["offsets"][0]["offset"],) if resp.status == 200 else None

    # Healed, a's forwards reach b again; the cut one never landed, so the
    # first write after the heal takes the offset the cut one would have.
    (offset,) = cluster.eventually(forwarded, REACT_S, "a forward from a to b")
    assert offset == b_end


def test_a_minority_split_fences_the_minority_and_the_majority_keeps_a_controller(healed):
    cluster, net = healed
    controller = converge(cluster)
    minority = next(n for n in cluster if n is not controller)
    majority = [n for n in cluster if n is not minority]
    net.partition([{minority.node_id}, {n.node_id for n in majority}])
    expect_reachability(net, {frozenset((minority.node_id, m.node_id)) for m in majority})
    cluster.eventually(
        lambda: controller.brokers()[minority.node_id]["fenced"],
        REACT_S,
        f"broker {minority.node_id} fenced",
    )
    # The majority keeps (or, after a spurious election under load, regains) a controller.
    assert cluster.active_controller(among=majority, timeout_s=REACT_S) in majority


def test_a_bridge_node_links_two_sides_that_cannot_hear_each_other(healed):
    _cluster, net = healed
    left, right = net.bridge(2)
    assert (left, right) == ({1}, {3})
    expect_reachability(net, {frozenset((1, 3))})
    net.heal()
    expect_reachability(net, set())


def test_latency_and_bandwidth_slow_the_link(healed):
    _cluster, net = healed
    net.latency(1, 2, 400, kinds=("http",))
    # A request 1 -> 2 carries the delay (its answer 2 -> 1 does not).
    delays = [net.probe(1, 2, timeout_s=5.0) for _ in range(3)]
    assert all(d is not None and d >= 0.4 for d in delays), delays
    net.heal()
    net.bandwidth(3, 1, 8, kinds=("http",))  # node 3's answers to node 1: 8 KB/s
    url = f"http://{net.listen_address(Link('http', 1, 3))}/openapi.json"
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=30.0) as resp:
        size = len(resp.read())
    elapsed = time.monotonic() - started
    assert size > 8 * 1024, "the document must outweigh one second at the limit"
    # toxiproxy paces in chunks: allow a fifth less than size / rate.
    assert elapsed >= size / (8 * 1024) * 0.8, (size, elapsed)


def test_loss_drops_a_share_of_slices_replayably(healed):
    _cluster, net = healed
    net.loss(1, 2, 0.5, random.Random(6), slice_ms=300, kinds=("http",))
    eventually(lambda: net.probe(1, 2, timeout_s=2.0) is None, REACT_S, "a request lost")
    eventually(lambda: net.probe(1, 2, timeout_s=2.0) is not None, REACT_S, "a request through")
    net.heal()
    assert net.toxics() == {}
    assert all(net.reachability(timeout_s=5.0).values())
    # The slices drawn are the seed's: the same rng gives the same loss.
    draws = net.loss_draws["1->2"]
    own = random.Random(random.Random(6).getrandbits(64))
    assert draws == [own.random() < 0.5 for _ in draws]
    assert True in draws and False in draws


def test_a_flapping_link_goes_down_and_up_until_healed(healed):
    _cluster, net = healed
    net.flap(1, 2, 1.0)
    eventually(lambda: net.probe(1, 2, timeout_s=0.4) is None, REACT_S, "the link down")
    eventually(lambda: net.probe(1, 2, timeout_s=0.4) is not None, REACT_S, "the link up")
    eventually(lambda: net.probe(2, 1, timeout_s=0.4) is None, REACT_S, "the link down again")
    net.heal()
    assert all(net.reachability(timeout_s=5.0).values())


def test_heal_restarts_a_toxiproxy_that_does_not_answer(healed):
    cluster, net = healed
    net.isolate(3)
    # A server that answers nothing (it wedged once: see network.py): here, gone.
    old_pid = net.server.pid
    net.server.stop()
    net.heal()
    assert net.server.pid != old_pid
    assert net.toxics() == {}
    eventually(lambda: all(net.reachability().values()), REACT_S, "every link through again")
    converge(cluster)

"""Network faults through the toxiproxy topology (tests/chaos/network.py; issue 6).

Every scenario here declares `needs_network`, so `ctx.network` is the
cluster's `Network`. Each picks its victims with `ctx.rng`, waits for the
cluster to react to the fault where a reaction is due (a new controller, the
victim fenced, leaderships moved), holds the fault for a while so the
workload runs against it, heals every link, and returns once every node is
unfenced and back in the ISR of every partition it replicates.

A node cut off from every other node while clients still reach it is
recorded as an `Isolation` (`ctx.facts["isolations"]`): the checker holds
that nothing it was asked to write inside that window was acknowledged (with
acks=all and min_insync_replicas 2 a lone replica must not acknowledge). The
window opens once every cut is in place and closes before the heal, so an
acknowledgement the healed links let through cannot fall inside it.

`restart-stale-leader` records a `StaleWindow` (`ctx.facts["stale_windows"]`)
instead: a restarted node, its Raft links cut, on its restored metadata; the
checker holds that it acknowledged nothing for that partition in the window.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.chaos.history import Isolation, LeaderKill, StaleWindow
from tests.chaos.network import Network
from tests.chaos.scenario import ChaosContext, Scenario, register
from tests.chaos.workload import HttpWriter, Workload
from tests.integration.cluster_harness import ClusterNode

# How long a fault is held once the cluster has reacted to it, s: long
# enough for the workload to run against it (fencing takes
# broker_session_timeout_ms, 1.5 s). A dwell, not a wait for a condition.
FAULT_HOLD_S_MIN = 2.0
FAULT_HOLD_S_MAX = 4.0
# A degraded link (loss, latency, flapping) needs no reaction to wait for, and
# does its harm by lasting: it is held this long, s.
DEGRADED_HOLD_S_MIN = 5.0
DEGRADED_HOLD_S_MAX = 8.0
# A new controller, a victim fenced, leaderships moved; the healed cluster whole, s.
REACT_WAIT_S = 30.0
HEAL_WAIT_S = 60.0
# Latency on the replication links, ms, and its jitter (+-), ms.
SLOW_LATENCY_MS_MIN = 100
SLOW_LATENCY_MS_MAX = 400
SLOW_JITTER_MS = 50
# Bandwidth of a leader's answers to its followers, KB/s (a fetch answer is
# up to replica_fetch_partition_max_bytes, 1 MiB).
SLOW_KBYTES_PER_S_MIN = 32
SLOW_KBYTES_PER_S_MAX = 256
# Emulated loss: the share of slices (Network.loss) in which a direction drops everything.
LOSS_RATE_MIN = 0.1
LOSS_RATE_MAX = 0.4
# A flapping link is down, then up, for half a period each, s.
FLAP_PERIOD_S_MIN = 0.6
FLAP_PERIOD_S_MAX = 3.0
# Successive random splits of the split scenario.
SPLITS_MIN = 2
SPLITS_MAX = 3
# restart-stale-leader: acks=1 probes the stale window must have seen before
# it closes (a count), and how long the probe thread may take to stop, s.
STALE_PROBES_MIN = 10
PROBE_STOP_WAIT_S = 10.0
# Its nodes snapshot their metadata this often, ms (and after 2 entries), so the
# victim restarts from a snapshot that names it leader (as
# tests/integration/test_stale_leader_restart.py does for its broker).
STALE_SNAPSHOT_EVERY_MS = 100


def _net(ctx: ChaosContext) -> Network:
    assert isinstance(ctx.network, Network), "a network scenario needs ctx.network"
    ctx.network.log = ctx.log  # each cut, loss and heal in the run's log
    return ctx.network


def _hold(ctx: ChaosContext, what: str, *, degraded: bool = False) -> None:
    low, high = (
        (DEGRADED_HOLD_S_MIN, DEGRADED_HOLD_S_MAX)
        if degraded
        else (FAULT_HOLD_S_MIN, FAULT_HOLD_S_MAX)
    )
    seconds = ctx.rng.uniform(low, high)
    ctx.log(f"holding {what} for {seconds:.1f}s")
    time.sleep(seconds)  # the fault's duration (see FAULT_HOLD_S_MIN), not synchronisation


def _node_ids(ctx: ChaosContext) -> list[int]:
    return sorted(ctx.cluster.nodes)


def _leaders(ctx: ChaosContext, via: ClusterNode) -> dict[tuple[str, int], int]:
    return {
        (topic, p): leader
        for topic in ctx.topics
        for p, leader in ctx.cluster.leaders(topic, via).items()
    }


@contextmanager
def _isolated(ctx: ChaosContext, node_id: int) -> Iterator[None]:
    """Record the block as an isolation of `node_id` (its cuts are already in place)."""
    began = time.monotonic()
    try:
        yield
    finally:
        ctx.facts.setdefault("isolations", []).append(Isolation(node_id, began, time.monotonic()))


def _wait_controller_among(ctx: ChaosContext, node_ids: set[int]) -> ClusterNode:
    """A controller in `node_ids` that all of `node_ids` agree on."""
    among = [ctx.cluster[n] for n in sorted(node_ids)]

    def elected() -> ClusterNode | None:
        controller = ctx.cluster.active_controller(among=among, timeout_s=REACT_WAIT_S)
        return controller if controller.node_id in node_ids else None

    controller = ctx.cluster.eventually(
        elected, REACT_WAIT_S, f"a controller in {sorted(node_ids)}"
    )
    ctx.log(f"node {controller.node_id} is the active controller of {sorted(node_ids)}")
    return controller


def _wait_fenced_and_replaced(ctx: ChaosContext, victim: int, view: ClusterNode) -> None:
    """`view` (a node on the majority side) has fenced `victim` and moved its leaderships."""

    def replaced() -> bool:
        if not view.brokers()[victim]["fenced"]:
            return False
        return all(leader >= 0 and leader != victim for leader in _leaders(ctx, view).values())

    ctx.cluster.eventually(
        replaced, REACT_WAIT_S, f"node {victim} fenced and its leaderships moved"
    )


def _heal_and_wait_whole(ctx: ChaosContext) -> None:
    """Heal every link; return once every broker is unfenced and in every ISR it belongs to."""
    _net(ctx).heal()
    ctx.cluster.active_controller(timeout_s=HEAL_WAIT_S)

    def whole() -> bool:
        via = ctx.cluster.running()[0]
        if any(b["fenced"] for b in via.brokers().values()):
            return False
        for topic in ctx.topics:
            doc = via.topic(topic)
            assert doc is not None, f"topic {topic} is gone"
            for part in doc["partitions"]:
                if part["leader"] < 0 or sorted(part["isr"]) != sorted(part["replicas"]):
                    return False
        return True

    ctx.cluster.eventually(whole, HEAL_WAIT_S, "every broker unfenced and in every ISR")
    ctx.log("healed: every broker unfenced and in every ISR")


def _pick_leader(ctx: ChaosContext, via: ClusterNode, *, not_node: int | None) -> tuple[int, int]:
    """(partition, leader) of the first topic, chosen by the rng, led by another node than
    `not_node` when one exists."""
    leaders = ctx.cluster.leaders(ctx.topics[0], via)
    choices = sorted(p for p, leader in leaders.items() if leader >= 0 and leader != not_node)
    choices = choices or sorted(p for p, leader in leaders.items() if leader >= 0)
    assert choices, f"no partition of {ctx.topics[0]} has a leader"
    partition = ctx.rng.choice(choices)
    return partition, leaders[partition]


# -- scenarios ----------------------------------------------------------------------------


def partition_controller(ctx: ChaosContext) -> None:
    """The active controller loses the other two; they elect another and fence it."""
    net = _net(ctx)
    controller = ctx.cluster.active_controller()
    victim = controller.node_id
    others = set(_node_ids(ctx)) - {victim}
    ctx.facts.update(victim=victim)
    net.isolate(victim)
    with _isolated(ctx, victim):
        new = _wait_controller_among(ctx, others)
        _wait_fenced_and_replaced(ctx, victim, new)
        _hold(ctx, f"the old controller {victim} cut off")
    _heal_and_wait_whole(ctx)


def isolate_leader(ctx: ChaosContext) -> None:
    """A partition leader (not the controller, when another leads) loses its followers but
    not its clients: it must stop acknowledging, and rejoin truncated to the new leader."""
    net = _net(ctx)
    controller = ctx.cluster.active_controller()
    partition, victim = _pick_leader(ctx, controller, not_node=controller.node_id)
    others = set(_node_ids(ctx)) - {victim}
    ctx.facts.update(victim=victim, partition=partition)
    net.isolate(victim)
    ctx.log(f"isolated node {victim}, leader of partition {partition}, from the other nodes")
    with _isolated(ctx, victim):
        survivor = _wait_controller_among(ctx, others)
        _wait_fenced_and_replaced(ctx, victim, survivor)
        _hold(ctx, f"node {victim} isolated")
    _heal_and_wait_whole(ctx)


def majority_minority_splits(ctx: ChaosContext) -> None:
    """A few random splits in a row (a lone node against the other two), each held until the
    majority has fenced the minority, then healed."""
    net = _net(ctx)
    splits = []
    for _ in range(ctx.rng.randint(SPLITS_MIN, SPLITS_MAX)):
        minority = ctx.rng.choice(_node_ids(ctx))
        majority = set(_node_ids(ctx)) - {minority}
        splits.append(minority)
        net.partition([{minority}, majority])
        ctx.log(f"split: [{minority}] | {sorted(majority)}")
        with _isolated(ctx, minority):
            controller = _wait_controller_among(ctx, majority)
            _wait_fenced_and_replaced(ctx, minority, controller)
            _hold(ctx, f"node {minority} in the minority")
        _heal_and_wait_whole(ctx)
    ctx.facts.update(minorities=splits)


def bridge(ctx: ChaosContext) -> None:
    """Two nodes cannot hear each other; the third hears both (Jepsen's bridge)."""
    net = _net(ctx)
    middle = ctx.rng.choice(_node_ids(ctx))
    left, right = net.bridge(middle)
    ctx.facts.update(bridge=middle, sides=[sorted(left), sorted(right)])
    ctx.log(f"bridge: {sorted(left)} | {sorted(right)}, both see node {middle}")
    # Whoever ends up leading, the bridge must still give the cluster one controller.
    ctx.cluster.active_controller(timeout_s=REACT_WAIT_S)
    _hold(ctx, f"the bridge through node {middle}")
    _heal_and_wait_whole(ctx)


def asymmetric_loss(ctx: ChaosContext) -> None:
    """Loss one way between a partition leader and one of its followers, the other way clean."""
    net = _net(ctx)
    via = ctx.cluster.active_controller()
    partition, leader = _pick_leader(ctx, via, not_node=None)
    follower = ctx.rng.choice([n for n in _node_ids(ctx) if n != leader])
    a, b = (leader, follower) if ctx.rng.random() < 0.5 else (follower, leader)
    rate = round(ctx.rng.uniform(LOSS_RATE_MIN, LOSS_RATE_MAX), 2)
    ctx.facts.update(lossy=f"{a}->{b}", rate=rate, partition=partition)
    net.loss(a, b, rate, ctx.rng)
    _hold(ctx, f"loss {a} -> {b} at {rate}", degraded=True)
    _heal_and_wait_whole(ctx)


def slow_replication(ctx: ChaosContext) -> None:
    """High latency and a bandwidth limit on every replication link (node-to-node HTTP: the
    followers' fetches and the leaders' answers); Raft links untouched."""
    net = _net(ctx)
    latency = ctx.rng.randint(SLOW_LATENCY_MS_MIN, SLOW_LATENCY_MS_MAX)
    rate = ctx.rng.randint(SLOW_KBYTES_PER_S_MIN, SLOW_KBYTES_PER_S_MAX)
    ctx.facts.update(latency_ms=latency, kbytes_per_s=rate)
    for a in _node_ids(ctx):
        for b in _node_ids(ctx):
            if a != b:
                net.latency(a, b, latency, SLOW_JITTER_MS, kinds=("http",))
                net.bandwidth(a, b, rate, kinds=("http",))
    _hold(ctx, f"replication links at {latency} +- {SLOW_JITTER_MS} ms, {rate} KB/s", degraded=True)
    _heal_and_wait_whole(ctx)


def flapping_links(ctx: ChaosContext) -> None:
    """One or two node pairs whose links go down and up, over and over."""
    net = _net(ctx)
    all_pairs = list(itertools.combinations(_node_ids(ctx), 2))
    pairs = ctx.rng.sample(all_pairs, ctx.rng.randint(1, 2))
    periods = []
    for a, b in pairs:
        period = round(ctx.rng.uniform(FLAP_PERIOD_S_MIN, FLAP_PERIOD_S_MAX), 2)
        periods.append(period)
        net.flap(a, b, period)
    ctx.facts.update(
        flapping=[f"{a}<->{b} every {p}s" for (a, b), p in zip(pairs, periods, strict=True)]
    )
    _hold(ctx, "flapping links", degraded=True)
    _heal_and_wait_whole(ctx)


def leader_unheard(ctx: ChaosContext) -> None:
    """A partition leader's outgoing bytes to every other node are cut; it still hears them.
    Its followers' fetches arrive but get no answer, its heartbeats and ISR changes never
    reach the controller: it must be fenced and replaced, and acknowledge nothing alone."""
    net = _net(ctx)
    controller = ctx.cluster.active_controller()
    partition, victim = _pick_leader(ctx, controller, not_node=controller.node_id)
    others = set(_node_ids(ctx)) - {victim}
    ctx.facts.update(victim=victim, partition=partition)
    for m in sorted(others):
        net.cut(victim, m)
    ctx.log(f"cut every byte from node {victim} (leader of partition {partition}) to the others")
    with _isolated(ctx, victim):
        survivor = _wait_controller_among(ctx, others)
        _wait_fenced_and_replaced(ctx, victim, survivor)
        _hold(ctx, f"node {victim} unheard")
    _heal_and_wait_whole(ctx)


def quorum_isolated(ctx: ChaosContext) -> None:
    """A partition leader loses the Raft quorum, and the controller stops hearing it over
    HTTP (one way: the controller's own calls still arrive). The controller fences it and
    moves its leaderships, which it cannot learn: it believes it still leads, and clients
    still reach it. Its followers, which do learn, must stop making its writes count."""
    net = _net(ctx)
    controller = ctx.cluster.active_controller()
    partition, victim = _pick_leader(ctx, controller, not_node=controller.node_id)
    ctx.facts.update(victim=victim, partition=partition)
    net.isolate(victim, kinds=("raft",))
    net.cut(victim, controller.node_id, kinds=("http",))
    ctx.log(
        f"cut node {victim} (leader of partition {partition}) off the metadata quorum, "
        f"and its calls to the controller {controller.node_id}"
    )
    _wait_fenced_and_replaced(ctx, victim, controller)
    _hold(ctx, f"node {victim} on stale metadata")
    _heal_and_wait_whole(ctx)


def _readyz(node: ClusterNode) -> dict[str, object]:
    body = node.get("/readyz").body
    assert isinstance(body, dict), body
    return body


def _registered_not_caught_up(node: ClusterNode) -> bool:
    body = _readyz(node)
    return body.get("metadata_offset_to_reach") is not None and not body["metadata_caught_up"]


def restart_stale_leader(ctx: ChaosContext) -> None:
    """SIGKILL a partition leader; once a new leader acknowledges writes (acks=all writers
    keep running), restart the old one with its Raft links cut, so its metadata is the
    image it restored from its snapshot, which names it leader. While it is registered
    but not caught up, acks=1 probes pinned to it write that partition: it must
    acknowledge none (issue 13)."""
    net = _net(ctx)
    workload = ctx.workload
    assert isinstance(workload, Workload), "restart-stale-leader runs probes into the workload"
    topic = ctx.topics[0]
    controller = ctx.cluster.active_controller()
    partition, victim = _pick_leader(ctx, controller, not_node=controller.node_id)
    node = ctx.cluster[victim]
    led = tuple(
        sorted(p for p, ld in ctx.cluster.leaders(topic, controller).items() if ld == victim)
    )
    ctx.facts.update(victim=victim, partition=partition)
    snapshot = node.spec.data_dir / "metadata" / "raft.snapshot"
    ctx.cluster.eventually(
        lambda: snapshot.exists() and topic.encode() in snapshot.read_bytes(),
        REACT_WAIT_S,
        f"node {victim} wrote a metadata snapshot naming {topic}",
    )
    killed = time.monotonic()
    node.kill()
    ctx.facts.setdefault("leader_kills", []).append(LeaderKill(victim, led, killed))
    ctx.log(f"SIGKILL node {victim}, leader of partitions {list(led)}")

    survivors = [n for n in ctx.cluster.running() if n.node_id != victim]

    def moved() -> bool:
        return all(0 <= ld != victim for n in survivors for ld in _leaders(ctx, n).values())

    ctx.cluster.eventually(moved, REACT_WAIT_S, f"leaders away from node {victim}")
    ctx.cluster.eventually(
        lambda: workload.recorder.acked_since(partition, killed),
        REACT_WAIT_S,
        f"the new leader of partition {partition} acknowledging writes",
        interval_s=0.1,
    )
    new_leader = ctx.cluster.leaders(topic, survivors[0])[partition]
    ctx.log(f"node {new_leader} leads partition {partition} and acknowledges writes")

    net.isolate(victim, kinds=("raft",))
    node.start()
    ctx.cluster.eventually(
        lambda: _registered_not_caught_up(node),
        REACT_WAIT_S,
        f"node {victim} registered with its metadata not caught up",
    )
    stale_view = ctx.cluster.leaders(topic, node).get(partition)
    ctx.facts.update(new_leader=new_leader, stale_view_leader=stale_view)
    # The hazard is real: the image it restored still names it leader.
    assert stale_view == victim, f"node {victim}'s restored metadata names {stale_view} leader"
    ctx.log(
        f"node {victim} restarted off the Raft quorum; its metadata names node {stale_view} "
        f"leader of partition {partition}"
    )

    stop = threading.Event()
    errors: list[str] = []
    probe = HttpWriter(
        f"s{victim}",
        node=victim,
        url=node.url,
        topic=topic,
        partitions=[partition],
        settings=dataclasses.replace(workload.settings, acks="1"),
        recorder=workload.recorder,
        rng=random.Random(f"{ctx.rng.random()}:stale-probe"),
        stop=stop,
        errors=errors,
        request_timeout_ms=workload.settings.probe_request_timeout_ms,
    )

    def probes_sent() -> int:
        sends, _reads = workload.recorder.snapshot()
        return sum(1 for s in sends if s.writer == probe.worker)

    opened = time.monotonic()
    probe.start()
    try:
        _hold(ctx, f"node {victim} on stale metadata, acks=1 probes pinned to it")
        ctx.cluster.eventually(
            lambda: probes_sent() >= STALE_PROBES_MIN,
            REACT_WAIT_S,
            f"{STALE_PROBES_MIN} acks=1 probes answered by node {victim}",
            interval_s=0.1,
        )
    finally:
        stop.set()
        probe.join(PROBE_STOP_WAIT_S)
    closed = time.monotonic()
    assert not probe.is_alive(), f"the stale probe did not stop within {PROBE_STOP_WAIT_S}s"
    assert not errors, f"the stale probe failed: {errors}"
    # The window was stale from end to end: its metadata never caught up while held.
    assert _registered_not_caught_up(node), f"node {victim} caught up with its Raft links cut"
    ctx.facts.setdefault("stale_windows", []).append(StaleWindow(victim, partition, opened, closed))
    ctx.facts.update(stale_probes=probes_sent())
    ctx.log(f"closed the stale window after {probes_sent()} probes; healing")
    _heal_and_wait_whole(ctx)
    ctx.cluster.wait_ready([node], timeout_s=HEAL_WAIT_S)


def _network(
    name: str, description: str, inject: Callable[[ChaosContext], None], *, fast: bool = False
) -> None:
    register(Scenario(name, description, inject, needs_network=True, fast=fast))


_network(
    "partition-controller",
    "cut the active controller off from the other two nodes (clients still reach it), heal",
    partition_controller,
)
_network(
    "isolate-leader",
    "cut a partition leader off from its followers but not from clients, heal",
    isolate_leader,
    fast=True,
)
_network(
    "majority-minority-split",
    "two or three random splits in a row, one node against the other two, healed between",
    majority_minority_splits,
)
_network("bridge", "two nodes cannot hear each other; the third hears both", bridge)
_network(
    "asymmetric-loss",
    "emulated packet loss one way between a leader and a follower",
    asymmetric_loss,
)
_network(
    "slow-replication",
    "high latency with jitter and a bandwidth limit on every replication link",
    slow_replication,
)
_network("flapping-links", "one or two node pairs whose links go down and up", flapping_links)
_network(
    "quorum-isolated",
    "a partition leader cut off the Raft quorum and unheard by the controller: fenced and "
    "replaced, it still believes it leads",
    quorum_isolated,
)
register(
    Scenario(
        "restart-stale-leader",
        "SIGKILL a partition leader; while a new one takes writes, restart it off the Raft "
        "quorum (its metadata stale) with acks=1 probes pinned to it: it must acknowledge none",
        restart_stale_leader,
        needs_network=True,
        fast=True,
        raft={
            "log_compaction_min_entries": 2,
            "log_compaction_min_time_ms": STALE_SNAPSHOT_EVERY_MS,
        },
    )
)
_network(
    "leader-unheard",
    "a leader's bytes to the other nodes are cut one way; it still hears them",
    leader_unheard,
)

"""Process faults: SIGKILL, SIGSTOP and a torn segment tail (issue 6).

Each scenario picks its victims with `ctx.rng`, holds the fault for a while
so the workload runs against the damaged cluster, then heals (restarts or
resumes every victim) and returns once every victim is ready and back in the
ISR of every partition of the workload's topics. Kills of partition leaders
are recorded as `LeaderKill` facts (`ctx.facts["leader_kills"]`), and a
SIGSTOP as a `Stall` of the partitions the stopped node did not lead
(`ctx.facts["stalls"]`); the checker holds both to the failover budget.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.chaos.history import LeaderKill, Stall
from tests.chaos.replica_logs import partition_dir, segment_files
from tests.chaos.scenario import ChaosContext, Scenario, register
from tests.integration.cluster_harness import ClusterNode

# How long a fault is held before it is healed, in seconds: long enough for
# fencing (broker_session_timeout_ms 1500) and a new leader to serve, so the
# workload really runs against the damaged cluster. A dwell, not a wait for a
# condition: the scenario waits for the conditions (new leader, fenced) first.
FAULT_HOLD_S_MIN = 2.0
FAULT_HOLD_S_MAX = 4.0
# New leaders, a new controller, a restarted node rejoining every ISR, in s.
FAILOVER_WAIT_S = 30.0
REJOIN_WAIT_S = 60.0
# Bytes cut from (or garbled at) the end of the torn segment: up to a few
# records' worth, so the cut usually lands inside a batch.
TORN_TAIL_BYTES_MAX = 200


def _hold(ctx: ChaosContext, what: str) -> None:
    seconds = ctx.rng.uniform(FAULT_HOLD_S_MIN, FAULT_HOLD_S_MAX)
    ctx.log(f"holding {what} for {seconds:.1f}s")
    time.sleep(seconds)  # the fault's duration (see FAULT_HOLD_S_MIN), not synchronisation


def _others(ctx: ChaosContext, victims: set[int]) -> list[ClusterNode]:
    return [n for n in ctx.cluster.running() if n.node_id not in victims]


def _leaders(ctx: ChaosContext, via: ClusterNode) -> dict[tuple[str, int], int]:
    return {
        (topic, p): leader
        for topic in ctx.topics
        for p, leader in ctx.cluster.leaders(topic, via).items()
    }


def _led_by(ctx: ChaosContext, node_id: int, via: ClusterNode) -> tuple[int, ...]:
    topic = ctx.topics[0]
    return tuple(
        sorted(
            p for (t, p), leader in _leaders(ctx, via).items() if t == topic and leader == node_id
        )
    )


def _record_leader_kill(
    ctx: ChaosContext, node_id: int, partitions: tuple[int, ...], at_s: float
) -> None:
    if partitions:
        ctx.facts.setdefault("leader_kills", []).append(LeaderKill(node_id, partitions, at_s))


def _wait_new_leaders(ctx: ChaosContext, victims: set[int]) -> None:
    """Every partition is led by a node outside `victims`, as the survivors see it."""
    survivors = _others(ctx, victims)

    def moved() -> bool:
        return all(
            leader >= 0 and leader not in victims
            for n in survivors
            for leader in _leaders(ctx, n).values()
        )

    ctx.cluster.eventually(moved, FAILOVER_WAIT_S, f"leaders away from nodes {sorted(victims)}")


def _wait_rejoined(ctx: ChaosContext, nodes: set[int]) -> None:
    """`nodes` are ready and in the ISR of every partition they replicate."""
    ctx.cluster.wait_ready([ctx.cluster[n] for n in sorted(nodes)], timeout_s=REJOIN_WAIT_S)

    def in_isr() -> bool:
        via = ctx.cluster.running()[0]
        for topic in ctx.topics:
            doc = via.topic(topic)
            assert doc is not None
            for part in doc["partitions"]:
                if any(n in part["replicas"] and n not in part["isr"] for n in nodes):
                    return False
        return True

    ctx.cluster.eventually(in_isr, REJOIN_WAIT_S, f"nodes {sorted(nodes)} back in every ISR")


def _restart(ctx: ChaosContext, nodes: set[int]) -> None:
    for n in sorted(nodes):
        ctx.cluster[n].start()
    ctx.log(f"restarted nodes {sorted(nodes)}")
    _wait_rejoined(ctx, nodes)


def _pick_leader(ctx: ChaosContext) -> tuple[int, int]:
    """(partition, its leader) of the first topic, chosen by the rng."""
    via = ctx.cluster.running()[0]
    leaders = ctx.cluster.leaders(ctx.topics[0], via)
    partition = ctx.rng.choice(sorted(leaders))
    return partition, leaders[partition]


# -- scenarios ----------------------------------------------------------------------------


def kill_leader(ctx: ChaosContext) -> None:
    partition, victim = _pick_leader(ctx)
    led = _led_by(ctx, victim, ctx.cluster.running()[0])
    ctx.facts.update(victim=victim, partition=partition)
    at = time.monotonic()
    ctx.cluster[victim].kill()
    _record_leader_kill(ctx, victim, led, at)
    ctx.log(f"SIGKILL node {victim}, leader of partitions {list(led)}")
    _wait_new_leaders(ctx, {victim})
    _hold(ctx, f"node {victim} down")
    _restart(ctx, {victim})


def kill_controller(ctx: ChaosContext) -> None:
    controller = ctx.cluster.active_controller()
    victim = controller.node_id
    led = _led_by(ctx, victim, controller)
    ctx.facts.update(victim=victim)
    at = time.monotonic()
    controller.kill()
    _record_leader_kill(ctx, victim, led, at)
    ctx.log(f"SIGKILL node {victim}, the active controller (leader of {list(led)})")
    new = ctx.cluster.active_controller(among=_others(ctx, {victim}), timeout_s=FAILOVER_WAIT_S)
    ctx.log(f"node {new.node_id} is the active controller")
    _wait_new_leaders(ctx, {victim})
    _hold(ctx, f"node {victim} down")
    _restart(ctx, {victim})


def kill_two_nodes(ctx: ChaosContext) -> None:
    victims = set(ctx.rng.sample(sorted(n.node_id for n in ctx.cluster), 2))
    ctx.facts.update(victims=sorted(victims))
    for n in sorted(victims):
        ctx.cluster[n].kill()
    ctx.log(f"SIGKILL nodes {sorted(victims)} together: no quorum, no acks=all")
    _hold(ctx, f"nodes {sorted(victims)} down")
    _restart(ctx, victims)


def pause_leader(ctx: ChaosContext) -> None:
    partition, victim = _pick_leader(ctx)
    _pause(ctx, victim, f"leader of partition {partition}")


def pause_controller(ctx: ChaosContext) -> None:
    victim = ctx.cluster.active_controller().node_id
    led = _led_by(ctx, victim, ctx.cluster[victim])
    _pause(ctx, victim, f"the active controller, leader of partitions {list(led)}")


def _pause(ctx: ChaosContext, victim: int, role: str) -> None:
    """SIGSTOP `victim` until it is fenced and replaced, hold, SIGCONT, wait for it to rejoin."""
    controller = ctx.cluster.active_controller().node_id
    ctx.facts.update(victim=victim, controller=controller)
    node = ctx.cluster[victim]
    led = set(_led_by(ctx, victim, node))
    elsewhere = tuple(p for p in ctx.cluster.leaders(ctx.topics[0], node) if p not in led)
    at = time.monotonic()
    node.pause()
    if elsewhere:
        ctx.facts.setdefault("stalls", []).append(Stall(victim, elsewhere, at))
    ctx.log(f"SIGSTOP node {victim}, {role} (controller: {controller})")
    try:
        survivor = _others(ctx, {victim})[0]

        def fenced() -> bool:
            return bool(survivor.brokers()[victim]["fenced"])

        # Longer than the broker session: the controller must fence it and
        # move its leaderships while it cannot answer.
        ctx.cluster.eventually(fenced, FAILOVER_WAIT_S, f"node {victim} fenced while stopped")
        _wait_new_leaders(ctx, {victim})
        _hold(ctx, f"node {victim} stopped")
    finally:
        node.resume()
    ctx.log(f"SIGCONT node {victim}")
    _wait_rejoined(ctx, {victim})


def _tear_tail(path: Path, ctx: ChaosContext) -> str:
    size = path.stat().st_size
    cut = ctx.rng.randint(1, min(size, TORN_TAIL_BYTES_MAX))
    if ctx.rng.random() < 0.5:
        os.truncate(path, size - cut)
        return f"truncated the last {cut} of {size} bytes"
    with path.open("r+b") as f:
        f.seek(size - cut)
        f.write(ctx.rng.randbytes(cut))
    return f"garbled the last {cut} of {size} bytes"


def torn_tail_restart(ctx: ChaosContext) -> None:
    victim = ctx.rng.choice(sorted(n.node_id for n in ctx.cluster))
    node = ctx.cluster[victim]
    led = _led_by(ctx, victim, _others(ctx, {victim})[0])
    at = time.monotonic()
    node.kill()
    _record_leader_kill(ctx, victim, led, at)
    topic = ctx.topics[0]
    candidates = [
        (p, files[-1])
        for p in sorted(ctx.cluster.leaders(topic, _others(ctx, {victim})[0]))
        if (files := segment_files(partition_dir(node.spec.data_dir, topic, p)))
        and files[-1].stat().st_size > 0
    ]
    assert candidates, f"node {victim} has no non-empty segment of {topic} to tear"
    partition, segment = ctx.rng.choice(candidates)
    how = _tear_tail(segment, ctx)
    ctx.facts.update(victim=victim, partition=partition, segment=segment.name, torn=how)
    ctx.log(f"SIGKILL node {victim}; {topic}-{partition}/{segment.name}: {how}")
    if led:
        _wait_new_leaders(ctx, {victim})
    _restart(ctx, {victim})


register(
    Scenario("kill-leader", "SIGKILL a partition leader, restart it later", kill_leader, fast=True)
)
register(
    Scenario("kill-controller", "SIGKILL the active controller, restart it later", kill_controller)
)
register(
    Scenario("kill-two-nodes", "SIGKILL two of three nodes at once, restart both", kill_two_nodes)
)
register(
    Scenario(
        "pause-leader",
        "SIGSTOP a partition leader until it is fenced and replaced, then SIGCONT",
        pause_leader,
    )
)
register(
    Scenario(
        "pause-controller",
        "SIGSTOP the active controller until it is fenced and replaced, then SIGCONT",
        pause_controller,
        # the regression test of the heartbeat timeout (lograft/node/broker_agent.py)
        fast=True,
    )
)
register(
    Scenario(
        "torn-tail-restart",
        "SIGKILL a node, truncate or garble the tail of one of its active segments, "
        "restart it: it must recover and rejoin",
        torn_tail_restart,
        fast=True,
    )
)

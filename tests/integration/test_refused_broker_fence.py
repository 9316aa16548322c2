"""SIGKILL of a partition leader that is not the active controller: the
controller fences its broker as soon as the node's Raft port refuses
(sessions.py, "one rule for every voter"), not at the session timeout;
restarted, the broker is unfenced as after any fence.

The broker session is raised to 30 s, so a fence within `FENCE_BOUND_S`
can only come from the refusal. Every wait polls a condition until its
deadline."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration.cluster_harness import LograftCluster

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

SESSION_MS = 30_000
# Far under the session: the refusal path takes a few hundred ms on a quiet
# machine; the rest is margin for a loaded one.
FENCE_BOUND_S = SESSION_MS / 1000 / 3

Factory = Callable[..., LograftCluster]


def test_sigkill_of_a_follower_node_fences_its_broker_before_its_session_ends(
    lograft_cluster: Factory,
) -> None:
    cluster = lograft_cluster(controller={"broker_session_timeout_ms": SESSION_MS})
    cluster.start(timeout_s=60)
    cluster.create_topic("t", partitions=3, replication_factor=3)
    # Raft leadership may move back to its preferred node after the start:
    # the controller is read again right before the kill.
    controller = cluster.active_controller(timeout_s=30)
    observer = controller

    def led_elsewhere() -> dict[int, list[int]] | None:
        by_leader: dict[int, list[int]] = {}
        for partition, leader in cluster.leaders("t", via=observer).items():
            if leader not in (controller.node_id, -1):
                by_leader.setdefault(leader, []).append(partition)
        return by_leader or None

    by_leader = cluster.eventually(led_elsewhere, 20, "a partition led off the controller")
    victim_id, led = min(by_leader.items())
    victim = next(n for n in cluster if n.node_id == victim_id)
    victim.kill()

    def fenced_and_moved() -> bool:
        doc = observer.topic("t")
        assert doc is not None
        parts = {p["partition"]: p for p in doc["partitions"]}
        return observer.brokers()[victim_id]["fenced"] and all(
            parts[p]["leader"] not in (victim_id, -1) and victim_id not in parts[p]["isr"]
            for p in led
        )

    cluster.eventually(fenced_and_moved, FENCE_BOUND_S, "the dead broker fenced, leaders moved")
    survivors = [n for n in cluster if n is not victim]
    assert cluster.active_controller(among=survivors, timeout_s=5) is controller, (
        "the controller changed: this was not the path under test"
    )

    victim.restart()
    cluster.eventually(
        lambda: not observer.brokers()[victim_id]["fenced"], 60, "the restarted broker unfenced"
    )

"""SIGKILL of the active controller's node: a new controller well before any
election timeout could have run out (raft/peer_loss.py).

The cluster runs with an election timeout of 6-7 s, so a new active
controller within `EARLY_BOUND_S` (half the minimum) can only come from the
early election a refused Raft port triggers; and the dead node's broker must
be fenced and out of every ISR within the same bound, which only the
refusal can do (its broker session alone is 1.5 s, but it would start at the
election). Every wait polls a condition until its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.integration.cluster_harness import LograftCluster

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ELECTION_TIMEOUT_MIN_MS = 6000
LONG_ELECTION = {
    "election_timeout_min_ms": ELECTION_TIMEOUT_MIN_MS,
    "election_timeout_max_ms": 7000,
    "connection_timeout_ms": 7000,
}
# Well under the election timeout's minimum: the early election takes a few
# hundred ms on a quiet machine; the rest is margin for a loaded one.
EARLY_BOUND_S = ELECTION_TIMEOUT_MIN_MS / 1000 / 2

Factory = Callable[..., LograftCluster]


def test_sigkill_of_the_active_controller_elects_another_before_any_timeout(
    lograft_cluster: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = lograft_cluster(raft=LONG_ELECTION)
    cluster.start(timeout_s=60)
    old = cluster.active_controller(timeout_s=30)
    old_term = old.cluster_view()["raft"]["term"]
    cluster.create_topic("t", partitions=3, replication_factor=3, via=old)
    survivors = [n for n in cluster if n is not old]
    observer = survivors[0]

    def led_by_old() -> list[int]:
        doc = observer.topic("t")
        assert doc is not None
        return [p["partition"] for p in doc["partitions"] if p["leader"] == old.node_id]

    partitions = cluster.eventually(led_by_old, 20, "the controller's node to lead a partition")

    t0 = time.monotonic()
    old.kill()
    new = cluster.active_controller(among=survivors, timeout_s=EARLY_BOUND_S)
    elected_s = time.monotonic() - t0

    def moved() -> bool:
        doc = observer.topic("t")
        assert doc is not None
        fenced = observer.brokers()[old.node_id]["fenced"]
        parts = {p["partition"]: p for p in doc["partitions"]}
        return fenced and all(
            parts[p]["leader"] not in (old.node_id, -1) and old.node_id not in parts[p]["isr"]
            for p in partitions
        )

    remaining_s = max(0.0, EARLY_BOUND_S - (time.monotonic() - t0))
    cluster.eventually(moved, remaining_s, "the dead broker fenced, its partitions led elsewhere")
    moved_s = time.monotonic() - t0
    with capsys.disabled():
        print(
            f"\n[early election] controller {old.node_id} SIGKILL -> controller {new.node_id} "
            f"after {elected_s:.2f} s, broker fenced and leaders moved after {moved_s:.2f} s "
            f"(election timeout {ELECTION_TIMEOUT_MIN_MS} ms)"
        )
    assert new.cluster_view()["raft"]["term"] > old_term

"""Consumer groups on three real nodes, over HTTP: members split partitions
and rebalance with never two owners of one partition, a silent member is
removed after its session, and committed offsets survive SIGKILL of the
coordinator's node while the group carries on with the new coordinator."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.cluster_harness import LograftCluster, http_request
from tests.integration.group_members import (
    Member,
    assert_disjoint,
    coordinator_url,
    group_path,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

TOPIC = "orders"
PARTITIONS = 6
ALL = frozenset((TOPIC, p) for p in range(PARTITIONS))
SESSION_TIMEOUT_MS = 2_000
GROUPS = {
    "offsets_topic_num_partitions": 3,
    "session_timeout_ms": SESSION_TIMEOUT_MS,
    "group_heartbeat_interval_ms": 200,
}
# Conditions that should hold within a few heartbeat rounds get this long, s
# (generous: the machine is shared and loaded).
SETTLE_S = 30.0


def start(lograft_cluster: Callable[..., LograftCluster]) -> LograftCluster:
    cluster = lograft_cluster(3, overrides={n: {"groups": GROUPS} for n in (1, 2, 3)})
    cluster.start()
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    return cluster


def round_of(members: list[Member]) -> bool:
    """Every member heartbeats once; ownership stays disjoint throughout.
    True when the coordinator answered every one of them."""
    answered = True
    for m in members:
        answered = m.heartbeat() and answered
        assert_disjoint(members)
    return answered


def settle(
    cluster: LograftCluster, members: list[Member], check: Callable[[], bool], what: str
) -> None:
    def step() -> bool:
        return round_of(members) and check()

    cluster.eventually(step, SETTLE_S, what)


def split_evenly(members: list[Member]) -> bool:
    sizes = sorted(len(m.owned) for m in members)
    union = frozenset().union(*(m.owned for m in members))
    return union == ALL and sizes[-1] - sizes[0] <= 1


def describe(cluster: LograftCluster, group: str) -> dict[str, Any]:
    resp = http_request("GET", coordinator_url(cluster, group) + group_path(group))
    assert resp.status == 200, resp
    return dict(resp.json())


def test_members_split_rebalance_and_a_silent_one_is_removed(
    lograft_cluster: Callable[..., LograftCluster],
) -> None:
    cluster = start(lograft_cluster)
    group = "split"
    a = Member(cluster, group, "member-a", (TOPIC,))
    b = Member(cluster, group, "member-b", (TOPIC,))
    settle(cluster, [a, b], lambda: split_evenly([a, b]), "two members splitting six partitions")
    assert len(a.owned) == len(b.owned) == 3

    c = Member(cluster, group, "member-c", (TOPIC,))
    settle(cluster, [a, b, c], lambda: split_evenly([a, b, c]), "three members, two each")
    doc = describe(cluster, group)
    assert doc["state"] == "stable"
    assert {m["member_id"] for m in doc["members"]} == {"member-a", "member-b", "member-c"}

    # c goes silent; a and b keep heartbeating and take its partitions over.
    settle(cluster, [a, b], lambda: split_evenly([a, b]), "c's partitions moving to a and b")
    removed_after = time.monotonic() - c.last_answered_sent_at
    # Not before its session ran out; and soon after (the margin is for load).
    assert SESSION_TIMEOUT_MS / 1000 <= removed_after < SESSION_TIMEOUT_MS / 1000 + 10
    members = {m["member_id"] for m in describe(cluster, group)["members"]}
    assert members == {"member-a", "member-b"}
    # c finds out it was removed, joins again and gets its share back.
    c.heartbeat()
    assert "UNKNOWN_MEMBER_ID" in c.errors and c.epoch == 0
    settle(cluster, [a, b, c], lambda: split_evenly([a, b, c]), "c back in")


def test_commits_survive_sigkill_of_the_coordinator(
    lograft_cluster: Callable[..., LograftCluster],
) -> None:
    cluster = start(lograft_cluster)
    group = "durable"
    a = Member(cluster, group, "member-a", (TOPIC,))
    b = Member(cluster, group, "member-b", (TOPIC,))
    settle(cluster, [a, b], lambda: split_evenly([a, b]), "two members splitting six partitions")
    committed: dict[tuple[str, int], int] = {}
    for m, base in ((a, 100), (b, 200)):
        offsets = {tp: base + tp[1] for tp in m.owned}
        resp = m.commit(offsets)
        assert resp is not None and resp.status == 200, (resp, m.errors)
        committed.update(offsets)

    url = coordinator_url(cluster, group)
    (victim,) = [n for n in cluster if n.url == url]
    victim.kill()

    # The group carries on with the new coordinator: both members still hold
    # their partitions (a failover removes no live member), and commit again.
    owned_before = (a.owned, b.owned)

    def carried_on() -> bool:
        return round_of([a, b]) and a.url != url and b.url != url

    cluster.eventually(carried_on, SETTLE_S, "the group on the new coordinator")
    assert (a.owned, b.owned) == owned_before
    assert fetch_committed(cluster, group) == committed
    resp = a.commit({tp: committed[tp] + 1 for tp in a.owned})
    assert resp is not None and resp.status == 200, (resp, a.errors)
    assert "UNKNOWN_MEMBER_ID" not in a.errors + b.errors


def fetch_committed(cluster: LograftCluster, group: str) -> dict[tuple[str, int], int]:
    resp = http_request("GET", coordinator_url(cluster, group) + group_path(group, "/offsets"))
    assert resp.status == 200, resp
    return {(o["topic"], o["partition"]): o["offset"] for o in resp.json()["offsets"]}

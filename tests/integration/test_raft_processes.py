"""The Raft adapter across real processes on 127.0.0.1: election, ordered
replication, not-leader errors, leader SIGKILL, full-cluster SIGKILL and
restart (with and without a snapshot), read-only observers, and passwords.

Every node is a separate `raft_node_main.py` process with its own data dir
and random ports. Processes are killed by pid in fixture teardown; node logs
are printed there, so they show up only when a test fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.raft_harness import NodeProcess, ProcessCluster
from tests.raft_support import eventually

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

VOTERS = ["1", "2", "3"]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., ProcessCluster]]:
    clusters: list[ProcessCluster] = []

    def make(**overrides: Any) -> ProcessCluster:
        cluster = ProcessCluster(tmp_path / f"c{len(clusters)}", VOTERS, **overrides)
        cluster.workdir.mkdir(parents=True)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.close()
        print(cluster.logs())


def append_ok(node: NodeProcess, batch: bytes) -> int:
    code, body = node.append(batch)
    assert code == 200, f"append on {node.node_id} failed: {body}"
    return int(body["offset"])


def items(node: NodeProcess) -> list[tuple[int, bytes]]:
    return [(o, bytes.fromhex(h)) for o, h in node.state()["items"]]


def test_three_voters_elect_and_apply_in_the_same_order(
    make_cluster: Callable[..., ProcessCluster], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.leader()
    expected = [b"order-%03d" % i for i in range(30)]
    offsets = [append_ok(leader, b) for b in expected]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    cluster.wait_applied(cluster.voters, offsets[-1])
    reference = items(leader)
    assert [b for _o, b in reference] == expected
    for node in cluster.voters:
        assert items(node) == reference, f"{node.node_id} applied a different sequence"

    status = leader.status()
    assert status["role"] == "leader" and status["has_quorum"]
    assert all(v["connected"] for v in status["voters"])
    assert status["commit_index"] >= offsets[-1]

    latencies = sorted(leader.bench(300))
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    with capsys.disabled():
        print(
            f"\n[raft] commit+apply latency on a 3-voter localhost cluster, "
            f"{len(latencies)} sequential appends: p50={p50:.2f} ms p99={p99:.2f} ms "
            f"mean={statistics.fmean(latencies):.2f} ms max={latencies[-1]:.2f} ms"
        )
    assert p50 < 250, "a localhost commit should take milliseconds, not a heartbeat"


def test_append_on_a_follower_names_the_leader(
    make_cluster: Callable[..., ProcessCluster],
) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.leader()
    for follower in (n for n in cluster.voters if n is not leader):
        code, body = follower.append(b"misdirected")
        assert code == 409
        assert body["error"]["code"] == "NOT_CONTROLLER"
        assert body["error"]["retriable"] is True
        assert body["error"]["details"]["leader_id"] == leader.node_id
    assert all(node.batches() == [] for node in cluster.voters)


def test_leader_sigkill_elects_another_that_keeps_appending(
    make_cluster: Callable[..., ProcessCluster],
) -> None:
    cluster = make_cluster()
    cluster.start()
    old = cluster.leader()
    before = [append_ok(old, b"before-%d" % i) for i in range(5)]
    cluster.wait_applied(cluster.voters, before[-1])
    old.kill()

    new = cluster.leader(timeout_s=20)
    assert new is not old
    after = [append_ok(new, b"after-%d" % i) for i in range(5)]
    survivors = cluster.running_voters()
    cluster.wait_applied(survivors, after[-1])
    expected = [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]
    for node in survivors:
        assert node.batches() == expected

    # The killed leader comes back as a follower and converges.
    old.start()
    old.wait_serving()
    cluster.wait_applied([old], after[-1])
    assert items(old) == items(new)


def test_full_cluster_sigkill_restores_committed_state_including_snapshots(
    make_cluster: Callable[..., ProcessCluster],
) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.leader()
    acked = [(append_ok(leader, b"pre-%d" % i), b"pre-%d" % i) for i in range(40)]
    cluster.wait_applied(cluster.voters, acked[-1][0])

    # Compact every node so that the first 40 batches live only in snapshots.
    for node in cluster.voters:
        node.compact()
    for node in cluster.voters:
        eventually(
            lambda node=node: (node.status()["snapshot_offset"] or 0) >= acked[-1][0],
            20,
            f"{node.node_id} to write a snapshot",
        )
        assert node.status()["log_length"] < 10, "journal should be truncated"
    acked += [(append_ok(leader, b"post-%d" % i), b"post-%d" % i) for i in range(15)]

    for node in cluster.voters:
        node.kill()
    cluster.start()
    leader = cluster.leader()
    cluster.wait_applied(cluster.voters, acked[-1][0])
    for node in cluster.voters:
        assert items(node) == acked, f"{node.node_id} did not rebuild the committed state"
        restores = node.state()["restores"]
        assert restores and restores[0] >= 40, f"{node.node_id} did not load its snapshot"

    # Again, with the newest entries only in the journal (no compaction).
    acked += [(append_ok(leader, b"tail-%d" % i), b"tail-%d" % i) for i in range(10)]
    for node in cluster.voters:
        node.kill()
    cluster.start()
    cluster.leader()
    cluster.wait_applied(cluster.voters, acked[-1][0])
    for node in cluster.voters:
        assert items(node) == acked


def test_read_only_observer_follows_and_cannot_append(
    make_cluster: Callable[..., ProcessCluster],
) -> None:
    cluster = make_cluster()
    observer = cluster.add_observer("broker-9")
    cluster.start()
    cluster.start([observer])
    leader = cluster.leader()
    offsets = [append_ok(leader, b"obs-%d" % i) for i in range(10)]
    cluster.wait_applied([observer], offsets[-1])
    assert items(observer) == items(leader)

    code, body = observer.append(b"nope")
    assert code == 409 and body["error"]["details"]["leader_id"] == leader.node_id
    status = observer.status()
    assert status["role"] == "observer" and not any(v["is_self"] for v in status["voters"])
    eventually(
        lambda: leader.status()["observers"] == ["broker-9"], 10, "leader to list the observer"
    )

    # Killed and restarted, the observer rebuilds from its own disk and catches up.
    observer.kill()
    more = [append_ok(leader, b"more-%d" % i) for i in range(5)]
    observer.start()
    observer.wait_serving()
    cluster.wait_applied([observer], more[-1])
    assert items(observer) == items(leader)


def test_password_links_and_a_wrong_password_cannot_join(
    make_cluster: Callable[..., ProcessCluster],
) -> None:
    cluster = make_cluster(password="correct horse")
    cluster.nodes["3"].raft["password"] = "battery staple"
    good = cluster.add_observer("good")
    bad = cluster.add_observer("bad", password="wrong")
    cluster.start()
    cluster.start([good, bad])
    voters_ok = [cluster.nodes["1"], cluster.nodes["2"]]
    leader = cluster.leader(among=voters_ok)
    offsets = [append_ok(leader, b"sealed-%d" % i) for i in range(5)]
    cluster.wait_applied([*voters_ok, good], offsets[-1])
    assert good.batches() == [b"sealed-%d" % i for i in range(5)]

    # Everyone with the right password has caught up; the others got nothing.
    for outsider in (cluster.nodes["3"], bad):
        status = outsider.status()
        assert status["leader_id"] is None, f"{outsider.node_id} found a leader"
        assert outsider.batches() == []
        assert not any(v["connected"] for v in status["voters"] if not v["is_self"])
    leader_view = {v["node_id"]: v["connected"] for v in leader.status()["voters"]}
    assert leader_view["3"] is False
    assert leader.status()["observers"] == ["good"]

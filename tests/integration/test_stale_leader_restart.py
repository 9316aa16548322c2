"""A restarted broker acts only on current metadata (issue 13).

Three nodes: 1 and 2 are the metadata quorum and brokers, 3 is a broker only,
and dials its Raft peers through links the test can hold (held_link.py).
Broker 3 leads a partition and writes Raft snapshots often; it is SIGKILLed
once one holds the topic, so the metadata it restores at start (its snapshot)
still says it leads; broker 1 or 2 takes over and commits writes (acks=all). Broker
3 is restarted with its Raft link held: it registers with the controller over
HTTP, but its metadata stays at that stale image. Between its start
and its catch-up it must accept no write for that partition (acks=1 probes,
sent straight to it, are refused retriably) and /readyz must say not ready.
Released, it catches up, becomes ready, and none of the probes is in the log.

Without the gate, broker 3 would act on its journal's image (it leads the
partition there) and acknowledge the acks=1 probes at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster_harness import LograftCluster, free_port
from tests.integration.data_plane import (
    BATCH_TYPE,
    batch_of,
    describe,
    fetch_all_raw,
    leader_of,
    pick_partition,
    post_batches,
    raw_request,
    running_cluster,
    wait_in_sync,
    wait_serving,
)
from tests.integration.held_link import HeldLink

pytestmark = [pytest.mark.timeout(180)]

TOPIC = "stale"
STALE = 3
PROBES = 5
# Node 3 snapshots its metadata at least this often (so it restarts from a
# snapshot that names it leader), ms.
SNAPSHOT_EVERY_MS = 100


@pytest.fixture(scope="module")
def links() -> Iterator[dict[int, HeldLink]]:
    """Node 3's links to the two voters' Raft ports (bound before the cluster,
    so their addresses go into node 3's config)."""
    raft_ports = {1: free_port(), 2: free_port()}
    held = {nid: HeldLink(f"127.0.0.1:{port}") for nid, port in raft_ports.items()}
    try:
        yield held
    finally:
        for link in held.values():
            link.close()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, links: dict[int, HeldLink]
) -> Iterator[LograftCluster]:
    overrides = {nid: {"raft_port": link.upstream[1]} for nid, link in links.items()} | {
        STALE: {
            "dial": {nid: link.address for nid, link in links.items()},
            "raft": {
                "log_compaction_min_entries": 2,
                "log_compaction_min_time_ms": SNAPSHOT_EVERY_MS,
            },
        }
    }
    with running_cluster(
        tmp_path_factory,
        "staleleader",
        log_lines=120,
        roles={STALE: ("broker",)},
        overrides=overrides,
    ) as c:
        yield c


def _readyz(cluster: LograftCluster) -> tuple[int, dict]:
    resp = cluster[STALE].get("/readyz")
    return resp.status, resp.body


def test_a_restarted_old_leader_accepts_nothing_before_it_has_caught_up(
    cluster: LograftCluster, links: dict[int, HeldLink]
) -> None:
    one, stale = cluster[1], cluster[STALE]
    cluster.create_topic(TOPIC, partitions=3, replication_factor=3)
    wait_in_sync(cluster, TOPIC)
    p = pick_partition(describe(one, TOPIC), STALE)
    wait_serving(cluster, stale, TOPIC, p)
    before = post_batches(stale, TOPIC, p, batch_of([b"before-0", b"before-1"]))
    assert before.status == 200, before

    # Killed once it has a snapshot that names it leader of p (what it will
    # restore at start; checked below); the quorum moves on without it.
    snapshot = stale.spec.data_dir / "metadata" / "raft.snapshot"
    cluster.eventually(
        lambda: snapshot.exists() and TOPIC.encode() in snapshot.read_bytes(),
        30,
        "node 3 wrote a metadata snapshot naming the topic",
    )
    stale.kill()
    new_leader = cluster.eventually(
        lambda: (lid := leader_of(one, TOPIC, p)) not in (STALE, -1, None) and lid,
        30,
        f"a new leader for {TOPIC}-{p}",
    )
    leader = cluster[int(new_leader)]
    wait_serving(cluster, leader, TOPIC, p)
    committed = [f"committed-{i}".encode() for i in range(5)]
    after = post_batches(leader, TOPIC, p, batch_of(committed), acks="all")
    assert after.status == 200, after

    # Restart it with its Raft link held: registered, but not caught up.
    for link in links.values():
        link.hold()
    stale.restart(wait_ready=False)
    status, body = cluster.eventually(
        lambda: (r := _readyz(cluster))[1].get("metadata_offset_to_reach") is not None and r,
        30,
        "node 3 registered with the controller",
    )
    assert status == 503, body
    assert body["ready"] is False and body["metadata_caught_up"] is False, body
    assert body["metadata_offset"] < body["metadata_offset_to_reach"], body
    # The hazard is real: the image it restored names it leader of p.
    assert leader_of(stale, TOPIC, p) == STALE

    accepted = []
    for i in range(PROBES):
        resp = raw_request(
            "POST",
            f"{stale.url}/v1/topics/{TOPIC}/partitions/{p}/batches?acks=1",
            batch_of([f"stale-{i}".encode()]),
            headers={"Content-Type": BATCH_TYPE},
        )
        if resp.status == 200:
            accepted.append(resp)
            continue
        assert resp.status == 503, resp
        assert resp.headers.get("Retry-After"), resp
        error = resp.json()["error"]
        assert error["code"] == "BROKER_NOT_AVAILABLE" and error["retriable"] is True, resp
    assert accepted == [], f"the stale leader acknowledged {len(accepted)} acks=1 writes"
    status, body = _readyz(cluster)
    assert status == 503 and body["metadata_caught_up"] is False, body

    # Released: it catches up, is ready, and follows the current leader.
    for link in links.values():
        link.release()
    stale.wait_ready()
    status, body = _readyz(cluster)
    assert status == 200 and body["metadata_caught_up"] is True, body
    assert body["metadata_offset"] >= body["metadata_offset_to_reach"], body
    wait_in_sync(cluster, TOPIC)
    current = cluster[leader_of(one, TOPIC, p)]
    wait_serving(cluster, current, TOPIC, p)
    data, _hw = fetch_all_raw(current, TOPIC, p)
    assert b"stale-" not in data
    for value in [b"before-0", b"before-1", *committed]:
        assert value in data

"""Unclean shutdown detection and recovery by log end (KIP-966) with real node
processes: after SIGKILL of every node, each restarted broker registers as
unclean (no clean-shutdown file), leaves the kept ISR of partitions whose
records it might have lost, and the partitions come back once every replica
has reported its log end, the longest log leading; nothing acknowledged is
lost. Topics that fsync (group_commit) keep their ISR. A SIGTERM leaves a
clean-shutdown file naming the broker epoch. A preferred replica that fell
behind before every node was killed does not lead: the longest log does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lograft.node.clean_shutdown import FILE_NAME
from tests.integration.cluster_harness import ClusterNode, LograftCluster
from tests.integration.data_plane import (
    describe,
    fetch_all,
    produce_ok,
    running_cluster,
    wait_serving,
)

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

RECORDS = 40
REPORTED = "log end report let"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    with running_cluster(tmp_path_factory, "unclean", log_lines=120) as c:
        yield c


def create(cluster: LograftCluster, name: str, **configs: str) -> None:
    body = {"name": name, "partitions": 2, "replication_factor": 3, "configs": configs}
    cluster[1].ok("POST", "/v1/topics", body, status=201)


def produce_all(cluster: LograftCluster, topic: str) -> dict[int, set[str]]:
    """RECORDS acknowledged (acks=all) records per partition, by value."""
    acked: dict[int, set[str]] = {0: set(), 1: set()}
    for i in range(RECORDS):
        value = f"{topic}-{i}"
        for answer in produce_ok(
            cluster, cluster[1], topic, [{"value": value, "partition": i % 2}]
        ):
            acked[answer["partition"]].add(value)
    return acked


def all_led(cluster: LograftCluster, topic: str) -> bool:
    parts = describe(cluster[1], topic)
    return all(p["leader"] >= 0 for p in parts.values())


def read_back(cluster: LograftCluster, topic: str) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for partition, doc in describe(cluster[1], topic).items():
        leader = cluster[doc["leader"]]
        wait_serving(cluster, leader, topic, partition)
        found[partition] = {r["value"] for r in fetch_all(leader, topic, partition)}
    return found


def test_after_sigkill_of_every_node_the_longest_logs_lead_and_nothing_acked_is_lost(
    cluster: LograftCluster,
) -> None:
    create(cluster, "pagecache")
    create(cluster, "fsynced", flush_policy="group_commit")
    acked = {t: produce_all(cluster, t) for t in ("pagecache", "fsynced")}

    cluster.kill_all()
    for node in cluster:
        assert not (node.spec.data_dir / FILE_NAME).exists()
    cluster.start()

    for topic in ("pagecache", "fsynced"):
        cluster.eventually(lambda t=topic: all_led(cluster, t), 60, f"{topic} led again")

        # Readable once the high watermark is back over them: a new leader
        # alone in its ISR holds the HW until min_insync_replicas rejoin.
        def everything_back(t: str = topic) -> bool:
            found = read_back(cluster, t)
            return all(values <= found[p] for p, values in acked[t].items())

        cluster.eventually(everything_back, 60, f"every acknowledged {topic} record read back")
    # The page-cache topic's ISR was emptied by the unclean registrations: it
    # came back through the brokers' log end reports, not a kept ISR.
    reported = [n.node_id for n in cluster if REPORTED in n.log_text()]
    assert reported, "no broker's log end report elected a leader"


def test_sigterm_leaves_a_clean_shutdown_file_naming_the_broker_epoch(
    cluster: LograftCluster,
) -> None:
    node = cluster[3]
    epoch = cluster[1].brokers()[3]["epoch"]
    assert node.terminate() == 0
    marker = node.spec.data_dir / FILE_NAME
    assert int(marker.read_text()) == epoch
    node.start()
    node.wait_ready()
    # Taken at start: a crash from here on must read as unclean.
    assert not marker.exists()


def test_a_preferred_replica_that_fell_behind_does_not_lead_after_every_node_is_killed(
    cluster: LograftCluster,
) -> None:
    # The preferred replica misses records the other two acknowledged; after
    # SIGKILL of all three, it must not lead (preferred order would: its
    # followers would then truncate the acknowledged records away).
    cluster.wait_ready()
    topic = "behind"
    body = {"name": topic, "partitions": 1, "replication_factor": 3}
    cluster[1].ok("POST", "/v1/topics", body, status=201)
    preferred = describe(cluster[1], topic)[0]["replicas"][0]
    others = [n for n in (1, 2, 3) if n != preferred]
    via = cluster[others[0]]
    cluster[preferred].kill()

    def led_without_it() -> bool:
        doc = describe(via, topic)[0]
        return doc["leader"] in others and preferred not in doc["isr"]

    cluster.eventually(led_without_it, 60, f"{topic} led without broker {preferred}")
    acked = set()
    for i in range(RECORDS):
        for answer in produce_ok(cluster, via, topic, [{"value": f"behind-{i}"}]):
            assert answer["partition"] == 0
            acked.add(f"behind-{i}")

    cluster.kill_all()
    cluster.start()

    def led() -> bool:
        return describe(cluster[1], topic)[0]["leader"] >= 0

    cluster.eventually(led, 60, f"{topic} led again")
    assert describe(cluster[1], topic)[0]["leader"] in others

    def everything_back() -> bool:
        return acked <= read_back(cluster, topic)[0]

    cluster.eventually(everything_back, 60, "every acknowledged record read back")


def test_an_unclean_election_picks_the_longest_log_of_the_replicas_present(
    cluster: LograftCluster,
) -> None:
    # min_insync_replicas 1: records acknowledged by two replicas while the
    # preferred one is away. Every node is killed; the preferred replica and
    # one that holds the records come back, the third (the last ISR member)
    # does not. Turning unclean election on must elect the longer log: the
    # preferred replica (what it elected before log ends were used) would
    # truncate the acknowledged records from the other.
    cluster.wait_ready()
    topic = "loose"
    body = {
        "name": topic,
        "partitions": 1,
        "replication_factor": 3,
        "configs": {"min_insync_replicas": "1"},
    }
    cluster[1].ok("POST", "/v1/topics", body, status=201)
    preferred, away, holder = describe(cluster[1], topic)[0]["replicas"]
    # `away` leads once `preferred` is gone, so it is the last known leader
    # (which the rule before log ends tried first); it stays down at the end.
    via = cluster[holder]
    cluster[preferred].kill()

    def led_by_away() -> bool:
        doc = describe(via, topic)[0]
        return doc["leader"] == away and preferred not in doc["isr"]

    cluster.eventually(led_by_away, 60, f"{topic} led by broker {away}")
    acked = set()
    for i in range(RECORDS):
        for _answer in produce_ok(cluster, via, topic, [{"value": f"loose-{i}"}]):
            acked.add(f"loose-{i}")

    cluster.kill_all()
    for node in (preferred, holder):
        cluster[node].start()
    for node in (preferred, holder):
        cluster[node].wait_ready()

    def both_usable_and_offline() -> bool:
        brokers = cluster[holder].brokers()
        usable = all(not brokers[n]["fenced"] for n in (preferred, holder))
        doc = describe(cluster[holder], topic)[0]
        return usable and doc["leader"] < 0

    cluster.eventually(both_usable_and_offline, 60, "both back, the partition offline")
    cluster[holder].ok(
        "PATCH", f"/v1/topics/{topic}/configs", {"configs": {"unclean_leader_election": "true"}}
    )

    def led() -> bool:
        return describe(cluster[holder], topic)[0]["leader"] >= 0

    cluster.eventually(led, 60, f"{topic} led again")
    assert describe(cluster[holder], topic)[0]["leader"] == holder
    assert acked <= read_back_from(cluster, cluster[holder], topic)
    cluster[away].start()
    cluster.wait_ready()


def read_back_from(cluster: LograftCluster, node: ClusterNode, topic: str) -> set[str]:
    leader = cluster[describe(node, topic)[0]["leader"]]
    wait_serving(cluster, leader, topic, 0)
    return {r["value"] for r in fetch_all(leader, topic, 0)}

"""Replicated partitions through the HTTP API of three real node processes (issue 4).

One cluster for the module, tuned so that the rules under test act quickly
and alone: a follower that stops fetching leaves the ISR after 1.5 s
(`replica_lag_time_max_ms`), while broker sessions last 30 s, so a paused
broker is never fenced and any ISR change seen here comes from the lag rule.
Every test waits for full ISRs before it starts, uses its own topic, and
resumes every node it paused in a `finally`.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record import MemoryRecords
from prometheus_client.parser import text_string_to_metric_families

from lograft.brokers.produce_router import FORWARD_PATH
from lograft.protocol.batch import RecordInput, build_batch, iter_records
from lograft.protocol.compression import Compression
from lograft.protocol.partitioner import partition_for_key
from tests.integration.cluster_harness import ClusterNode, LograftCluster, Response
from tests.integration.data_plane import (
    BATCH_TYPE,
    batch_of,
    describe,
    fetch,
    fetch_all,
    fetch_raw,
    leader_of,
    offsets,
    on_every_disk,
    post_batches,
    produce,
    produce_ok,
    running_cluster,
    wait_in_sync,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

REPLICA_LAG_TIME_MAX_MS = 1500
FORWARD_CONNECTIONS_MAX = 1
# Partitions one follower fetch names: so low that every follower of a topic
# with more partitions per leader splits its fetches (replica_fetcher.py),
# in every test of the module.
REQUEST_PARTITIONS_MAX = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    with running_cluster(
        tmp_path_factory,
        "replication",
        log_lines=120,
        broker={
            "replica_lag_time_max_ms": REPLICA_LAG_TIME_MAX_MS,
            "isr_check_interval_ms": 100,
            "replica_fetch_request_partitions_max": REQUEST_PARTITIONS_MAX,
        },
        controller={"broker_session_timeout_ms": 30_000},
        # One connection for calls forwarded on a client's behalf: any
        # replica fetch or controller call queued behind a forwarded
        # acks=all produce would show here as an ISR shrink.
        http={"forward_connections_max": FORWARD_CONNECTIONS_MAX},
    ) as c:
        yield c


def others(cluster: LograftCluster, *ids: int) -> list[ClusterNode]:
    return [n for n in cluster if n.node_id not in ids]


def values_of(records: list[dict[str, Any]]) -> list[Any]:
    return [r["value"] for r in records]


# -- acks ----------------------------------------------------------------------------------


def test_every_acks_mode_produces_and_fetches(cluster: LograftCluster) -> None:
    cluster.create_topic("acks", partitions=3)
    parts = wait_in_sync(cluster, "acks")
    leader = cluster[parts[0]["leader"]]
    router = others(cluster, leader.node_id)[0]
    expected: list[Any] = []

    # acks=0 through a node that does not lead partition 0 (it routes the
    # batch): 202 with no body at all; the records still arrive.
    for via in (router, leader):
        vals = [f"acks0-{via.node_id}-{i}" for i in range(3)]
        resp = produce(via, "acks", [{"value": v, "partition": 0} for v in vals], acks="0")
        assert resp == Response(202, None)
        expected += vals

        def arrived(n: int = len(expected)) -> bool:
            return len(fetch_all(leader, "acks", 0)) >= n

        cluster.eventually(arrived, 15, "acks=0 records to become visible")
    assert values_of(fetch_all(leader, "acks", 0)) == expected

    # acks=1 and acks=all: offsets in request order, dense, after the acks=0 ones.
    for acks in ("1", "all"):
        for via in (router, leader):
            vals = [f"acks{acks}-{via.node_id}-{i}" for i in range(3)]
            got = produce_ok(
                cluster, via, "acks", [{"value": v, "partition": 0} for v in vals], acks
            )
            base = len(expected)
            assert got == [{"partition": 0, "offset": base + i} for i in range(3)]
            expected += vals
            if acks == "all":
                # acks=all answered only once the HW passed the records: a
                # fetch right after the answer must see them, without waiting.
                tail = fetch(leader, "acks", 0, base).body
                assert values_of(tail["records"]) == vals
                assert tail["high_watermark"] >= base + 3

    def all_visible() -> list[dict[str, Any]] | None:
        got = fetch_all(leader, "acks", 0)
        return got if len(got) == len(expected) else None

    records = cluster.eventually(all_visible, 15, "every record below the HW")
    assert values_of(records) == expected
    assert [r["offset"] for r in records] == list(range(len(expected)))

    # The raw-batch path, same three modes, straight to the leader.
    for acks in ("0", "1", "all"):
        vals = [f"raw{acks}-{i}".encode() for i in range(2)]
        resp = post_batches(leader, "acks", 0, batch_of(vals), acks=acks)
        if acks == "0":
            assert resp == Response(202, None)
        else:
            assert resp.status == 200, resp
            assert resp.body["base_offset"] >= len(expected)
            assert resp.body["last_offset"] == resp.body["base_offset"] + 1
            assert resp.body["duplicate"] is False
        expected += [v.decode() for v in vals]
    records = cluster.eventually(all_visible, 15, "raw batches below the HW")
    assert values_of(records) == expected
    # Nothing leaked to the other partitions.
    assert fetch_all(cluster[parts[1]["leader"]], "acks", 1) == []
    assert fetch_all(cluster[parts[2]["leader"]], "acks", 2) == []


def test_forwarded_acks_all_produces_never_starve_replication(cluster: LograftCluster) -> None:
    """A node forwards a produce to each partition's leader and holds that
    connection until the followers have fetched the records; the node is one
    of those followers. Its replica fetches must not queue behind the
    forwarded produces (one connection here): the leaders would wait for a
    fetch that waits for them. With min_insync_replicas=3 no ISR shrink can
    break that wait, so the produce would time out instead of succeeding."""
    partitions = 12
    cluster.create_topic("forwarded", partitions=partitions, configs={"min_insync_replicas": 3})
    parts = wait_in_sync(cluster, "forwarded")
    via = cluster[1]
    remote = [p for p, doc in parts.items() if doc["leader"] != via.node_id]
    assert len(remote) >= 2, parts
    for round_ in range(3):
        records = [{"value": f"r{round_}-p{p}", "partition": p} for p in range(partitions)]
        got = produce_ok(cluster, via, "forwarded", records, timeout_s=60)
        assert sorted(o["partition"] for o in got) == list(range(partitions))
    for p in range(partitions):
        leader = cluster[leader_of(via, "forwarded", p)]
        assert values_of(fetch_all(leader, "forwarded", p)) == [f"r{r}-p{p}" for r in range(3)]


def test_one_produce_through_a_node_writes_to_every_leader(cluster: LograftCluster) -> None:
    """A node sends the partitions each other broker leads in one request to
    that broker; the per-record answer is what each leader decided: dense
    offsets in request order, and an error (here a record over the topic's
    max_message_bytes, which only the leader checks) for its partition alone."""
    partitions = 9
    cluster.create_topic("fanout", partitions=partitions, configs={"max_message_bytes": 1024})
    parts = wait_in_sync(cluster, "fanout")
    assert {doc["leader"] for doc in parts.values()} == {1, 2, 3}, parts
    via = cluster[1]
    # Two records per partition, interleaved, so request order is not partition order.
    records = [{"value": f"a{i}-p{p}", "partition": p} for i in range(2) for p in range(partitions)]
    got = produce_ok(cluster, via, "fanout", records)
    assert got == [{"partition": p, "offset": i} for i in range(2) for p in range(partitions)]

    bad = next(p for p, doc in sorted(parts.items()) if doc["leader"] != via.node_id)
    records = [
        {"value": "x" * 2000 if p == bad else f"b{i}-p{p}", "partition": p}
        for i in range(2)
        for p in range(partitions)
    ]
    resp = produce(via, "fanout", records)
    assert resp.status == 207, resp
    for n, outcome in enumerate(resp.body["offsets"]):
        i, p = divmod(n, partitions)
        if p == bad:
            assert outcome["partition"] == bad and outcome["error"]["code"] == "MESSAGE_TOO_LARGE"
        else:
            assert outcome == {"partition": p, "offset": 2 + i}, (n, outcome)
    for p in range(partitions):
        want = [f"a{i}-p{p}" for i in range(2)]
        want += [] if p == bad else [f"b{i}-p{p}" for i in range(2)]
        assert values_of(fetch_all(cluster[parts[p]["leader"]], "fanout", p)) == want


def test_followers_of_more_partitions_than_a_fetch_names_replicate_them_all(
    cluster: LograftCluster,
) -> None:
    """24 partitions over 3 leaders: each follower follows about 8 of each
    leader, twice what one of its fetches names, so its sessions start with
    4 and name the rest over the next fetches."""
    topic, count = "wide", 24
    cluster.create_topic(topic, partitions=count)
    parts = wait_in_sync(cluster, topic)
    for p, doc in parts.items():
        produce_ok(cluster, cluster[doc["leader"]], topic, [{"value": f"w-{p}", "partition": p}])

    # A JSON value is stored as JSON.
    stored = {p: [f'"w-{p}"'.encode()] for p in range(count)}
    cluster.eventually(
        lambda: on_every_disk(cluster, topic, stored), 30, "every record on every replica's disk"
    )
    wait_in_sync(cluster, topic)


# -- partitioning --------------------------------------------------------------------------


def test_keyed_records_land_on_the_murmur2_partition(cluster: LograftCluster) -> None:
    count = 5
    cluster.create_topic("keyed", partitions=count)
    parts = wait_in_sync(cluster, "keyed")
    keys = [f"user-{i}" for i in range(60)] + ["", "é", "a longer key with spaces"]
    # kafka-python's murmur2 is an oracle nobody here wrote; it must agree
    # with lograft's partitioner before the cluster is asked anything.
    kafka_choice = {k: (kafka_murmur2(k.encode()) & 0x7FFFFFFF) % count for k in keys}
    assert kafka_choice == {k: partition_for_key(k.encode(), count) for k in keys}
    assert len(set(kafka_choice.values())) == count  # the keys exercise every partition

    via = cluster[1]
    got = produce_ok(cluster, via, "keyed", [{"key": k, "value": i} for i, k in enumerate(keys)])
    assert [o["partition"] for o in got] == [kafka_choice[k] for k in keys]
    stored: dict[str, int] = {}
    for p, doc in parts.items():
        for rec in fetch_all(cluster[doc["leader"]], "keyed", p):
            assert rec["key"] not in stored, f"key {rec['key']!r} stored twice"
            stored[rec["key"]] = p
    assert stored == kafka_choice


def forwarded_produces(node: ClusterNode) -> float:
    """Forwarded produces `node` has taken (as a partition leader), from its
    request metrics: `POST /internal/v1/produce` carries nothing else."""
    resp = node.get("/metrics")
    assert resp.status == 200, resp
    text = resp.body.decode() if isinstance(resp.body, bytes) else str(resp.body)
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "lograft_request_total_seconds_count"
                and sample.labels.get("route") == FORWARD_PATH
            ):
                total += sample.value
    return total


def under_min_isr_partitions(node: ClusterNode) -> float:
    """Partitions `node` leads whose ISR, as the leader itself holds it (the
    one acks=all is checked against), is below min_insync_replicas."""
    resp = node.get("/metrics")
    assert resp.status == 200, resp
    text = resp.body.decode() if isinstance(resp.body, bytes) else str(resp.body)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "lograft_broker_under_min_isr_partitions":
                return sample.value
    raise AssertionError("no lograft_broker_under_min_isr_partitions in /metrics")


def test_keyless_records_stay_on_partitions_the_node_leads(cluster: LograftCluster) -> None:
    """Keyless records (`keyless_partitions` = local, the default): one
    partition per request (sticky), the next request on the next partition
    the node that took it leads (round-robin), so nothing is forwarded;
    keyed records still go to their murmur2 partition, wherever it is led."""
    count = 6
    cluster.create_topic("keyless", partitions=count)
    parts = wait_in_sync(cluster, "keyless")
    led = {
        n.node_id: [p for p, d in sorted(parts.items()) if d["leader"] == n.node_id]
        for n in cluster
    }
    # Six partitions on three brokers: some node leads at least two, so the
    # round-robin among a node's partitions shows.
    assert max(len(ps) for ps in led.values()) >= 2, parts
    forwarded = {n.node_id: forwarded_produces(n) for n in cluster}
    for via in cluster:
        mine = led[via.node_id]
        chosen = []
        for i in range(2 * len(mine)):
            records = [{"value": f"{via.node_id}-{i}-{j}"} for j in range(3)]
            got = produce_ok(cluster, via, "keyless", records)
            assert len({o["partition"] for o in got}) == 1, got
            chosen.append(got[0]["partition"])
        # Each partition the node leads, in turn (a node leading none would
        # spread them over all: not this cluster's case when all lead one).
        assert sorted(chosen) == sorted(mine * 2), (via.node_id, chosen, parts)
        assert chosen[: len(mine)] == chosen[len(mine) :], chosen
    assert {n.node_id: forwarded_produces(n) for n in cluster} == forwarded
    # A keyed record whose partition another node leads is still forwarded there.
    via = cluster[1]
    key = next(
        k
        for k in (f"k{i}" for i in range(100))
        if parts[partition_for_key(k.encode(), count)]["leader"] != 1
    )
    got = produce_ok(cluster, via, "keyless", [{"key": key, "value": "keyed"}])
    leader = parts[partition_for_key(key.encode(), count)]["leader"]
    assert got[0]["partition"] == partition_for_key(key.encode(), count)
    assert forwarded_produces(cluster[leader]) == forwarded[leader] + 1


# -- high watermark ------------------------------------------------------------------------


def test_consumers_never_see_above_the_high_watermark(cluster: LograftCluster) -> None:
    cluster.create_topic("hw", partitions=1)
    leader = cluster[wait_in_sync(cluster, "hw")[0]["leader"]]
    followers = others(cluster, leader.node_id)
    produce_ok(
        cluster, leader, "hw", [{"value": f"committed-{i}", "partition": 0} for i in range(3)]
    )
    before = offsets(leader, "hw", 0)
    assert before["latest"] == before["log_end_offset"] == 3

    woken: list[Response] = []
    poller: threading.Thread | None = None
    paused: list[ClusterNode] = []
    try:
        for f in followers:
            f.pause()
            paused.append(f)
        got = produce_ok(
            cluster,
            leader,
            "hw",
            [{"value": f"pending-{i}", "partition": 0} for i in range(2)],
            "1",
        )
        assert [o["offset"] for o in got] == [3, 4]
        # The leader's log moved, the HW did not: no follower has the records.
        now = offsets(leader, "hw", 0)
        assert (now["log_end_offset"], now["latest"]) == (5, 3)
        described = describe(leader, "hw")[0]
        assert (described["log_end_offset"], described["high_watermark"]) == (5, 3)
        # JSON, raw and long-poll fetches all stop at the HW.
        body = fetch(leader, "hw", 0, 0).body
        assert values_of(body["records"]) == [f"committed-{i}" for i in range(3)]
        assert (body["next_offset"], body["high_watermark"]) == (3, 3)
        assert fetch(leader, "hw", 0, 3).body["records"] == []
        t0 = time.monotonic()
        assert fetch(leader, "hw", 0, 3, max_wait_ms=300).body["records"] == []
        assert time.monotonic() - t0 >= 0.25  # it waited, and still saw nothing
        raw = fetch_raw(leader, "hw", 0, 0)
        assert raw.status == 200 and raw.headers["X-Lograft-High-Watermark"] == "3"
        assert [r.offset for r in iter_records(raw.body)] == [0, 1, 2]
        beyond = fetch(leader, "hw", 0, 6)
        assert (beyond.status, beyond.body["error"]["code"]) == (416, "OFFSET_OUT_OF_RANGE")

        # A consumer long-polling at the HW is woken when the HW moves. (Its
        # request is on its way before the followers resume; a follower needs
        # at least a fetch round trip before the HW can move.)
        sending = threading.Event()

        def long_poll() -> None:
            sending.set()
            woken.append(fetch(leader, "hw", 0, 3, max_wait_ms=20_000))

        poller = threading.Thread(target=long_poll, daemon=True)
        poller.start()
        assert sending.wait(10)
    finally:
        for f in paused:
            f.resume()
    t_resume = time.monotonic()
    assert poller is not None
    poller.join(timeout=30)
    assert not poller.is_alive(), "the long-poll never returned"
    assert woken and woken[0].status == 200, woken
    assert values_of(woken[0].body["records"]) == ["pending-0", "pending-1"]
    assert time.monotonic() - t_resume < 15, "woken by the deadline, not by the HW moving"
    assert offsets(leader, "hw", 0)["latest"] == 5


# -- ISR -------------------------------------------------------------------------------------


def test_a_follower_that_stops_fetching_leaves_the_isr_and_comes_back(
    cluster: LograftCluster,
) -> None:
    # min_insync_replicas=3: with one follower out, acks=all must be refused
    # (nothing written) and the HW must hold.
    cluster.create_topic("isr", partitions=1, configs={"min_insync_replicas": 3})
    leader = cluster[wait_in_sync(cluster, "isr")[0]["leader"]]
    controller = cluster.active_controller()
    victim = others(cluster, leader.node_id, controller.node_id)[0]
    under_min_isr_before = under_min_isr_partitions(leader)
    t_written = time.monotonic()
    # acks=all with min_insync_replicas=3: acknowledged only once the victim
    # fetched past it, so the victim was caught up after t_written.
    produce_ok(cluster, leader, "isr", [{"value": "all-in", "partition": 0}])

    def isr() -> list[int]:
        return sorted(describe(leader, "isr")[0]["isr"])

    try:
        victim.pause()
        # The follower must fall behind for the lag rule to apply.
        produce_ok(cluster, leader, "isr", [{"value": "behind", "partition": 0}], "1")
        cluster.eventually(
            lambda: victim.node_id not in isr(), 20, f"broker {victim.node_id} to leave the ISR"
        )
        # Not before the lag time since it was last caught up (after
        # t_written; not necessarily after the pause: on a loaded machine its
        # last fetch may come any time before). 1 ms: both sides count whole ms.
        assert time.monotonic() - t_written >= (REPLICA_LAG_TIME_MAX_MS - 1) / 1000
        assert len(isr()) == 2
        # describe shows the metadata image, which this node replays before
        # the partition it leads applies it (or hears the AlterPartition
        # answer): the produce below is checked against the partition's own
        # ISR, so wait until the leader's replica counts itself under it.
        cluster.eventually(
            lambda: under_min_isr_partitions(leader) == under_min_isr_before + 1,
            10,
            "the leader to apply the shrunk ISR",
        )
        # It left through the lag rule, not through fencing: its session holds.
        assert leader.brokers()[victim.node_id]["fenced"] is False
        leo = offsets(leader, "isr", 0)["log_end_offset"]
        resp = produce(leader, "isr", [{"value": "refused", "partition": 0}], acks="all")
        assert resp.status == 503, resp
        assert resp.body["error"]["code"] == "NOT_ENOUGH_REPLICAS"
        assert resp.body["error"]["details"]["offsets"][0]["partition"] == 0
        assert offsets(leader, "isr", 0)["log_end_offset"] == leo
        # ISR (2) below min_insync_replicas (3): the HW holds, so "behind" is not visible.
        assert offsets(leader, "isr", 0)["latest"] == 1
    finally:
        victim.resume()
    cluster.eventually(lambda: isr() == [1, 2, 3], 30, f"broker {victim.node_id} back in the ISR")
    cluster.eventually(lambda: offsets(leader, "isr", 0)["latest"] == 2, 10, "HW to move")
    assert values_of(fetch_all(leader, "isr", 0)) == ["all-in", "behind"]
    produce_ok(cluster, leader, "isr", [{"value": "all-in-again", "partition": 0}])


# -- idempotent producer ------------------------------------------------------------------------


def test_idempotent_retries_write_once(cluster: LograftCluster) -> None:
    cluster.create_topic("idem", partitions=1)
    leader = cluster[wait_in_sync(cluster, "idem")[0]["leader"]]
    a = cluster[1].ok("POST", "/v1/producers", status=201)
    b = cluster[2].ok("POST", "/v1/producers", status=201)
    assert a["producer_epoch"] == b["producer_epoch"] == 0
    assert a["producer_id"] != b["producer_id"]
    pid = a["producer_id"]

    def batch(seq: int, n: int, epoch: int = 0) -> bytes:
        vals = [f"p{pid}-e{epoch}-s{seq + i}".encode() for i in range(n)]
        return batch_of(vals, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    def leo() -> int:
        return int(offsets(leader, "idem", 0)["log_end_offset"])

    first = post_batches(leader, "idem", 0, batch(0, 3))
    assert first.status == 200 and first.body["duplicate"] is False, first
    assert (first.body["base_offset"], first.body["last_offset"]) == (0, 2)
    retry = post_batches(leader, "idem", 0, batch(0, 3))
    assert retry.status == 200, retry
    assert retry.body["duplicate"] is True
    assert (retry.body["base_offset"], retry.body["last_offset"]) == (0, 2)
    assert leo() == 3

    second = post_batches(leader, "idem", 0, batch(3, 2))
    assert second.status == 200 and (second.body["base_offset"], second.body["duplicate"]) == (
        3,
        False,
    )
    # An older batch among the last five is still recognised.
    again = post_batches(leader, "idem", 0, batch(0, 3))
    assert (again.status, again.body["base_offset"], again.body["duplicate"]) == (200, 0, True)
    # With acks=1 too.
    again = post_batches(leader, "idem", 0, batch(3, 2), acks="1")
    assert (again.status, again.body["base_offset"], again.body["duplicate"]) == (200, 3, True)
    assert leo() == 5

    # A sequence gap and a stale producer epoch: their own errors, nothing written.
    gap = post_batches(leader, "idem", 0, batch(9, 1))
    assert (gap.status, gap.body["error"]["code"]) == (409, "OUT_OF_ORDER_SEQUENCE_NUMBER"), gap
    bumped = post_batches(leader, "idem", 0, batch(0, 1, epoch=1))
    assert bumped.status == 200 and bumped.body["base_offset"] == 5, bumped
    stale = post_batches(leader, "idem", 0, batch(5, 1, epoch=0))
    assert (stale.status, stale.body["error"]["code"]) == (409, "INVALID_PRODUCER_EPOCH"), stale
    assert leo() == 6

    values = values_of(fetch_all(leader, "idem", 0, 0))
    assert values == [
        f"p{pid}-e0-s0",
        f"p{pid}-e0-s1",
        f"p{pid}-e0-s2",
        f"p{pid}-e0-s3",
        f"p{pid}-e0-s4",
        f"p{pid}-e1-s0",
    ]


# -- kafka-python as the oracle for raw fetches ------------------------------------------


def test_kafka_python_parses_the_raw_batches_of_a_fetch(cluster: LograftCluster) -> None:
    cluster.create_topic("oracle", partitions=1)
    leader = cluster[wait_in_sync(cluster, "oracle")[0]["leader"]]
    expected: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []

    json_records = [
        {"key": "k1", "value": {"n": 1, "s": "é"}, "headers": {"trace": "abc"}},
        {"value": "plain text"},
        {"key": "k3", "value": None},
        {"key": "k4", "value": [1, 2, 3], "headers": [{"key": "h", "value": None}]},
    ]
    produce_ok(cluster, leader, "oracle", [{**r, "partition": 0} for r in json_records])
    expected += [
        (b"k1", b'{"n":1,"s":"\xc3\xa9"}', [("trace", b"abc")]),
        (None, b'"plain text"', []),
        (b"k3", None, []),
        (b"k4", b"[1,2,3]", [("h", None)]),
    ]
    binary = bytes(range(256))
    resp = produce(
        leader,
        "oracle",
        [{"value": base64.b64encode(binary).decode(), "partition": 0}],
        value_format="base64",
    )
    assert resp.status == 200, resp
    expected.append((None, binary, []))
    # Raw batches in every codec kafka-python and lograft share (not snappy:
    # lograft has no xerial framing writer).
    for codec in (Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD):
        recs = [
            RecordInput(f"{codec.name}-{i}".encode() * 20, f"key-{i}".encode(), [("c", b"x")])
            for i in range(4)
        ]
        data = build_batch(recs, timestamp_ms=1_700_000_000_000 + codec, compression=codec)
        resp = post_batches(leader, "oracle", 0, data)
        assert resp.status == 200, (codec, resp)
        expected += [(r.key, r.value, [("c", b"x")]) for r in recs]

    raw = fetch_raw(leader, "oracle", 0, 0)
    assert raw.status == 200
    assert raw.headers["Content-Type"].startswith(BATCH_TYPE)
    assert raw.headers["X-Lograft-High-Watermark"] == str(len(expected))
    assert raw.headers["X-Lograft-Next-Offset"] == str(len(expected))
    assert raw.headers["X-Lograft-Log-Start-Offset"] == "0"

    memory = MemoryRecords(raw.body)
    parsed = []
    batches = 0
    while memory.has_next():
        batch = memory.next_batch()
        assert batch is not None
        assert batch.validate_crc(), f"kafka-python says batch {batches} has a bad CRC"
        batches += 1
        for rec in batch:
            parsed.append(
                (rec.offset, rec.key, rec.value, [(k, v) for k, v in rec.headers], rec.timestamp)
            )
    assert batches == 1 + 1 + 4  # one per JSON request, one per raw batch
    assert [p[0] for p in parsed] == list(range(len(expected)))
    assert [(k, v, h) for _o, k, v, h, _t in parsed] == expected
    # The same records as lograft's own JSON rendering.
    mine = fetch_all(leader, "oracle", 0)
    assert [r["timestamp"] for r in mine] == [p[4] for p in parsed]
    # And the raw bytes are exactly lograft's own reading of its log.
    assert [(r.offset, r.key, r.value) for r in iter_records(raw.body)] == [
        (o, k, v) for o, k, v, _h, _t in parsed
    ]

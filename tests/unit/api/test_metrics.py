"""GET /metrics pieces: the cheap histogram, request times and errors, the
broker, quorum and node collectors, the caps, and the per-node registry.
Every exposition is parsed back with prometheus-client's own parser."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from lograft.api.app import create_app
from lograft.api.metrics.broker_collector import BrokerCollector
from lograft.api.metrics.exposition import NodeMetrics, add_metrics_route
from lograft.api.metrics.node_collector import LOOP_LAG_BOUNDS_S, NodeCollector
from lograft.api.metrics.quorum_collector import QuorumCollector
from lograft.api.metrics.request_metrics import RequestMetrics
from lograft.api.metrics.series import largest
from lograft.api.metrics.settings import MetricsSettings
from lograft.brokers.broker_stats import OTHER_TOPIC, BrokerStats
from lograft.brokers.partition import Assignment
from lograft.brokers.remote_wait import remote_wait
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import NotEnoughReplicasError, NotLeaderOrFollowerError
from lograft.histogram import Buckets, LockedBuckets
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.fetch_wire import PartitionFetch
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.quorum.image import BrokerState, MetadataImage, PartitionState, TopicImage
from lograft.quorum.raft.core import RaftCounters


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


async def arender(metrics: NodeMetrics) -> str:
    body, content_type = await metrics.render(None)
    assert content_type.startswith("text/plain")
    return body.decode()


def render(metrics: NodeMetrics) -> str:
    return asyncio.run(arender(metrics))


# -- the histogram ---------------------------------------------------------------------


def test_buckets_count_each_value_in_the_first_bound_at_or_above_it():
    b = Buckets((0.1, 1.0, 10.0))
    for v in (0.05, 0.1, 0.5, 1.0, 3.0, 11.0):
        b.observe(v)
    snap = b.snapshot()
    assert snap.buckets == (("0.1", 2.0), ("1.0", 4.0), ("10.0", 5.0), ("+Inf", 6.0))
    assert snap.count == 6
    assert snap.total == pytest.approx(15.65)
    locked = LockedBuckets((1.0,))
    locked.observe(2.0)
    assert locked.snapshot().buckets == (("1.0", 0.0), ("+Inf", 1.0))


@pytest.mark.parametrize("bounds", [(), (1.0, 1.0), (2.0, 1.0)])
def test_buckets_refuse_bounds_that_do_not_increase(bounds):
    with pytest.raises(ValueError):
        Buckets(bounds)


def test_largest_keeps_the_biggest_and_counts_the_rest():
    kept, left = largest([(3.0, "c"), (1.0, "a"), (2.0, "b")], 2)
    assert kept == [(3.0, "c"), (2.0, "b")] and left == 1
    assert largest([(1.0, "a")], 5) == ([(1.0, "a")], 0)


# -- request times and errors ----------------------------------------------------------


async def test_request_times_split_queue_local_and_remote_and_errors_count_by_code():
    requests = RequestMetrics()
    app = create_app(
        cluster_secret="s",
        request_bytes_max=1024,
        ready=lambda: (True, {}),
        request_metrics=requests,
    )

    async def waits(_request: web.Request) -> web.Response:
        with remote_wait():
            await asyncio.sleep(0.05)
        return web.Response(text="ok")

    async def refuses(_request: web.Request) -> web.Response:
        raise NotLeaderOrFollowerError("not here")

    app.router.add_get("/v1/waits", waits)
    app.router.add_get("/v1/refuses/{x}", refuses)
    app.middlewares.append(requests.handler_mark())
    metrics = NodeMetrics()
    metrics.add(requests)
    add_metrics_route(app, metrics)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/v1/waits")).status == 200
        assert (await client.get("/v1/refuses/1")).status == 421
        assert (await client.get("/v1/refuses/2")).status == 421
        assert (await client.get("/nowhere")).status == 404
        resp = await client.get("/metrics")
        assert resp.status == 200
        text = await resp.text()
    route = {"method": "GET", "route": "/v1/waits"}
    assert value(text, "lograft_request_total_seconds_count", **route) == 1
    remote = value(text, "lograft_request_remote_seconds_sum", **route)
    total = value(text, "lograft_request_total_seconds_sum", **route)
    local = value(text, "lograft_request_local_seconds_sum", **route)
    queue = value(text, "lograft_request_queue_seconds_sum", **route)
    assert 0.05 <= remote <= total
    assert local + queue + remote == pytest.approx(total)
    assert local < 0.05
    refused = {"method": "GET", "route": "/v1/refuses/{x}", "code": "NOT_LEADER_OR_FOLLOWER"}
    assert value(text, "lograft_request_errors_total", **refused) == 2
    unmatched = {"method": "GET", "route": "unmatched", "code": "NOT_FOUND"}
    assert value(text, "lograft_request_errors_total", **unmatched) == 1


# -- the broker ------------------------------------------------------------------------


def _batch(n: int) -> bytes:
    return build_batch([RecordInput(value=b"x" * 10) for _ in range(n)], timestamp_ms=1)


async def test_broker_collector_counts_appends_reads_and_under_replicated_leaders(tmp_path: Path):
    stats = BrokerStats(topics_max=10)
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=2), stats=stats)
    await rm.start()
    try:
        # orders-0: led here with a follower out of the ISR (under-replicated,
        # under min ISR); orders-1: RF 1, fully in sync.
        rm.apply_metadata(
            {
                TopicPartition("orders", 0): PartitionMeta("id", Assignment((1, 2), (1,), 1, 1, 0)),
                TopicPartition("orders", 1): PartitionMeta("id", Assignment((1,), (1,), 1, 1, 0)),
            }
        )
        tp = TopicPartition("orders", 1)
        data = _batch(3)
        await rm.produce(tp, data, Acks.LEADER)
        await rm.fetch(tp, 0, max_bytes=1 << 20, max_wait_ms=0)
        with pytest.raises(NotEnoughReplicasError):
            await rm.produce(TopicPartition("orders", 0), data, Acks.ALL, timeout_ms=1)
        metrics = NodeMetrics()
        settings = MetricsSettings(partition_series_max=1)
        broker = BrokerCollector(
            rm, stats, settings, lambda: frozenset({"orders"}), metrics.dropped
        )
        metrics.add(broker)
        metrics.before_scrape(broker.refresh)
        text = await arender(metrics)
    finally:
        await rm.stop()
    assert value(text, "lograft_topic_bytes_in_total", topic="orders") == len(data)
    assert value(text, "lograft_topic_records_in_total", topic="orders") == 3
    assert value(text, "lograft_topic_bytes_out_total", topic="orders") == len(data)
    assert value(text, "lograft_topic_produce_requests_total", topic="orders") == 2
    assert value(text, "lograft_topic_produce_requests_failed_total", topic="orders") == 1
    assert value(text, "lograft_topic_fetch_requests_total", topic="orders") == 1
    assert value(text, "lograft_broker_leader_partitions") == 2
    assert value(text, "lograft_broker_under_replicated_partitions") == 1
    assert value(text, "lograft_broker_under_min_isr_partitions") == 1
    # One log-size series (the cap), the largest: orders-1 holds the batch.
    sizes = [k for k in samples(text) if k[0] == "lograft_log_size_bytes"]
    assert sizes == [("lograft_log_size_bytes", (("partition", "1"), ("topic", "orders")))]


async def test_broker_collector_counts_fetch_session_evictions(tmp_path: Path):
    """Two sessions fit; a third follower's evicts the least recently used.
    A follower's new session replacing its old one is no eviction."""
    stats = BrokerStats(topics_max=10)
    settings = BrokerSettings(replica_fetch_sessions_max=2)
    rm = ReplicaManager(1, tmp_path, settings, stats=stats)
    await rm.start()
    try:
        fetches = {TopicPartition("t", p): PartitionFetch(0) for p in range(3)}
        for replica in (2, 3, 3, 4, 5):  # 3 replaces its own; 4 and 5 evict 2 and 3
            assert rm.fetch_sessions.create(replica, fetches, now_ms=0) is not None
        metrics = NodeMetrics()
        metrics.add(
            BrokerCollector(rm, stats, MetricsSettings(), lambda: frozenset(), metrics.dropped)
        )
        text = await arender(metrics)
    finally:
        await rm.stop()
    assert value(text, "lograft_broker_fetch_session_evictions_total") == 2
    assert value(text, "lograft_broker_fetch_sessions") == 2
    assert value(text, "lograft_broker_fetch_session_partitions") == 6


def test_topic_counters_past_the_cap_share_one_series_and_deleted_topics_go():
    stats = BrokerStats(topics_max=2)
    for name in ("a", "b", "c", "d"):
        stats.topic(name).bytes_in += 1
    assert sorted(stats.topics()) == [OTHER_TOPIC, "a", "b"]
    assert stats.topics()[OTHER_TOPIC].bytes_in == 2
    stats.forget({"b"})
    stats.topic("e").bytes_in += 1
    assert sorted(stats.topics()) == [OTHER_TOPIC, "b", "e"]


# -- the quorum ------------------------------------------------------------------------


class FakeRaft:
    last_applied = 7

    def counters(self) -> RaftCounters:
        return RaftCounters(
            ticked=True,
            term=4,
            commit_index=9,
            applied=7,
            elections=2,
            snapshot_offset=5,
            snapshot_at=100.0,
        )


def _image() -> MetadataImage:
    def broker(state: BrokerState) -> Any:
        return SimpleNamespace(state=state)

    partitions = (
        PartitionState("t", 0, (1, 2), (1, 2), 1, 1, 1),
        PartitionState("t", 1, (1, 2), (), -1, 1, 1),
    )
    return MetadataImage(
        offset=9,
        brokers={1: broker(BrokerState.UNFENCED), 2: broker(BrokerState.FENCED)},
        topics={"t": TopicImage("orders", "t", partitions)},
        topic_ids={"orders": "t"},
    )


@pytest.mark.parametrize("active", [True, False])
def test_quorum_collector_reports_cluster_counts_on_the_active_controller_only(active: bool):
    runtime = SimpleNamespace(active=active)
    metrics = NodeMetrics()
    metrics.add(QuorumCollector(FakeRaft(), runtime, _image, wall_clock_s=lambda: 160.0))  # type: ignore[arg-type]
    text = render(metrics)
    assert value(text, "lograft_controller_active") == int(active)
    assert value(text, "lograft_raft_term") == 4
    assert value(text, "lograft_raft_apply_lag_entries") == 2
    assert value(text, "lograft_raft_elections_total") == 2
    assert value(text, "lograft_raft_snapshot_age_seconds") == 60
    assert value(text, "lograft_metadata_offset") == 9
    assert value(text, "lograft_controller_offline_partitions") == (1 if active else 0)
    assert value(text, "lograft_controller_fenced_brokers") == (1 if active else 0)
    assert value(text, "lograft_controller_partitions") == (2 if active else 0)


# -- the node --------------------------------------------------------------------------


def test_each_node_has_its_own_registry_and_the_dropped_tally_comes_last():
    texts = []
    for node_id in (1, 2):
        lag = Buckets(LOOP_LAG_BOUNDS_S)
        lag.observe(0.003 * node_id)
        metrics = NodeMetrics()
        node = NodeCollector(node_id, ("broker",), lag, lambda: 3, metrics.dropped)
        metrics.add(lambda: iter(()))
        metrics.dropped().add("x", 1)  # a scrape resets the tally first
        metrics.add(node)
        metrics.add(node.collect_dropped)
        texts.append(render(metrics))
    for node_id, text in zip((1, 2), texts, strict=True):
        assert value(text, "lograft_node_info", node_id=str(node_id), roles="broker") == 1
        assert value(text, "lograft_event_loop_lag_seconds_sum") == pytest.approx(0.003 * node_id)
        assert value(text, "lograft_sse_streams_open") == 3
        assert value(text, "process_resident_memory_bytes") > 0
        assert ("lograft_metrics_series_dropped", (("metric", "x"),)) not in samples(text)


def test_openmetrics_when_asked():
    metrics = NodeMetrics()
    body, content_type = asyncio.run(metrics.render("application/openmetrics-text; version=1.0.0"))
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")

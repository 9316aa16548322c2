"""The stream reader's driver side against a scripted cluster: initial
offsets, new and vanished partitions, data loss, per-trigger limits and
Trigger.AvailableNow. No Spark, no network: what `latestOffset` and
`partitions` answer is pure given the cluster's partitions and bounds."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
)

from lograft.pipelines.cluster_lookup import Bounds, TopicInfo
from lograft.pipelines.datasource import LograftStreamReader, RangePartition
from lograft.pipelines.options import parse_source_options
from lograft.pipelines.range_reader import DataLossError
from lograft.protocol.topic_partition import TopicPartition


class FakeCluster:
    """The ClusterLookup surface the reader uses, over topics whose
    partitions have (earliest, latest) bounds that a test edits."""

    def __init__(self) -> None:
        self.parts: dict[TopicPartition, Bounds] = {}
        self.ids: dict[str, str] = {}
        # Partitions the node answering topics() does not list yet (it lags).
        self.lagging_view: set[TopicPartition] = set()

    def set(self, topic: str, *bounds: tuple[int, int], topic_id: str | None = None) -> None:
        for tp in [tp for tp in self.parts if tp.topic == topic]:
            del self.parts[tp]
        for p, (lo, hi) in enumerate(bounds):
            self.parts[TopicPartition(topic, p)] = Bounds(lo, hi)
        self.ids[topic] = topic_id or self.ids.get(topic) or f"id-{topic}"

    def drop(self, topic: str) -> None:
        self.set(topic)
        del self.ids[topic]

    def topics(self) -> dict[str, TopicInfo]:
        count = {t: sum(1 for tp in self.parts if tp.topic == t) for t in self.ids}
        return {t: TopicInfo(i, count[t]) for t, i in self.ids.items()}

    def partitions(self, subscription, topics):
        listed = [tp for tp in self.parts if tp not in self.lagging_view]
        return sorted(tp for tp in listed if subscription.matches(tp.topic))

    def bounds(self, tps):
        return {tp: self.parts[tp] for tp in tps}

    def really_gone(self, tps):
        # What every node says: the ones `lagging_view` hides are still there.
        return {tp for tp in tps if tp not in self.parts}

    def offsets_for_times(self, timestamps):
        return dict.fromkeys(timestamps)

    def leader_url(self, tp):
        return f"http://leader-of-{tp}"

    def close(self) -> None:
        pass


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


def reader(cluster: FakeCluster, **options: str) -> LograftStreamReader:
    opts = parse_source_options({"bootstrap": "http://127.0.0.1:1", "subscribe": "t", **options})
    r = LograftStreamReader(opts)
    r._lookup = cluster  # type: ignore[assignment]
    return r


def latest(r: LograftStreamReader, start: dict, limit=None) -> dict:
    return r.latestOffset(start, ReadAllAvailable() if limit is None else limit)


def ranges(r: LograftStreamReader, start: dict, end: dict) -> list[tuple[int, int, int]]:
    out = []
    for p in r.partitions(start, end):
        assert isinstance(p, RangePartition)
        out.append((p.range.partition, p.range.start, p.range.end))
    return out


def test_initial_offsets_are_asked_once_and_default_to_latest(cluster):
    cluster.set("t", (0, 5), (2, 9))
    r = reader(cluster)
    first = r.initialOffset()
    assert first == {"t": {"0": 5, "1": 9}}
    cluster.set("t", (0, 50), (2, 90))
    assert r.initialOffset() == first  # Spark asks twice; the answer must not move
    assert reader(cluster, startingOffsets="earliest").initialOffset() == {"t": {"0": 0, "1": 2}}
    assert reader(cluster, startingOffsets='{"t":{"0":3,"1":-2}}').initialOffset() == {
        "t": {"0": 3, "1": 2}
    }


def test_everything_available_then_nothing_new(cluster):
    cluster.set("t", (0, 10), (0, 4))
    r = reader(cluster, startingOffsets="earliest")
    start = r.initialOffset()
    end = latest(r, start)
    assert end == {"t": {"0": 10, "1": 4}}
    assert ranges(r, start, end) == [(0, 0, 10), (1, 0, 4)]
    assert latest(r, end) == end  # no new data: the same offset, so no batch
    assert r.partitions(end, end) == []
    assert r.reportLatestOffset() == end


def test_max_offsets_per_trigger_bounds_every_batch(cluster):
    cluster.set("t", (0, 100), (0, 10))
    r = reader(cluster, startingOffsets="earliest", maxOffsetsPerTrigger="7")
    assert r.getDefaultReadLimit() == ReadMaxRows(7)
    start, seen = r.initialOffset(), 0
    while True:
        end = latest(r, start, r.getDefaultReadLimit())
        if end == start:
            break
        size = sum(e - s for _p, s, e in ranges(r, start, end))
        assert 0 < size <= 7
        seen += size
        start = end
    assert seen == 110
    # ReadAllAvailable (Trigger.Once) ignores the option, as Spark asks.
    assert latest(reader(cluster, maxOffsetsPerTrigger="7"), {"t": {"0": 0, "1": 0}}) == {
        "t": {"0": 100, "1": 10}
    }


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(cluster, monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr("lograft.pipelines.datasource.time.time", lambda: clock[0])
    cluster.set("t", (0, 3))
    r = reader(cluster, startingOffsets="earliest", minOffsetsPerTrigger="5", maxTriggerDelay="10s")
    assert r.getDefaultReadLimit() == ReadMinRows(5)
    start = r.initialOffset()
    # The first trigger never waits (Kafka starts its clock at 0).
    end = latest(r, start, ReadMinRows(5))
    assert end == {"t": {"0": 3}}
    cluster.set("t", (0, 6))
    clock[0] += 1
    assert latest(r, end, ReadMinRows(5)) is end  # 3 < 5 and only 1 s since the last batch
    cluster.set("t", (0, 8))
    assert latest(r, end, ReadMinRows(5)) == {"t": {"0": 8}}  # 5 offsets: go
    cluster.set("t", (0, 9))
    assert latest(r, {"t": {"0": 8}}, ReadMinRows(5)) == {"t": {"0": 8}}
    clock[0] += 11  # maxTriggerDelay passed: go with what there is
    assert latest(r, {"t": {"0": 8}}, ReadMinRows(5)) == {"t": {"0": 9}}


def test_new_partitions_join_at_their_log_start_and_are_read_next(cluster, caplog):
    cluster.set("t", (0, 5))
    r = reader(cluster, startingOffsets="earliest")
    start = r.initialOffset()
    end = latest(r, start)
    cluster.set("t", (0, 5), (0, 4), (0, 0))  # two partitions added
    grown = latest(r, end)
    assert grown == {"t": {"0": 5, "1": 0, "2": 0}}
    assert ranges(r, end, grown) == []  # they joined; nothing of them is read yet
    cluster.set("t", (0, 6), (0, 4), (0, 2))
    later = latest(r, grown)
    assert ranges(r, grown, later) == [(0, 5, 6), (1, 0, 4), (2, 0, 2)]


def test_added_partition_that_lost_records_is_data_loss(cluster, caplog):
    cluster.set("t", (0, 5))
    r = reader(cluster, startingOffsets="earliest")
    end = latest(r, r.initialOffset())
    cluster.set("t", (0, 5), (3, 9))  # its records below 3 were deleted before we saw it
    with pytest.raises(DataLossError, match=r"Added partition t-1 starts from 3 instead of 0"):
        latest(r, end)
    relaxed = reader(cluster, startingOffsets="earliest", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="lograft.pipelines"):
        assert latest(relaxed, {"t": {"0": 5}}) == {"t": {"0": 5, "1": 3}}
    assert "Added partition t-1 starts from 3" in caplog.text
    assert 'set the source option "failOnDataLoss" to "true"' in caplog.text


def test_deleted_or_recreated_topics_follow_fail_on_data_loss(cluster, caplog):
    cluster.set("t", (0, 5), (0, 5))
    r = reader(cluster, startingOffsets="earliest")
    end = latest(r, r.initialOffset())
    cluster.drop("t")
    with pytest.raises(DataLossError, match=r"t-0, t-1 are gone"):
        latest(r, end)
    # Re-created, smaller: the offsets went back.
    cluster.set("t", (0, 2), (0, 2), topic_id="id-new")
    with pytest.raises(DataLossError, match=r"re-created"):
        latest(r, end)
    relaxed = reader(cluster, startingOffsets="earliest", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="lograft.pipelines"):
        back = latest(relaxed, end)
    assert back == {"t": {"0": 2, "1": 2}}
    assert ranges(relaxed, end, back) == []  # nothing read from a range that went back
    assert "offset was changed from 5 to 2" in caplog.text


def test_available_now_stops_at_the_offsets_seen_when_it_began(cluster):
    cluster.set("t", (0, 20))
    r = reader(cluster, startingOffsets="earliest", maxOffsetsPerTrigger="8")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    cluster.set("t", (0, 30), (0, 5))  # arrives after the target was taken
    ends = []
    while (end := latest(r, start, r.getDefaultReadLimit())) != start:
        ends.append(end)
        start = end
    assert ends == [{"t": {"0": 8}}, {"t": {"0": 16}}, {"t": {"0": 20}}]


def test_read_ranges_carry_the_leader_and_split_for_min_partitions(cluster):
    cluster.set("t", (0, 100), (0, 2))
    r = reader(cluster, startingOffsets="earliest", minPartitions="4")
    start = r.initialOffset()
    end = latest(r, start)
    parts = r.partitions(start, end)
    assert len(parts) >= 4
    assert all(p.range.leader_url == f"http://leader-of-{p.range.tp}" for p in parts)
    assert sorted(
        o for p in parts for o in range(p.range.start, p.range.end) if p.range.partition == 0
    ) == list(range(100))


def test_a_lagging_node_view_is_not_data_loss(cluster):
    cluster.set("t", (0, 5), (0, 5))
    r = reader(cluster, startingOffsets="earliest")
    end = latest(r, r.initialOffset())
    cluster.set("t", (0, 7), (0, 6))
    cluster.lagging_view = {TopicPartition("t", 1)}  # one node's topic list lags
    assert latest(r, end) == {"t": {"0": 7, "1": 6}}

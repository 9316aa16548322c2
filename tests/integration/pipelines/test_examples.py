"""The example pipelines (lograft.pipelines.examples) end to end on a real three-node
cluster, each checked against the same computation in plain Python."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from lograft.pipelines.examples import common, enrich_orders, page_views, topic_to_parquet
from tests.integration.pipelines.spark_support import produce

pytestmark = [pytest.mark.timeout(300)]

DAY_MS = 86_400_000


@pytest.mark.slow
def test_page_view_counts_match_plain_python(spark, bootstrap, tmp_path):
    now_ms = int(time.time() * 1000)
    events = page_views.make_events(600, now_ms - now_ms % page_views.WINDOW_MS, seed=7)
    written, expected = page_views.run_demo(
        spark, bootstrap, events, tmp_path / "checkpoints", console=False, timeout_s=240
    )
    # 5 closed one-minute windows of 6 pages; the sixth, partial window stays open.
    assert len(expected) == 5 * len(page_views.PAGES)
    assert sum(expected.values()) < len(events)
    assert written == expected


def test_page_view_reference_counts_only_closed_windows():
    start = 1_700_000_040_000 - 1_700_000_040_000 % 60_000
    events = [
        page_views.PageView("u1", "/", start + 1_000),
        page_views.PageView("u2", "/", start + 59_000),
        page_views.PageView("u1", "/docs", start + 61_000),
        # The watermark is 75 s - 10 s = 65 s: the second window [60 s, 120 s) is open.
        page_views.PageView("u3", "/", start + 75_000),
    ]
    assert page_views.closed_window_counts(events) == {(start, "/"): 2}
    assert page_views.closed_window_counts([]) == {}


@pytest.mark.slow
def test_topic_to_parquet_exports_exactly_the_range_by_date(spark, bootstrap, new_topic, tmp_path):
    topic = new_topic(2)
    base = 1_763_942_400_000  # 2025-11-24T00:00:00Z
    records = [
        {
            "partition": i % 2,
            "key": f"k{i}".encode(),
            "value": f"v{i}".encode(),
            "timestamp_ms": base + (i // 10) * DAY_MS + i,
        }
        for i in range(40)
    ]
    sent = produce(bootstrap, topic, records)
    start = {0: 3, 1: 5}
    end = {0: 17, 1: 20}
    out = tmp_path / "parquet"
    assert (
        topic_to_parquet.main(
            [
                "--bootstrap",
                bootstrap,
                "--topic",
                topic,
                "--out",
                str(out),
                "--starting-offsets",
                common.offsets_json(topic, start),
                "--ending-offsets",
                common.offsets_json(topic, end),
            ]
        )
        == 0
    )
    in_range = [s for s in sent if start[s.partition] <= s.offset < end[s.partition]]
    want_dates = Counter(
        datetime.fromtimestamp(s.timestamp / 1000, UTC).date().isoformat() for s in in_range
    )
    assert sorted(p.name for p in out.glob("date=*")) == [f"date={d}" for d in sorted(want_dates)]
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r["partition"], r["offset"], r["value"]) for r in rows) == sorted(
        (s.partition, s.offset, s.value.decode()) for s in in_range
    )
    assert Counter(str(r["date"]) for r in rows) == want_dates
    # A second append of the same range is caught by the check.
    per_date, complete = topic_to_parquet.check_export(spark, out, topic, start, end)
    assert complete and dict(per_date) == dict(want_dates)
    topic_to_parquet.export(spark, bootstrap, topic, out, start, end)
    assert not topic_to_parquet.check_export(spark, out, topic, start, end)[1]


@pytest.mark.slow
def test_enrichment_matches_plain_python_join(spark, bootstrap, tmp_path):
    orders = enrich_orders.make_orders(80, seed=3)
    got, expected = enrich_orders.run_demo(
        spark, bootstrap, orders, enrich_orders.CUSTOMERS, tmp_path / "checkpoint", timeout_s=240
    )
    assert got == expected
    assert any(v["name"] is None for v in got.values()), "some orders are of unknown customers"
    assert any(v["name"] is not None for v in got.values())

"""Spark's offset JSON, cutting ranges into tasks, and the per-trigger cap."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from lograft.pipelines.offsets import (
    OffsetRange,
    cap_total,
    from_spark,
    split_ranges,
    to_spark,
    total_lag,
)
from lograft.protocol.topic_partition import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_spark_json_is_canonical_and_round_trips():
    offsets = {TopicPartition("b", 0): 3, TopicPartition("a", 10): 1, TopicPartition("a", 2): 7}
    doc = to_spark(offsets)
    # Same positions in any order give the same JSON (Spark compares offsets as JSON).
    assert json.dumps(doc) == json.dumps(to_spark(dict(reversed(list(offsets.items())))))
    assert json.dumps(doc) == '{"a": {"2": 7, "10": 1}, "b": {"0": 3}}'
    assert from_spark(json.loads(json.dumps(doc))) == offsets
    assert from_spark(None) == {}


def _cover(ranges: list[OffsetRange]) -> dict[TopicPartition, list[int]]:
    out: dict[TopicPartition, list[int]] = {}
    for r in ranges:
        out.setdefault(r.tp, []).extend(range(r.start, r.end))
    return out


def test_min_partitions_cuts_the_big_ranges_only():
    big = OffsetRange("a", 0, 0, 100, "http://leader")
    small = OffsetRange("a", 1, 5, 10)
    out = split_ranges([big, small], min_partitions=6, max_records_per_partition=None)
    assert len(out) >= 6
    assert small in out
    assert _cover(out) == _cover([big, small])
    assert all(r.leader_url == "http://leader" for r in out if r.partition == 0)


def test_max_records_per_partition_and_empty_ranges():
    out = split_ranges(
        [OffsetRange("a", 0, 10, 35), OffsetRange("a", 1, 4, 4)],
        min_partitions=None,
        max_records_per_partition=10,
    )
    assert [(r.start, r.end) for r in out] == [(10, 18), (18, 26), (26, 35)]


@given(
    st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=20),
    st.one_of(st.none(), st.integers(min_value=1, max_value=50)),
)
def test_split_ranges_covers_every_offset_once(sizes, min_parts, max_records):
    ranges = [OffsetRange("t", p, 1000 * p, 1000 * p + n) for p, n in enumerate(sizes)]
    out = split_ranges(ranges, min_partitions=min_parts, max_records_per_partition=max_records)
    cover = _cover(out)
    for r in ranges:
        assert sorted(cover.get(r.tp, [])) == list(range(r.start, r.end))
    if max_records is not None:
        assert all(r.size <= max_records for r in out)


def test_cap_shares_the_limit_in_proportion_to_lag():
    start = {A0: 0, A1: 0, B0: 100}
    end = {A0: 900, A1: 90, B0: 110}
    capped = cap_total(start, end, 100)
    assert total_lag(start, capped) == 100
    assert capped[A0] - start[A0] > capped[A1] - start[A1] > 0
    assert capped[B0] - start[B0] >= 1  # a small lag is not starved
    # Enough room: unchanged. New partitions (not in start) keep their end.
    assert cap_total(start, end, 5000) == end
    assert cap_total({A0: 0}, {A0: 50, A1: 7}, 10) == {A0: 10, A1: 7}


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=3000),
)
def test_cap_never_exceeds_the_limit_nor_the_end(pairs, limit):
    start = {TopicPartition("t", i): a for i, (a, _b) in enumerate(pairs)}
    end = {TopicPartition("t", i): max(a, b) for i, (a, b) in enumerate(pairs)}
    capped = cap_total(start, end, limit)
    assert total_lag(start, capped) == min(limit, total_lag(start, end))
    for tp in end:
        assert start[tp] <= capped[tp] <= end[tp]

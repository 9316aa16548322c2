"""The in-order offsets answer is what orjson renders of one dict per record."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.api.offsets_json import offsets_entries


def _orjson(partition: int, first: int, count: int, duplicate: bool) -> str:
    extra = {"duplicate": True} if duplicate else {}
    entries = [{"partition": partition, "offset": n, **extra} for n in range(first, first + count)]
    return orjson.dumps(entries).decode()[1:-1]


@pytest.mark.parametrize("duplicate", [False, True])
@pytest.mark.parametrize(
    ("first", "count"),
    [
        (0, 1),
        (0, 500),
        (998, 5),  # from below 1000 across it
        (999, 1),
        (1000, 1),
        (1999, 2),  # across a block
        (123_456_789, 500),
        (10**12 - 3, 7),  # the thousands gain a digit
        (5_000, 10_000),  # ten whole blocks
        (2**63 - 501, 500),  # the largest offsets
    ],
)
def test_entries_match_orjson(first: int, count: int, duplicate: bool) -> None:
    for partition in (0, 7, 1234):
        assert offsets_entries(partition, first, count, duplicate=duplicate) == _orjson(
            partition, first, count, duplicate
        )


@given(
    partition=st.integers(0, 2**31 - 1),
    first=st.integers(0, 2**62),
    count=st.integers(1, 3_000),
    duplicate=st.booleans(),
)
def test_any_range_matches_orjson(partition: int, first: int, count: int, duplicate: bool) -> None:
    assert offsets_entries(partition, first, count, duplicate=duplicate) == _orjson(
        partition, first, count, duplicate
    )


@pytest.mark.parametrize("duplicate", [False, True])
@pytest.mark.parametrize(
    ("first", "count"),
    [(0, 0), (5_000, 0), (7, -3), (-1, 3), (-2_000, 2_500), (-(2**63), 2)],
)
def test_counts_below_one_and_negative_offsets_match_orjson(first, count, duplicate):
    """Ranges no answer has: no precondition guards them (it was an assert,
    gone under python -O, where a count of 0 rendered '{"partition":3,"offset":}');
    the entries are exactly orjson's for any ints, none for no offsets."""
    assert offsets_entries(3, first, count, duplicate=duplicate) == _orjson(
        3, first, max(count, 0), duplicate
    )

"""The one strict integer parser for query, path, cursor and JSON integers."""

from __future__ import annotations

import pytest

from lograft.api.request_ints import (
    INT32_MAX,
    INT64_MAX,
    QUERY_INT_MAX,
    json_int,
    parse_int,
    parse_partition,
    query_int,
)
from lograft.errors import InvalidRequestError

# Each of these is a number to Python's int() (or passes str.isdigit()), and
# none is an integer in this API.
NOT_INTEGERS = [
    "",
    "0_0",
    "+0",
    " 0",
    "0 ",
    "0\n",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: int() reads 3
    "\u00b2",  # SUPERSCRIPT TWO: isdigit() is true, int() fails
    "\uff11",  # FULLWIDTH DIGIT ONE
    "1.0",
    "1e3",
    "0x10",
    "--1",
    "-",
    "1" * 5000,  # int() would refuse it only past sys.get_int_max_str_digits()
]


@pytest.mark.parametrize("text", NOT_INTEGERS)
def test_anything_but_ascii_digits_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_int(text, "offset")
    assert "offset=" in info.value.message
    assert info.value.details["field"] == "offset"
    assert len(info.value.message) < 200  # a long value is not echoed whole


@pytest.mark.parametrize(
    ("text", "value"), [("0", 0), ("007", 7), (str(INT64_MAX), INT64_MAX), ("42", 42)]
)
def test_ascii_digits_are_read(text: str, value: int) -> None:
    assert parse_int(text, "n") == value


def test_a_minus_sign_only_where_negatives_are_allowed() -> None:
    with pytest.raises(InvalidRequestError):
        parse_int("-1", "offset")
    assert parse_int("-1", "epoch", minimum=-1) == -1
    with pytest.raises(InvalidRequestError):
        parse_int("-2", "epoch", minimum=-1)


@pytest.mark.parametrize("text", [str(INT64_MAX + 1), str(2**70), "9" * 19])
def test_values_past_the_maximum_are_refused(text: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_int(text, "offset", maximum=QUERY_INT_MAX)
    assert info.value.details["maximum"] == QUERY_INT_MAX


def test_partitions_are_int32() -> None:
    assert parse_partition(str(INT32_MAX)) == INT32_MAX
    for text in (str(INT32_MAX + 1), "-1", "\u00b2"):
        with pytest.raises(InvalidRequestError):
            parse_partition(text)


def test_query_int_default_and_required() -> None:
    assert query_int({}, "max_bytes", 7) == 7
    assert query_int({"max_bytes": "9"}, "max_bytes", 7) == 9
    with pytest.raises(InvalidRequestError, match="required"):
        query_int({}, "offset", None)


@pytest.mark.parametrize("value", [True, False, 1.0, 1.5, "1", None, [1], {"a": 1}])
def test_json_integers_are_ints_not_bools_floats_or_text(value: object) -> None:
    with pytest.raises(InvalidRequestError):
        json_int(value, "partition")


@pytest.mark.parametrize("value", [-1, INT64_MAX + 1, 2**64 - 1])
def test_json_integers_out_of_range_are_refused(value: int) -> None:
    with pytest.raises(InvalidRequestError) as info:
        json_int(value, "timestamp")
    assert info.value.details == {"field": "timestamp", "minimum": 0, "maximum": INT64_MAX}


def test_json_integers_in_range_are_kept() -> None:
    assert json_int(0, "t") == 0
    assert json_int(INT64_MAX, "t") == INT64_MAX
    assert json_int(-1, "epoch", minimum=-1, maximum=INT32_MAX) == -1

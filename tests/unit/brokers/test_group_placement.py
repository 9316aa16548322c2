"""Java's String.hashCode and Kafka's coordinator partition rule.

The vectors were printed by OpenJDK 17 (`s.hashCode()` and
`(h == Integer.MIN_VALUE ? 0 : Math.abs(h)) % n`, which is Kafka's
`Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`); the
property test checks the implementation against an independent evaluation of
the polynomial definition.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.brokers.groups.placement import (
    coordinator_partition,
    java_string_hashcode,
    kafka_abs,
)

# (string, String.hashCode(), partition of 50, partition of 7), from Java 17.
JAVA_VECTORS = [
    ("", 0, 0, 0),
    ("a", 97, 47, 6),
    ("hello", 99162322, 22, 0),
    ("group-1", 293427299, 49, 4),
    ("my-group", -1906497762, 12, 1),
    ("console-consumer-12345", 158455506, 6, 6),
    # The famous string whose hash is Integer.MIN_VALUE: Math.abs would keep it
    # negative; Kafka's Utils.abs maps it to 0.
    ("polygenelubricants", -2147483648, 0, 0),
    ("Aa", 2112, 12, 5),
    ("BB", 2112, 12, 5),
    ("\u00e9t\u00e9", 227742, 42, 4),
    # U+1F600 is two UTF-16 code units in Java.
    ("\U0001f600grp", 1276929186, 36, 1),
    ("a-very-long-consumer-group-name-that-overflows-int32-many-times", 578051446, 46, 0),
    ("orders-service", 23943117, 17, 2),
]


@pytest.mark.parametrize(("s", "hashcode", "p50", "p7"), JAVA_VECTORS)
def test_matches_java(s: str, hashcode: int, p50: int, p7: int) -> None:
    assert java_string_hashcode(s) == hashcode
    assert coordinator_partition(s, 50) == p50
    assert coordinator_partition(s, 7) == p7


def _polynomial_hash(s: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, then wrapped to int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@given(st.text(max_size=40))
def test_equals_polynomial_definition(s: str) -> None:
    assert java_string_hashcode(s) == _polynomial_hash(s)


@given(st.text(max_size=40), st.integers(min_value=1, max_value=1000))
def test_partition_in_range(s: str, partitions: int) -> None:
    assert 0 <= coordinator_partition(s, partitions) < partitions


def test_kafka_abs() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(2**31 - 1) == 2**31 - 1


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError):
        coordinator_partition("g", 0)

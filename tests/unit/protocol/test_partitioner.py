"""murmur2 equals Kafka's Java `Utils.murmur2` (vectors from Kafka's UtilsTest
and kafka-python's independent port as an oracle), partition_for_key uses
toPositive rather than abs, and the keyless partitioner is sticky per request
and round-robin across requests."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from lograft.protocol import batch as batch_mod
from lograft.protocol.partitioner import (
    KeylessPartitioner,
    murmur2,
    murmur2_python,
    partition_for_key,
    to_positive,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (signed Java ints).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@settings(max_examples=2000)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(key: bytes) -> None:
    # kafka-python returns the same 32 bits unsigned.
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert -(2**31) <= murmur2(key) < 2**31


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_the_pure_python_murmur2_matches_kafka_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2_python(key) == expected


@pytest.mark.skipif(batch_mod._recordencode is None, reason="the C encoder is not built")
@settings(max_examples=2000)
@given(st.binary(max_size=64))
def test_the_c_murmur2_is_the_one_in_use_and_agrees_with_python(key: bytes) -> None:
    assert batch_mod._recordencode is not None
    assert murmur2 is batch_mod._recordencode.murmur2
    assert murmur2(key) == murmur2_python(key) == murmur2(bytearray(key))


@settings(max_examples=1000)
@given(st.binary(max_size=40), st.integers(min_value=1, max_value=10_000))
def test_partition_for_key_matches_kafka_python_default_partitioner(key: bytes, n: int) -> None:
    # DefaultPartitioner.partition in kafka-python: (murmur2 & 0x7fffffff) % n.
    assert partition_for_key(key, n) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % n


def test_every_tail_length_and_high_bytes() -> None:
    # Lengths 0..8 exercise every fall-through of the tail switch; 0xff bytes
    # catch a signed-byte mistake (Java bytes are signed, masked with 0xff).
    for length in range(9):
        for fill in (0x00, 0x7F, 0x80, 0xFF):
            key = bytes([fill]) * length
            assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)


def test_to_positive_is_not_abs() -> None:
    # For a negative hash, toPositive and abs give different partitions.
    h = murmur2(b"foobar")
    assert h < 0
    assert partition_for_key(b"foobar", 7) == (h & 0x7FFFFFFF) % 7
    assert partition_for_key(b"foobar", 7) != abs(h) % 7
    assert to_positive(-(2**31)) == 0


def test_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
    with pytest.raises(ValueError):
        KeylessPartitioner().next_request_partition(0)


def test_keyless_round_robin_across_requests() -> None:
    p = KeylessPartitioner()
    assert [p.next_request_partition(3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


# Starts far enough below 2**31 that the counter does not wrap in the test
# (the wrap is Kafka's too and breaks evenness once every 2**31 requests).
@given(st.integers(min_value=0, max_value=2**31 - 201), st.integers(min_value=1, max_value=50))
def test_keyless_spreads_evenly_from_any_start(start: int, n: int) -> None:
    p = KeylessPartitioner(start)
    picks = [p.next_request_partition(n) for _ in range(n * 4)]
    assert all(picks.count(i) == 4 for i in range(n))
    # Consecutive requests never land on the same partition when n > 1.
    if n > 1:
        assert all(a != b for a, b in itertools.pairwise(picks))


def test_keyless_uses_only_available_partitions() -> None:
    p = KeylessPartitioner()
    picks = [p.next_request_partition(6, available=[1, 4]) for _ in range(4)]
    assert picks == [1, 4, 1, 4]
    # Empty availability falls back to every partition, as Kafka does.
    assert p.next_request_partition(6, available=[]) == 4 % 6
    with pytest.raises(ValueError):
        p.next_request_partition(3, available=[5])


def test_keyless_counter_wraps_without_negative_partitions() -> None:
    p = KeylessPartitioner(2**31 - 1)
    assert p.next_request_partition(10) == (2**31 - 1) % 10
    assert p.next_request_partition(10) == 0

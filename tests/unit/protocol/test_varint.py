"""Zigzag varints: round trips over the whole int64 range, Kafka's byte
layout, and refusal of malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.errors import CorruptRecordError
from lograft.protocol.varint import decode_varint, encode_varint, varint_size

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
int64 = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)


def _reference_encode(value: int) -> bytes:
    """Protobuf's zigzag varint written out longhand, independent of the code."""
    z = (value << 1) if value >= 0 else ((-value) << 1) - 1
    out = bytearray()
    while True:
        group = z & 0x7F
        z >>= 7
        if z:
            out.append(group | 0x80)
        else:
            out.append(group)
            return bytes(out)


@settings(deadline=None)
@given(int64)
def test_round_trip_int64(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert varint_size(value) == len(encoded)


@settings(deadline=None)
@given(int64)
def test_matches_reference_encoding(value):
    assert encode_varint(value) == _reference_encode(value)


@settings(deadline=None)
@given(st.lists(int64, min_size=1, max_size=20), st.binary(max_size=4))
def test_concatenated_varints_decode_in_sequence(values, prefix):
    buf = prefix + b"".join(encode_varint(v) for v in values)
    pos = len(prefix)
    for v in values:
        got, pos = decode_varint(buf, pos)
        assert got == v
    assert pos == len(buf)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-2, b"\x03"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        ((1 << 31) - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(1 << 31), b"\xff\xff\xff\xff\x0f"),
        (INT64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (INT64_MIN, b"\xff" * 9 + b"\x01"),
    ],
)
def test_known_encodings(value, encoded):
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_extremes_take_ten_bytes_and_small_values_one():
    assert varint_size(INT64_MAX) == 10
    assert varint_size(INT64_MIN) == 10
    assert varint_size(0) == 1
    assert varint_size(-64) == 1
    assert varint_size(64) == 2


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 1 << 80])
def test_encode_refuses_values_outside_int64(value):
    with pytest.raises(ValueError):
        encode_varint(value)


@settings(deadline=None)
@given(int64)
def test_truncated_varint_is_corrupt(value):
    encoded = encode_varint(value)
    for cut in range(len(encoded)):
        with pytest.raises(CorruptRecordError):
            decode_varint(encoded[:cut], 0)


def test_varint_longer_than_ten_bytes_is_corrupt():
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80" * 10 + b"\x00", 0)


@pytest.mark.parametrize("last", [0x02, 0x7F])
def test_ten_byte_varint_with_more_than_64_bits_is_corrupt(last):
    # Nine continuation bytes carry 63 bits; the tenth may add only bit 63.
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\xff" * 9 + bytes([last]), 0)


def test_decode_at_end_of_buffer_is_corrupt():
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x02", 1)

"""Zigzag varints as Kafka's record format uses them (protobuf style).

A signed value v is zigzag-mapped to (v << 1) ^ (v >> 63) and written 7 bits
at a time, least significant group first, with the high bit set on every byte
but the last. Kafka's `varint` is the 32-bit form and `varlong` the 64-bit
form; they share the encoding, only the allowed range differs.
"""

from __future__ import annotations

from lograft.errors import CorruptRecordError

_VARLONG_MAX_BYTES = 10
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

# Most varints in a record (lengths, deltas, the -1 of a null key) are small;
# a table of their encodings keeps the per-record build cost low.
_SMALL_LIMIT = 1 << 13


def _encode_slow(value: int) -> bytes:
    if value < _INT64_MIN or value > _INT64_MAX:
        raise ValueError(f"varint out of int64 range: {value}")
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = {v: _encode_slow(v) for v in range(-_SMALL_LIMIT, _SMALL_LIMIT)}


def encode_varint(value: int) -> bytes:
    """The zigzag varint bytes of a signed 64-bit value."""
    small = _SMALL.get(value)
    if small is not None:
        return small
    return _encode_slow(value)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode one zigzag varint at `pos`; returns (value, position after it).

    Raises CorruptRecordError when the buffer ends mid-varint, the varint is
    longer than ten bytes, or it carries more than 64 bits (a tenth byte above 1),
    which no int64 encodes.
    """
    b = buf[pos] if pos < len(buf) else -1
    if 0 <= b < 0x80:
        # Fast path: one byte.
        return (b >> 1) ^ -(b & 1), pos + 1
    result = 0
    shift = 0
    end = len(buf)
    start = pos
    while True:
        if pos >= end:
            raise CorruptRecordError("record data ends in the middle of a varint", position=start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if pos - start >= _VARLONG_MAX_BYTES:
            raise CorruptRecordError("varint longer than 10 bytes", position=start)
    if result >> 64:
        raise CorruptRecordError("varint carries more than 64 bits", position=start)
    return (result >> 1) ^ -(result & 1), pos


def varint_size(value: int) -> int:
    return len(encode_varint(value))

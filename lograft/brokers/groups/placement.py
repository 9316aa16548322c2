"""Which `__consumer_offsets` partition, and so which broker, coordinates a group.

Kafka's rule, bit for bit: `Utils.abs(groupId.hashCode()) % partitionCount`,
where `hashCode` is Java's `String.hashCode` and `Utils.abs` maps
`Integer.MIN_VALUE` to 0 (Java's `Math.abs` would return it unchanged, a
negative partition). The coordinator of a group is the leader of that
partition.

`String.hashCode` is `s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1]` over the
string's UTF-16 code units (a character outside the Basic Multilingual Plane
counts as its two surrogates), in wrapping 32-bit arithmetic, read as a
signed int. Invariant: a group name lands on the same partition number as it
would in Kafka with the same partition count.
"""

from __future__ import annotations

import struct

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

_MASK32 = 0xFFFF_FFFF
_INT32_MIN = -0x8000_0000


def _to_signed32(n: int) -> int:
    return n - 0x1_0000_0000 if n & 0x8000_0000 else n


def java_string_hashcode(s: str) -> int:
    """Java's `String.hashCode()` of `s`: a signed 32-bit int."""
    # surrogatepass: a Python str may hold lone surrogates, and so may a Java
    # String; both hash them as the code units they are.
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & _MASK32
    return _to_signed32(h)


def kafka_abs(n: int) -> int:
    """Kafka's `Utils.abs`: |n|, except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == _INT32_MIN else abs(n)


def coordinator_partition(group_id: str, offsets_topic_partitions: int) -> int:
    """The `__consumer_offsets` partition that holds `group_id`'s records."""
    if offsets_topic_partitions <= 0:
        raise ValueError(
            f"offsets_topic_partitions must be positive, got {offsets_topic_partitions}"
        )
    return kafka_abs(java_string_hashcode(group_id)) % offsets_topic_partitions

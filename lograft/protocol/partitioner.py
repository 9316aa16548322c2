"""Which partition a record goes to.

Keyed records: Kafka's murmur2 partitioner, bit for bit. `murmur2` is the Java
client's `Utils.murmur2` (seed 0x9747b28c, 32-bit wrapping multiplication,
logical right shifts) and returns the same *signed* 32-bit int Java does;
`partition_for_key` is `BuiltInPartitioner.partitionForKey`:
`toPositive(murmur2(key)) % num_partitions` where `toPositive(n) = n & 0x7fffffff`
(not `abs`, which would differ for negative hashes and overflow on MIN_VALUE).
Invariant: a key lands on the same partition number as it would in Kafka with
the same partition count.

Keyless records: `KeylessPartitioner` is sticky per request and round-robin
across requests: every keyless record of one request goes to one partition, and
the next request moves on to the next partition. The state is one counter.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from lograft.protocol.batch import _recordencode

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def _to_signed32(n: int) -> int:
    return n - 0x1_0000_0000 if n & 0x8000_0000 else n


def murmur2_python(data: bytes | bytearray | memoryview) -> int:
    """Kafka's `Utils.murmur2`: a signed 32-bit hash, equal to Java's result.
    The pure-Python twin of `_recordencode.murmur2` (`murmur2` is the C one
    when it is built)."""
    buf = bytes(data)
    length = len(buf)
    h = (_SEED ^ length) & _MASK32
    blocks = length // 4
    # Java reads each 4-byte block little-endian regardless of platform.
    for k in struct.unpack_from(f"<{blocks}I", buf) if blocks else ():
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & ~3
    rest = length & 3
    # The Java switch falls through from case 3 to case 1; only case 1 multiplies.
    if rest == 3:
        h ^= buf[tail + 2] << 16
    if rest >= 2:
        h ^= buf[tail + 1] << 8
    if rest >= 1:
        h ^= buf[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _to_signed32(h)


murmur2: Callable[[bytes | bytearray | memoryview], int] = (
    _recordencode.murmur2 if _recordencode is not None else murmur2_python
)


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit of a 32-bit int."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key.

    An empty key is a key (it hashes); a null key is keyless and goes through
    `KeylessPartitioner` instead, as in Kafka.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class KeylessPartitioner:
    """Sticky per request, round-robin across requests.

    One instance per topic gives each topic its own rotation; one shared
    instance still spreads requests evenly, only the phase is shared. The
    counter wraps at 2**31 as Kafka's does, so it stays a small int forever.
    Seed `start` randomly in the broker so that restarted brokers do not all
    begin on partition 0; tests pass a fixed start.
    """

    __slots__ = ("_counter",)

    def __init__(self, start: int = 0) -> None:
        self._counter = to_positive(start)

    def next_request_partition(
        self, num_partitions: int, available: Sequence[int] | None = None
    ) -> int:
        """The partition for every keyless record of the next request.

        `available` (partitions that have a leader right now) narrows the choice
        as Kafka's RoundRobinPartitioner does; empty or None means all of
        `range(num_partitions)`.
        """
        if num_partitions <= 0:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        n = self._counter
        self._counter = (n + 1) & 0x7FFFFFFF
        if available:
            choice = available[n % len(available)]
            if not 0 <= choice < num_partitions:
                raise ValueError(f"available partition {choice} not in [0, {num_partitions})")
            return choice
        return n % num_partitions

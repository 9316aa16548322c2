"""Compression codecs of the records section of a RecordBatch v2.

The codec is named by attribute bits 0-2 of the batch: 0 none, 1 gzip,
2 snappy, 3 lz4, 4 zstd (Kafka's numbering). gzip is RFC 1952 (what Java's
GZIPOutputStream writes), lz4 is the LZ4 frame format (Kafka >= 0.10 with
magic 2), zstd is a zstd frame. Snappy in Kafka uses the xerial framing of
snappy-java, which no maintained Python library writes; lograft rejects it
with UNSUPPORTED_COMPRESSION_TYPE rather than guess at the framing.
"""

from __future__ import annotations

import enum
import gzip
import zlib

import lz4.frame
import zstandard

from lograft.errors import CorruptRecordError, UnsupportedCompressionError

# A decompressed records section larger than this is refused: a small batch
# must not be able to expand into unbounded memory (a "zip bomb").
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        try:
            return cls[name.upper()]
        except KeyError:
            names = ", ".join(c.name.lower() for c in cls)
            raise UnsupportedCompressionError(
                f"unknown compression {name!r}; use one of {names}"
            ) from None


_zstd_c = zstandard.ZstdCompressor(level=3)


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec is Compression.LZ4:
        return lz4.frame.compress(data)
    if codec is Compression.ZSTD:
        return _zstd_c.compress(data)
    raise UnsupportedCompressionError(f"compression {codec.name.lower()} is not supported")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a records section; corrupt input raises CorruptRecordError."""
    raw = bytes(data)
    try:
        if codec == Compression.NONE:
            return raw
        if codec == Compression.GZIP:
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = d.decompress(raw, DECOMPRESSED_BYTES_MAX)
            if d.unconsumed_tail:
                raise CorruptRecordError(_too_big())
            return out
        if codec == Compression.LZ4:
            out = lz4.frame.decompress(raw)
        elif codec == Compression.ZSTD:
            out = zstandard.ZstdDecompressor().decompress(
                raw, max_output_size=DECOMPRESSED_BYTES_MAX
            )
        else:
            name = (
                Compression(codec).name.lower()
                if codec in Compression._value2member_map_
                else codec
            )
            raise UnsupportedCompressionError(f"compression {name} is not supported")
    except (zlib.error, RuntimeError, zstandard.ZstdError, OSError, EOFError) as exc:
        raise CorruptRecordError(f"records section does not decompress: {exc}") from exc
    if len(out) > DECOMPRESSED_BYTES_MAX:
        raise CorruptRecordError(_too_big())
    return out


def _too_big() -> str:
    return f"decompressed records exceed {DECOMPRESSED_BYTES_MAX} bytes"

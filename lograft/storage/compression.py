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
    """Decompress a records section; corrupt input raises CorruptRecordError.

    Output is bounded by DECOMPRESSED_BYTES_MAX while decompressing, never by
    allocating first and checking after: a forged size field or a bomb costs
    at most the limit. A stream that ends early is corrupt, not short.
    """
    raw = bytes(data)
    try:
        if codec == Compression.NONE:
            return raw
        if codec == Compression.GZIP:
            return _gunzip(raw)
        if codec == Compression.LZ4:
            return _unlz4(raw)
        if codec == Compression.ZSTD:
            return _unzstd(raw)
        name = (
            Compression(codec).name.lower() if codec in Compression._value2member_map_ else codec
        )
        raise UnsupportedCompressionError(f"compression {name} is not supported")
    except (zlib.error, RuntimeError, zstandard.ZstdError, OSError, EOFError) as exc:
        raise CorruptRecordError(f"records section does not decompress: {exc}") from exc


_GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(raw: bytes) -> bytes:
    # Concatenated members form one stream, as Java's GZIPInputStream reads
    # them; bytes after the last member that do not start another member are
    # ignored, as it ignores them.
    out = bytearray()
    rest = raw
    while True:
        d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        out += d.decompress(rest, DECOMPRESSED_BYTES_MAX - len(out) + 1)
        if len(out) > DECOMPRESSED_BYTES_MAX:
            raise CorruptRecordError(_too_big())
        if not d.eof:
            raise CorruptRecordError("records section does not decompress: gzip stream ends early")
        rest = d.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            return bytes(out)


def _unlz4(raw: bytes) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(raw, max_length=DECOMPRESSED_BYTES_MAX + 1)
    if len(out) > DECOMPRESSED_BYTES_MAX:
        raise CorruptRecordError(_too_big())
    if not d.eof:
        raise CorruptRecordError("records section does not decompress: lz4 frame ends early")
    return out


def _unzstd(raw: bytes) -> bytes:
    # python-zstandard allocates the frame's declared content size up front
    # (max_output_size only applies when the frame declares none), so check
    # the declaration before trusting it.
    declared = zstandard.get_frame_parameters(raw).content_size
    if declared != zstandard.CONTENTSIZE_UNKNOWN and declared > DECOMPRESSED_BYTES_MAX:
        raise CorruptRecordError(_too_big())
    out = zstandard.ZstdDecompressor().decompress(raw, max_output_size=DECOMPRESSED_BYTES_MAX)
    if len(out) > DECOMPRESSED_BYTES_MAX:
        raise CorruptRecordError(_too_big())
    return out


def _too_big() -> str:
    return f"decompressed records exceed {DECOMPRESSED_BYTES_MAX} bytes"

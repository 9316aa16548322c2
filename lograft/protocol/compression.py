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
from dataclasses import dataclass

import lz4.frame
import zstandard

from lograft.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionError

# A decompressed records section larger than this is refused (MESSAGE_TOO_LARGE):
# a small batch must not be able to expand into unbounded memory (a "zip
# bomb"). Callers bound it further: per record, per request, per response.
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024


@dataclass(slots=True)
class DecompressionBudget:
    """Decompressed bytes the batches of one request (or one response) may
    still take, across batches; `name` is the limit's name, for errors. Used
    by one thread at a time."""

    limit: int
    name: str
    used: int = 0
    sections: int = 0  # sections spent on (a reader lets its first one through)

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)

    def spend(self, size: int) -> None:
        self.used += size
        self.sections += 1


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
        framed: bytes = lz4.frame.compress(data)  # lz4 has no type information
        return framed
    if codec is Compression.ZSTD:
        return _zstd_c.compress(data)
    raise UnsupportedCompressionError(f"compression {codec.name.lower()} is not supported")


def decompress(codec: int, data: bytes | memoryview, limit: int | None = None) -> bytes:
    """Decompress a records section; corrupt input raises CorruptRecordError.

    Output is bounded while decompressing, never by allocating first and
    checking after: a forged size field or a bomb costs at most the bound.
    The bound is `limit` (a caller's tighter one: what a request or a
    record may still take), never more than DECOMPRESSED_BYTES_MAX (one
    batch); past it RecordTooLargeError (details: `limit`) is raised. A
    stream that ends early is corrupt, not short.
    """
    bound = DECOMPRESSED_BYTES_MAX if limit is None else min(limit, DECOMPRESSED_BYTES_MAX)
    raw = bytes(data)
    try:
        if codec == Compression.NONE:
            return raw
        if codec == Compression.GZIP:
            return _gunzip(raw, bound)
        if codec == Compression.LZ4:
            return _unlz4(raw, bound)
        if codec == Compression.ZSTD:
            return _unzstd(raw, bound)
        name = Compression(codec).name.lower() if codec in Compression._value2member_map_ else codec
        raise UnsupportedCompressionError(f"compression {name} is not supported")
    except (zlib.error, RuntimeError, zstandard.ZstdError, OSError, EOFError) as exc:
        raise CorruptRecordError(f"records section does not decompress: {exc}") from exc


_GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(raw: bytes, limit: int) -> bytes:
    # Concatenated members form one stream, as Java's GZIPInputStream reads
    # them; bytes after the last member that do not start another member are
    # ignored, as it ignores them.
    out = bytearray()
    rest = raw
    while True:
        d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        out += d.decompress(rest, limit - len(out) + 1)
        if len(out) > limit:
            raise _too_big(limit)
        if not d.eof:
            raise CorruptRecordError("records section does not decompress: gzip stream ends early")
        rest = d.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            return bytes(out)


def _unlz4(raw: bytes, limit: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out: bytes = d.decompress(raw, max_length=limit + 1)  # lz4 has no type information
    if len(out) > limit:
        raise _too_big(limit)
    if not d.eof:
        raise CorruptRecordError("records section does not decompress: lz4 frame ends early")
    return out


# Reading an undeclared-size zstd frame again to tell a bomb from a broken
# frame takes its output in pieces of this many bytes.
_ZSTD_PROBE_READ_BYTES = 1 << 20


def _unzstd(raw: bytes, limit: int) -> bytes:
    # python-zstandard allocates the frame's declared content size up front
    # (max_output_size only applies when the frame declares none), so check
    # the declaration before trusting it.
    declared = zstandard.get_frame_parameters(raw).content_size
    if declared != zstandard.CONTENTSIZE_UNKNOWN:
        if declared > limit:
            raise _too_big(limit)
        return zstandard.ZstdDecompressor().decompress(raw)
    try:
        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=limit)
    except zstandard.ZstdError:
        # One error for a broken frame and for one that inflates past the
        # bound (zstd-jni, the Java producer, declares no size): read it
        # again, at most one byte past the bound, to say which.
        if _zstd_inflates_past(raw, limit):
            raise _too_big(limit) from None
        raise


def _zstd_inflates_past(raw: bytes, limit: int) -> bool:
    total = 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            while total <= limit:
                piece = reader.read(min(limit + 1 - total, _ZSTD_PROBE_READ_BYTES))
                if not piece:
                    return False
                total += len(piece)
    except zstandard.ZstdError:
        return False
    return True


def _too_big(limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"records section decompresses to more than {limit} bytes", limit=limit
    )

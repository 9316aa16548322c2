"""Compression codecs of a records section: round trips, interop with other
writers' framing, and refusal of truncated streams and decompression bombs
without first allocating the bomb."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

import lograft.protocol.compression as compression
from lograft.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionError
from lograft.protocol.compression import Compression, compress, decompress

CODECS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
SMALL_LIMIT = 1 << 20


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=5000))
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


@pytest.mark.parametrize(
    ("codec", "encode"),
    [
        (Compression.GZIP, kafka_codec.gzip_encode),
        (Compression.LZ4, kafka_codec.lz4_encode),
        (Compression.ZSTD, kafka_codec.zstd_encode),
    ],
)
def test_reads_what_kafka_python_compresses(codec, encode):
    data = b"".join(b"record %d;" % i for i in range(2000))
    assert decompress(codec, encode(data)) == data


@pytest.mark.parametrize(
    ("codec", "decode"),
    [
        (Compression.GZIP, kafka_codec.gzip_decode),
        (Compression.LZ4, kafka_codec.lz4_decode),
        (Compression.ZSTD, kafka_codec.zstd_decode),
    ],
)
def test_kafka_python_reads_what_we_compress(codec, decode):
    data = b"".join(b"record %d;" % i for i in range(2000))
    assert decode(compress(codec, data)) == data


def test_gzip_ignores_bytes_after_the_last_member_that_start_no_member():
    # As Java's GZIPInputStream does.
    data = b"payload" * 100
    assert decompress(Compression.GZIP, gzip.compress(data) + b"\x00\x00junk") == data


def test_gzip_truncated_second_member_is_corrupt():
    data = b"payload" * 100
    second = gzip.compress(data)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.GZIP, gzip.compress(data) + second[: len(second) // 2])


def test_gzip_with_several_members_is_read_whole():
    # Java's GZIPInputStream (and Python's gzip module) read concatenated
    # members as one stream; a writer may flush a member per chunk.
    data = bytes(range(256)) * 20
    parts = (data[:1000], data[1000:3000], data[3000:])
    section = b"".join(gzip.compress(p) for p in parts)
    assert decompress(Compression.GZIP, section) == data


def test_zstd_frame_without_content_size_is_read():
    # zstd-jni's ZstdOutputStream (the Java producer) writes no content size.
    data = b"abc" * 5000
    section = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(Compression.ZSTD, section) == data


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_truncated_stream_is_corrupt(codec):
    data = bytes(range(256)) * 40
    section = compress(codec, data)
    for cut in sorted({1, 10, len(section) // 2, len(section) - 4, len(section) - 1}):
        with pytest.raises(CorruptRecordError):
            decompress(codec, section[:cut])


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_garbage_is_corrupt(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"definitely not a compressed stream" * 3)


BOMBS = {
    "gzip": (Compression.GZIP, gzip.compress),
    "lz4": (Compression.LZ4, lz4.frame.compress),
    "zstd": (Compression.ZSTD, zstandard.ZstdCompressor().compress),
    "zstd-no-size": (
        Compression.ZSTD,
        zstandard.ZstdCompressor(write_content_size=False).compress,
    ),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bomb_is_refused_without_allocating_it(name, monkeypatch):
    monkeypatch.setattr(compression, "DECOMPRESSED_BYTES_MAX", SMALL_LIMIT)
    codec, make = BOMBS[name]
    section = make(bytes(16 * SMALL_LIMIT))
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError) as info:
            decompress(codec, section)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * SMALL_LIMIT, f"peak {peak} bytes while refusing a bomb"
    assert info.value.details["limit"] == SMALL_LIMIT


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_callers_tighter_limit_stops_inflation_early(name):
    codec, make = BOMBS[name]
    section = make(bytes(16 * SMALL_LIMIT))
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError) as info:
            decompress(codec, section, limit=SMALL_LIMIT // 4)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < SMALL_LIMIT + SMALL_LIMIT // 2, f"peak {peak} bytes against a 256 KiB limit"
    assert info.value.details["limit"] == SMALL_LIMIT // 4


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_a_callers_limit_above_the_batch_bound_is_the_batch_bound(codec, monkeypatch):
    monkeypatch.setattr(compression, "DECOMPRESSED_BYTES_MAX", SMALL_LIMIT)
    with pytest.raises(RecordTooLargeError) as info:
        decompress(codec, compress(codec, bytes(2 * SMALL_LIMIT)), limit=4 * SMALL_LIMIT)
    assert info.value.details["limit"] == SMALL_LIMIT


def test_zstd_frame_claiming_a_huge_content_size_is_too_large_not_memory_error():
    # 16 bytes: magic, a header declaring 1 TiB of content, one empty raw block.
    forged = struct.pack("<I", 0xFD2FB528) + b"\xe0" + struct.pack("<Q", 1 << 40) + b"\x01\x00\x00"
    with pytest.raises(RecordTooLargeError):
        decompress(Compression.ZSTD, forged)


def test_truncated_zstd_frame_without_content_size_is_corrupt_not_too_large():
    # The one python-zstandard error covers both; the second reading tells them apart.
    whole = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(range(256)) * 400)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, whole[: len(whole) // 2], limit=1 << 20)


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_section_at_the_limit_is_accepted(name, monkeypatch):
    monkeypatch.setattr(compression, "DECOMPRESSED_BYTES_MAX", SMALL_LIMIT)
    codec, make = BOMBS[name]
    data = b"x" * SMALL_LIMIT
    assert decompress(codec, make(data)) == data
    assert decompress(codec, make(data), limit=SMALL_LIMIT) == data
    with pytest.raises(RecordTooLargeError):
        decompress(codec, make(data), limit=SMALL_LIMIT - 1)


def test_snappy_and_unknown_codecs_are_unsupported():
    with pytest.raises(UnsupportedCompressionError):
        compress(Compression.SNAPPY, b"x")
    for codec in (2, 5, 6, 7):
        with pytest.raises(UnsupportedCompressionError):
            decompress(codec, b"x")


def test_from_name():
    assert Compression.from_name("zstd") is Compression.ZSTD
    assert Compression.from_name("GZIP") is Compression.GZIP
    with pytest.raises(UnsupportedCompressionError):
        Compression.from_name("brotli")


def test_raw_deflate_is_not_gzip():
    # Kafka's gzip is RFC 1952; a zlib or raw deflate stream is corrupt.
    with pytest.raises(CorruptRecordError):
        decompress(Compression.GZIP, zlib.compress(b"hello" * 100))

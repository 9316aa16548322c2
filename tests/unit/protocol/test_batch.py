"""RecordBatch v2 codec: build -> validate -> iterate round trips for every
codec, the header fields Kafka defines, the in-place patches a broker makes,
and the structural checks validate_batch applies."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from lograft.protocol.batch import (
    CRC_POS,
    HEADER_SIZE,
    MAGIC_POS,
    Record,
    RecordInput,
    any_compressed,
    batches_span,
    build_batch,
    compute_crc,
    iter_batch_records,
    iter_batches,
    iter_records,
    max_producer_id,
    parse_header,
    patch_base_offset_and_epoch,
    peek_extent,
    set_log_append_time,
    validate_batch,
)
from lograft.protocol.compression import Compression

CODECS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
INT64_MAX = (1 << 63) - 1

header_values = st.one_of(st.none(), st.binary(max_size=20))
headers = st.lists(st.tuples(st.text(max_size=10), header_values), max_size=3)
# Timestamps within +-2^40 ms of the batch's so the deltas stay in a varlong.
record_inputs = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=80)),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    headers=headers,
    timestamp=st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 40)),
)


def _expected(records, base_offset, default_ts):
    return [
        Record(
            base_offset + i,
            default_ts if r.timestamp is None else r.timestamp,
            r.key,
            r.value,
            tuple(r.headers),
        )
        for i, r in enumerate(records)
    ]


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record_inputs, min_size=1, max_size=12),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=1 << 62),
    default_ts=st.integers(min_value=0, max_value=1 << 40),
    producer=st.tuples(
        st.integers(min_value=-1, max_value=INT64_MAX),
        st.integers(min_value=-1, max_value=(1 << 15) - 1),
        st.integers(min_value=-1, max_value=(1 << 31) - 1),
    ),
    leader_epoch=st.integers(min_value=-1, max_value=(1 << 31) - 1),
    transactional=st.booleans(),
)
def test_round_trip(records, codec, base_offset, default_ts, producer, leader_epoch, transactional):
    producer_id, producer_epoch, base_sequence = producer
    data = build_batch(
        records,
        timestamp_ms=default_ts,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=leader_epoch,
        is_transactional=transactional,
    )
    header = validate_batch(data)
    expected = _expected(records, base_offset, default_ts)
    timestamps = [r.timestamp for r in expected]
    assert header.size == len(data)
    assert header.magic == 2
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == leader_epoch
    assert header.compression == codec
    assert header.records_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.last_offset == base_offset + len(records) - 1
    assert header.base_timestamp == timestamps[0]
    assert header.max_timestamp == max(timestamps)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.is_transactional == transactional
    assert not header.is_control
    assert not header.is_log_append_time
    assert header.crc == compute_crc(data)
    assert list(iter_batch_records(data, 0, header)) == expected
    assert list(iter_batch_records(data)) == expected
    assert list(iter_records(data)) == expected
    assert peek_extent(data, 0) == (base_offset, len(data), len(records) - 1)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.tuples(st.lists(record_inputs, min_size=1, max_size=5), st.sampled_from(CODECS)),
        min_size=1,
        max_size=5,
    ),
    junk=st.binary(max_size=HEADER_SIZE - 1),
)
def test_concatenated_batches_iterate_and_a_torn_tail_is_ignored(batches, junk):
    blobs, expected, base = [], [], 0
    for records, codec in batches:
        blobs.append(build_batch(records, timestamp_ms=5, base_offset=base, compression=codec))
        expected += _expected(records, base, 5)
        base += len(records)
    buf = b"".join(blobs)
    positions = [pos for pos, _h in iter_batches(buf + junk)]
    assert positions == [sum(len(b) for b in blobs[:i]) for i in range(len(blobs))]
    assert list(iter_records(buf + junk)) == expected
    # A last batch cut short is not yielded.
    assert len(list(iter_batches(buf[:-1]))) == len(blobs) - 1


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(record_inputs, min_size=1, max_size=6),
    codec=st.sampled_from(CODECS),
    new_base=st.integers(min_value=0, max_value=1 << 62),
    new_epoch=st.integers(min_value=0, max_value=(1 << 31) - 1),
)
def test_patching_base_offset_and_epoch_keeps_the_crc(records, codec, new_base, new_epoch):
    data = bytearray(build_batch(records, timestamp_ms=7, compression=codec))
    before = bytes(data[CRC_POS:])
    patch_base_offset_and_epoch(data, 0, new_base, new_epoch)
    header = validate_batch(data)
    assert bytes(data[CRC_POS:]) == before
    assert header.base_offset == new_base
    assert header.partition_leader_epoch == new_epoch
    assert [r.offset for r in iter_batch_records(data)] == [
        new_base + i for i in range(len(records))
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_rewrites_max_timestamp_and_crc(codec):
    records = [RecordInput(b"a", timestamp=100), RecordInput(b"b", timestamp=50)]
    data = bytearray(build_batch(records, timestamp_ms=1, compression=codec))
    set_log_append_time(data, 0, len(data), 999_999)
    header = validate_batch(data)
    assert header.is_log_append_time
    assert header.max_timestamp == 999_999
    assert header.compression == codec
    assert [r.timestamp for r in iter_batch_records(data)] == [999_999, 999_999]


def test_kafka_field_layout_of_a_known_batch():
    data = build_batch(
        [RecordInput(b"value", key=b"key", headers=[("h", b"v"), ("n", None)])],
        timestamp_ms=1_000,
        base_offset=42,
        partition_leader_epoch=3,
        producer_id=7,
        producer_epoch=1,
        base_sequence=9,
    )
    (
        base,
        length,
        epoch,
        magic,
        crc,
        attrs,
        last_delta,
        first_ts,
        max_ts,
        pid,
        pepoch,
        seq,
        count,
    ) = struct.unpack_from(">qiibIhiqqqhii", data)
    assert (base, length, epoch, magic) == (42, len(data) - 12, 3, 2)
    assert (attrs, last_delta, first_ts, max_ts) == (0, 0, 1_000, 1_000)
    assert (pid, pepoch, seq, count) == (7, 1, 9, 1)
    # length varint, attributes, ts delta 0, offset delta 0, key, value, 2 headers.
    body = data[HEADER_SIZE:]
    expected = b"\x00\x00\x00" + b"\x06key" + b"\x0avalue" + b"\x04" + b"\x02h\x02v" + b"\x02n\x01"
    assert body == bytes([len(expected) * 2]) + expected
    assert crc == compute_crc(data)


def test_build_refuses_no_records_and_mismatched_deltas():
    with pytest.raises(InvalidRecordError):
        build_batch([], timestamp_ms=0)
    with pytest.raises(InvalidRecordError):
        build_batch([RecordInput(b"x")], timestamp_ms=0, offset_deltas=[0, 1])


def test_compacted_batch_keeps_offset_deltas():
    data = build_batch(
        [RecordInput(b"a"), RecordInput(b"c")],
        timestamp_ms=0,
        base_offset=10,
        offset_deltas=[0, 2],
        last_offset_delta=4,
    )
    header = validate_batch(data)
    assert header.last_offset == 14
    assert [r.offset for r in iter_batch_records(data)] == [10, 12]


# -- validate_batch refusals -----------------------------------------------------


def _good() -> bytearray:
    return bytearray(build_batch([RecordInput(b"x" * 20) for _ in range(3)], timestamp_ms=5))


def _refresh_crc(data: bytearray) -> bytearray:
    struct.pack_into(">I", data, CRC_POS, compute_crc(data))
    return data


def test_every_single_bit_flip_inside_the_crc_is_caught():
    data = _good()
    for pos in range(CRC_POS, len(data)):
        for bit in range(8):
            bad = bytearray(data)
            bad[pos] ^= 1 << bit
            with pytest.raises(CorruptRecordError):
                validate_batch(bad)


def test_wrong_magic_is_corrupt():
    for magic in (0, 1, 3, -1):
        bad = _good()
        struct.pack_into(">b", bad, MAGIC_POS, magic)
        with pytest.raises(CorruptRecordError, match="magic"):
            validate_batch(bad)


def test_lengths_that_cannot_be_right_are_corrupt():
    data = _good()
    for length in (-1, 0, 48, len(data) - 11, 1 << 30):
        bad = bytearray(data)
        struct.pack_into(">i", bad, 8, length)
        with pytest.raises(CorruptRecordError):
            validate_batch(bad)
    for cut in (0, 5, 11, 12, HEADER_SIZE - 1, HEADER_SIZE, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            validate_batch(data[:cut])


def test_counts_beyond_the_offset_range_are_invalid():
    bad = _good()
    struct.pack_into(">i", bad, 57, 4)  # recordsCount 4 > lastOffsetDelta + 1
    with pytest.raises(InvalidRecordError):
        validate_batch(_refresh_crc(bad))
    bad = _good()
    struct.pack_into(">i", bad, 23, -1)  # lastOffsetDelta
    with pytest.raises(InvalidRecordError):
        validate_batch(_refresh_crc(bad))


def test_too_large_only_when_the_batch_is_really_there():
    data = _good()
    with pytest.raises(RecordTooLargeError) as info:
        validate_batch(data, max_batch_bytes=len(data) - 1)
    assert info.value.details == {"size": len(data), "limit": len(data) - 1}
    assert validate_batch(data, max_batch_bytes=len(data)).size == len(data)
    # A length running past the data is corrupt (torn or garbage), not too large.
    with pytest.raises(CorruptRecordError):
        validate_batch(data[:20], max_batch_bytes=len(data) - 1)


def test_validate_at_a_position_with_available():
    data = bytes(_good())
    buf = b"\xff" * 7 + data + data
    assert validate_batch(buf, 7, available=len(data)).size == len(data)
    with pytest.raises(CorruptRecordError):
        validate_batch(buf, 7, available=len(data) - 1)
    assert parse_header(buf, 7 + len(data)).records_count == 3


# -- header walks that read one field -------------------------------------------------


@given(
    st.lists(
        st.tuples(st.sampled_from(CODECS), st.integers(min_value=-1, max_value=INT64_MAX)),
        max_size=4,
    ),
    st.integers(min_value=0, max_value=80),
)
@settings(max_examples=60, deadline=None)
def test_header_field_walks_read_what_iter_batches_reads(
    specs: list[tuple[Compression, int]], cut: int
) -> None:
    buf = b"".join(
        build_batch(
            [RecordInput(value=b"v" * 30)] * (1 + i % 3),
            timestamp_ms=1,
            base_offset=1000 - 7 * i,  # not increasing: the span is the largest end
            compression=codec,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=0 if pid >= 0 else -1,
        )
        for i, (codec, pid) in enumerate(specs)
    )
    # A torn last batch (or a header cut short) ends both walks as it ends iter_batches'.
    buf = buf[: max(len(buf) - cut, 0)]
    headers = [h for _pos, h in iter_batches(buf)]
    assert any_compressed(buf) == any(h.compression != Compression.NONE for h in headers)
    assert max_producer_id(buf) == max((h.producer_id for h in headers), default=-1)
    ends = [h.next_offset for h in headers]
    assert batches_span(buf) == (max(ends, default=-1), sum(h.records_count for h in headers))

"""The C record encoder (_recordencode.encode_records) against the
pure-Python one: the same bytes for any records, the same batches from
build_batch, and batches kafka-python (an independent implementation of
RecordBatch v2) reads back record for record."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from lograft.protocol import batch as batch_mod
from lograft.protocol.batch import (
    RecordInput,
    build_batch,
    encode_records_python,
)
from lograft.protocol.compression import Compression

HAVE_C = batch_mod.ENCODE_IMPLEMENTATION == "c"
needs_c = pytest.mark.skipif(not HAVE_C, reason="the C encoder is not built")

header_values = st.one_of(st.none(), st.binary(max_size=20))
# Keys with surrogate escapes stand for header keys that were not UTF-8.
header_keys = st.one_of(
    st.text(max_size=10),
    st.binary(max_size=10).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
headers = st.lists(st.tuples(header_keys, header_values), max_size=3)
int64 = st.integers(min_value=-(1 << 62), max_value=1 << 62)
record_inputs = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=300)),
    key=st.one_of(st.none(), st.binary(max_size=200)),
    headers=headers,
    timestamp=st.one_of(st.none(), int64),
)


# kafka-python decodes header keys as strict UTF-8: text keys only for it.
utf8_record_inputs = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=300)),
    key=st.one_of(st.none(), st.binary(max_size=200)),
    headers=st.lists(st.tuples(st.text(max_size=10), header_values), max_size=3),
    # within 2^40 ms of each other, so that every delta fits a varlong
    timestamp=st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 40)),
)


def _c_encode(
    records: Sequence[RecordInput], default_ts: int, deltas: Sequence[int] | None
) -> tuple[bytes, int, int]:
    assert batch_mod._recordencode is not None
    return batch_mod._recordencode.encode_records(records, default_ts, deltas)


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(record_inputs, min_size=1, max_size=20), int64)
def test_c_and_python_give_the_same_bytes(records, default_ts):
    # Timestamps 2^62 apart make a delta outside int64: both refuse those.
    assert _outcome(_c_encode, records, default_ts) == _outcome(
        encode_records_python, records, default_ts
    )


def _outcome(encode, records, default_ts):
    try:
        return encode(records, default_ts, None)
    except ValueError:
        return "ValueError"


@needs_c
@settings(max_examples=100, deadline=None)
@given(
    st.lists(record_inputs, min_size=1, max_size=10),
    st.lists(st.integers(min_value=0, max_value=1 << 40), min_size=10, max_size=10),
)
def test_c_and_python_agree_on_given_offset_deltas(records, deltas):
    deltas = sorted(deltas)[: len(records)]
    assert _c_encode(records, 0, deltas) == encode_records_python(records, 0, deltas)


def test_timestamp_deltas_outside_int64_are_refused_by_both():
    records = [RecordInput(b"a", timestamp=-(1 << 63)), RecordInput(b"b", timestamp=(1 << 63) - 1)]
    with pytest.raises(ValueError):
        encode_records_python(records, 0, None)
    if HAVE_C:
        with pytest.raises(ValueError):
            _c_encode(records, 0, None)


@needs_c
@pytest.mark.parametrize(
    "record",
    [
        RecordInput("text"),  # type: ignore[arg-type]
        RecordInput(b"v", key=3),  # type: ignore[arg-type]
        RecordInput(b"v", headers=[(b"k", b"v")]),  # type: ignore[list-item]
        RecordInput(b"v", headers=[("k", b"v", b"extra")]),  # type: ignore[list-item]
        RecordInput(b"v", headers=[("k", "str value")]),  # type: ignore[list-item]
        RecordInput(b"v", timestamp="1"),  # type: ignore[arg-type]
    ],
)
def test_c_refuses_fields_of_the_wrong_type(record):
    with pytest.raises((TypeError, ValueError)):
        _c_encode([record], 0, None)


@needs_c
def test_c_refuses_deltas_of_another_length_and_non_sequences():
    with pytest.raises(ValueError):
        _c_encode([RecordInput(b"v")], 0, [0, 1])
    with pytest.raises(TypeError):
        _c_encode(42, 0, None)  # type: ignore[arg-type]


class _Shifty:
    """A record whose value grows between the sizing and the writing pass."""

    key = None
    headers = ()
    timestamp = None

    def __init__(self) -> None:
        self.reads = 0

    @property
    def value(self) -> bytes:
        self.reads += 1
        return b"x" * (10 * self.reads)


@needs_c
def test_c_never_writes_past_what_it_sized():
    with pytest.raises(RuntimeError, match="changed"):
        _c_encode([_Shifty()], 0, None)  # type: ignore[list-item]


@needs_c
def test_c_takes_bytes_like_values():
    records = [RecordInput(bytearray(b"ab"), key=memoryview(b"k"))]  # type: ignore[arg-type]
    assert _c_encode(records, 5, None) == encode_records_python(records, 5, None)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(utf8_record_inputs, min_size=1, max_size=15),
    st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]),
    st.integers(min_value=0, max_value=1 << 40),
)
def test_kafka_python_reads_what_build_batch_writes(records, codec, default_ts):
    data = build_batch(
        records,
        timestamp_ms=default_ts,
        compression=codec,
        producer_id=7,
        producer_epoch=2,
        base_sequence=11,
    )
    kbatch = DefaultRecordBatch(data)
    assert kbatch.validate_crc()
    assert (kbatch.producer_id, kbatch.producer_epoch, kbatch.base_sequence) == (7, 2, 11)
    read = list(kbatch)
    assert len(read) == len(records)
    for i, (got, want) in enumerate(zip(read, records, strict=True)):
        assert got.offset == i
        assert got.timestamp == (default_ts if want.timestamp is None else want.timestamp)
        assert got.key == want.key
        assert got.value == want.value
        assert got.headers == [tuple(h) for h in want.headers]


def test_encode_implementation_flag():
    assert batch_mod.ENCODE_IMPLEMENTATION in ("c", "python")
    if os.environ.get("LOGRAFT_REQUIRE_C_EXTENSION"):
        # scripts/test.sh (and so CI) sets it: the C encoder must be what runs.
        assert HAVE_C, "the C encoder is not built, or is a stale ABI (scripts/setup.sh)"

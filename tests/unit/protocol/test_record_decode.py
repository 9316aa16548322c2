"""The consumer's record decoder: C and Python twins agree with each other,
with the record scanner's verdict on malformed input, and with the
record-by-record reader on the values (start offsets, log-append time, null
keys and values, headers included)."""

from __future__ import annotations

import importlib
import os
import types

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lograft.errors import CorruptRecordError, InvalidRecordError
from lograft.protocol import record_decode
from lograft.protocol.batch import (
    HEADER_SIZE,
    BatchHeader,
    Record,
    RecordInput,
    build_batch,
    iter_batch_records,
    parse_header,
)
from lograft.protocol.record_decode import decode_record_list_c, decode_record_list_python
from lograft.protocol.record_scan import scan_records_python
from tests.unit.protocol.test_record_scan import batches, mutate, mutation

HAVE_C = record_decode.IMPLEMENTATION == "c"
DECODERS = [decode_record_list_python] + ([decode_record_list_c] if HAVE_C else [])
needs_c = pytest.mark.skipif(not HAVE_C, reason="C extension _recordscan not built")


def outcome(decoder, data, header: BatchHeader, start: int | None) -> object:
    try:
        return decoder(data, header, start)
    except (CorruptRecordError, InvalidRecordError) as exc:
        d = exc.details
        return type(exc), d["reason"], d["record_index"], d["section_byte"], exc.message


def judge(section: bytes, header: BatchHeader, start: int | None = None) -> object:
    """Every decoder on one input; they agree, and refuse what the scanner refuses."""
    results = [outcome(d, section, header, start) for d in DECODERS]
    for other in results[1:]:
        assert other == results[0]
    verdict = results[0]
    try:
        scan_records_python(
            section, header.records_count, header.last_offset_delta, contiguous=False
        )
    except (CorruptRecordError, InvalidRecordError) as exc:
        d = exc.details
        assert verdict == (
            type(exc),
            d["reason"],
            d["record_index"],
            d["section_byte"],
            exc.message,
        )
    else:
        assert isinstance(verdict, list)
        assert all(type(r) is Record for r in verdict)
    return verdict


@settings(max_examples=150, deadline=None)
@given(batches(), st.integers(0, 12))
def test_records_are_what_the_reader_reads(case, skip):
    batch, _contiguous = case
    h = parse_header(batch)
    start = h.base_offset + skip
    got = judge(batch[HEADER_SIZE:], h, start)
    assert got == [r for r in iter_batch_records(batch) if r.offset >= start]
    assert judge(batch[HEADER_SIZE:], h, None) == list(iter_batch_records(batch))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.lists(mutation, min_size=1, max_size=3))
def test_mutated_sections_get_the_scanners_verdict(case, mutations):
    batch, _contiguous = case
    h = parse_header(batch)
    section = mutate(batch[HEADER_SIZE:], mutations)
    assume(section != batch[HEADER_SIZE:])
    judge(section, h)


@needs_c
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120), st.integers(-2, 30), st.integers(-2, 40))
def test_fuzz_arbitrary_bytes(data, count, last):
    header = parse_header(build_batch([RecordInput(b"k", b"v")], base_offset=5, timestamp_ms=0))
    judge(data, header._replace(records_count=count, last_offset_delta=last))


def test_log_append_time_headers_nulls_and_a_non_utf8_header_key():
    records = [
        RecordInput(b"v0", None, headers=(("h\udcff", b"x"), ("e", None))),
        RecordInput(None, b"k1"),
        RecordInput(b"", b""),
    ]
    batch = bytearray(build_batch(records, base_offset=40, timestamp_ms=1000))
    h = parse_header(bytes(batch))
    want = list(iter_batch_records(bytes(batch)))
    assert judge(bytes(batch[HEADER_SIZE:]), h) == want
    assert want[0].headers == (("h\udcff", b"x"), ("e", None))
    logged = h._replace(attributes=h.attributes | 0x08, max_timestamp=5555)
    assert logged.is_log_append_time
    assert [r.timestamp for r in judge(bytes(batch[HEADER_SIZE:]), logged)] == [5555] * 3


def test_offsets_and_timestamps_past_int64_are_exact():
    batch = build_batch([RecordInput(b"k", b"v")] * 2, base_offset=0, timestamp_ms=0)
    h = parse_header(batch)._replace(base_offset=(1 << 63) - 1, base_timestamp=(1 << 63) - 1)
    got = judge(batch[HEADER_SIZE:], h)
    assert [r.offset for r in got] == [(1 << 63) - 1, 1 << 63]
    assert got[1].timestamp >= (1 << 63) - 1


@needs_c
def test_a_class_without_the_five_object_slots_is_refused():
    from lograft.protocol import record_scan

    batch = build_batch([RecordInput(b"k", b"v")], base_offset=0, timestamp_ms=0)
    h = parse_header(batch)
    args = (batch[HEADER_SIZE:], 1, 0, 0, h.base_timestamp, False, 0, False, 0)
    with pytest.raises(AttributeError):
        record_scan._recordscan.decode_records(*args, dict)  # no such attributes

    class Plain:  # the names exist, but as class attributes, not slots
        offset = timestamp = key = value = headers = None

    with pytest.raises(TypeError, match="is not a slot"):
        record_scan._recordscan.decode_records(*args, Plain)


@needs_c
def test_a_stale_c_build_is_not_used(monkeypatch):
    """A module without RECORDS_ABI (built before decode_records) falls back."""
    from lograft.protocol import record_scan

    monkeypatch.setattr(record_scan, "_recordscan", types.SimpleNamespace(ABI=3, COLUMNS_ABI=1))
    reloaded = importlib.reload(record_decode)
    try:
        assert reloaded.IMPLEMENTATION == "python"
    finally:
        monkeypatch.undo()
        importlib.reload(record_decode)


def test_implementation_flag():
    assert record_decode.IMPLEMENTATION in ("c", "python")
    if os.environ.get("LOGRAFT_REQUIRE_C_EXTENSION"):
        # Set by scripts/test.sh: the consumer's decoder must be the C one there.
        assert HAVE_C, "the C extension is not built, or is a stale ABI (scripts/setup.sh)"


CONSUMER_DECODERS = [record_decode.decode_consumer_records_python] + (
    [record_decode.decode_consumer_records_c] if HAVE_C else []
)


@pytest.mark.parametrize("decode", CONSUMER_DECODERS)
def test_consumer_records_carry_every_field(decode):
    import gc

    from lograft.client.types import ConsumerRecord, TimestampType

    batch = build_batch(
        [RecordInput(b"v", b"k", headers=(("h", b"x"),)), RecordInput(None, None)],
        base_offset=7,
        timestamp_ms=99,
    )
    h = parse_header(batch)
    ts = TimestampType.CREATE_TIME
    got = decode(batch[HEADER_SIZE:], h, None, "t", 2, ts, ConsumerRecord)
    assert got == [
        ConsumerRecord("t", 2, 7, 99, ts, b"k", b"v", (("h", b"x"),)),
        ConsumerRecord("t", 2, 8, 99, ts, None, None, ()),
    ]
    assert all(type(r) is ConsumerRecord for r in got)
    assert decode(batch[HEADER_SIZE:], h, 8, "t", 2, ts, ConsumerRecord) == got[1:]
    if decode is record_decode.decode_consumer_records_c:
        assert not any(gc.is_tracked(r) for r in got)  # nothing in them can form a cycle


@needs_c
def test_the_consumer_fields_must_be_a_topic_str_and_a_partition_int():
    from lograft.client.types import ConsumerRecord
    from lograft.protocol import record_scan

    batch = build_batch([RecordInput(b"v")], base_offset=0, timestamp_ms=0)
    args = (batch[HEADER_SIZE:], 1, 0, 0, 0, False, 0, False, 0, ConsumerRecord)
    with pytest.raises(TypeError, match="topic must be a str"):
        record_scan._recordscan.decode_records(*args, b"t", 0, None)
    with pytest.raises(AttributeError):  # Record has no topic slot
        record_scan._recordscan.decode_records(*args[:-1], Record, "t", 0, None)

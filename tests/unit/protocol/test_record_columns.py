"""The column decoder: C and Python twins agree with each other, with the
record scanner's verdict on malformed input, and with the record-by-record
reader on the values."""

from __future__ import annotations

import os
import struct
import sys
from array import array

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lograft.errors import CorruptRecordError, InvalidRecordError
from lograft.protocol import record_columns
from lograft.protocol.batch import (
    HEADER_SIZE,
    RecordInput,
    build_batch,
    header_key_bytes,
    iter_batch_records,
    parse_header,
)
from lograft.protocol.record_columns import (
    RecordColumns,
    decode_columns_c,
    decode_columns_python,
)
from lograft.protocol.record_scan import scan_records_python
from tests.unit.protocol.test_record_scan import batches, mutate, mutation

HAVE_C = record_columns.IMPLEMENTATION == "c"
DECODERS = [decode_columns_python] + ([decode_columns_c] if HAVE_C else [])
needs_c = pytest.mark.skipif(not HAVE_C, reason="C extension _recordscan not built")


def outcome(decoder, data, count, last, **kw) -> object:
    kw.setdefault("base_offset", 1000)
    kw.setdefault("base_timestamp", 1_700_000_000_000)
    kw.setdefault("log_append_time", None)
    kw.setdefault("want_headers", True)
    try:
        return decoder(data, count, last, **kw)
    except (CorruptRecordError, InvalidRecordError) as exc:
        d = exc.details
        return type(exc), d["reason"], d["record_index"], d["section_byte"], exc.message


def judge(section: bytes, count: int, last: int, **kw) -> object:
    """Every decoder on one input; they agree, and refuse what the scanner refuses."""
    results = [outcome(d, section, count, last, **kw) for d in DECODERS]
    for other in results[1:]:
        assert other == results[0]
    verdict = results[0]
    try:
        scan_records_python(section, count, last, contiguous=False)
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
        assert isinstance(verdict, RecordColumns)
    return verdict


def rows(cols: RecordColumns) -> list[tuple]:
    """The columns back as (offset, timestamp_ms, key, value, headers) rows."""
    n = len(cols.offsets) // 8
    offsets, stamps = array("q", cols.offsets), array("q", cols.timestamps_us)
    kstart, vstart = array("i", cols.key_offsets), array("i", cols.value_offsets)
    kends = [*kstart[1:], len(cols.key_data)]
    vends = [*vstart[1:], len(cols.value_data)]
    out = []
    for i in range(n):
        key = cols.key_data[kstart[i] : kends[i]] if cols.key_valid[i] else None
        value = cols.value_data[vstart[i] : vends[i]] if cols.value_valid[i] else None
        headers = cols.headers[i] if cols.headers is not None else None
        out.append((offsets[i], stamps[i] // 1000, key, value, headers))
    assert cols.key_nulls == cols.key_valid.count(0)
    assert cols.value_nulls == cols.value_valid.count(0)
    return out


@settings(max_examples=200, deadline=None)
@given(batches())
def test_values_are_what_the_reader_reads(case):
    batch, _contiguous = case
    h = parse_header(batch)
    cols = judge(
        batch[HEADER_SIZE:],
        h.records_count,
        h.last_offset_delta,
        base_offset=h.base_offset,
        base_timestamp=h.base_timestamp,
    )
    want = [
        (
            r.offset,
            r.timestamp,
            r.key,
            r.value,
            tuple((header_key_bytes(k), v) for k, v in r.headers),
        )
        for r in iter_batch_records(batch)
    ]
    assert rows(cols) == want


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.lists(mutation, min_size=1, max_size=3))
def test_mutated_sections_get_the_scanners_verdict(case, mutations):
    batch, _contiguous = case
    h = parse_header(batch)
    section = mutate(batch[HEADER_SIZE:], mutations)
    assume(section != batch[HEADER_SIZE:])
    judge(section, h.records_count, h.last_offset_delta)


@needs_c
@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=120), st.integers(-2, 30), st.integers(-2, 40))
def test_fuzz_arbitrary_bytes(data, count, last):
    judge(data, count, last)


def test_bases_offset_the_key_and_value_starts():
    batch = build_batch([RecordInput(b"vv", key=b"k"), RecordInput(b"w")], timestamp_ms=7)
    for decoder in DECODERS:
        cols = outcome(decoder, batch[HEADER_SIZE:], 2, 1, key_base=100, value_base=5)
        assert array("i", cols.key_offsets).tolist() == [100, 101]
        assert array("i", cols.value_offsets).tolist() == [5, 7]
        assert cols.key_valid == b"\x01\x00" and cols.key_nulls == 1
        assert cols.headers == [(), ()]
        no_headers = outcome(decoder, batch[HEADER_SIZE:], 2, 1, want_headers=False)
        assert no_headers.headers is None
        with pytest.raises(OverflowError):
            outcome(decoder, batch[HEADER_SIZE:], 2, 1, value_base=(1 << 31) - 3)


def test_log_append_time_and_overflowing_timestamps_and_offsets():
    section = build_batch([RecordInput(b"a", timestamp=5)], timestamp_ms=5)[HEADER_SIZE:]
    for decoder in DECODERS:
        cols = outcome(decoder, section, 1, 0, base_timestamp=5, log_append_time=-1)
        assert struct.unpack("=q", cols.timestamps_us) == (-1000,)
        big = outcome(decoder, section, 1, 0, base_timestamp=sys.maxsize // 100)
        assert big[:2] == (CorruptRecordError, "timestamp_overflow")
        far = outcome(
            decoder,
            build_batch([RecordInput(b"a")] * 2, timestamp_ms=1)[HEADER_SIZE:],
            2,
            1,
            base_offset=(1 << 63) - 1,
        )
        assert far[:3] == (CorruptRecordError, "offset_overflow", 1)


@needs_c
def test_a_stale_c_build_is_not_used(monkeypatch):
    """A module without COLUMNS_ABI (built before decode_columns) falls back."""
    import importlib
    import types

    from lograft.protocol import record_scan

    monkeypatch.setattr(record_scan, "_recordscan", types.SimpleNamespace(ABI=2))
    reloaded = importlib.reload(record_columns)
    try:
        assert reloaded.IMPLEMENTATION == "python"
    finally:
        monkeypatch.undo()
        importlib.reload(record_columns)


def test_implementation_flag():
    assert record_columns.IMPLEMENTATION in ("c", "python")
    if os.environ.get("LOGRAFT_REQUIRE_C_EXTENSION"):
        # Set by scripts/test.sh: the column decoder must be the C one there.
        assert HAVE_C, "the C extension is not built, or is a stale ABI (scripts/setup.sh)"

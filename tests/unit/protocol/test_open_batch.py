"""The producer's OpenBatch (records encoded one append at a time) against
build_batch: the same batch bytes for the same records (headers, null keys
and values, compression), its room rules, and the pure-Python twin giving
the same answers as the C type."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol import batch as batch_mod
from lograft.protocol.batch import RecordInput, batch_from_records, build_batch, iter_records
from lograft.protocol.compression import Compression
from lograft.protocol.open_batch import NO_ROOM, TOO_LARGE, OpenBatch, OpenBatchPython

HAVE_C = batch_mod.ENCODE_IMPLEMENTATION == "c"
IMPLEMENTATIONS = [OpenBatchPython, *([OpenBatch] if HAVE_C else [])]
BIG = 1 << 40

header_keys = st.one_of(
    st.text(max_size=10),
    st.binary(max_size=10).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
headers = st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
records = st.lists(
    st.builds(
        RecordInput,
        value=st.one_of(st.none(), st.binary(max_size=300)),
        key=st.one_of(st.none(), st.binary(max_size=100)),
        headers=headers,
        # within 2^40 ms of each other: every delta fits a varlong
        timestamp=st.integers(min_value=0, max_value=1 << 40),
    ),
    min_size=1,
    max_size=20,
)


def sealed(ob: OpenBatchPython, compression: Compression = Compression.NONE) -> bytes:
    return batch_from_records(
        ob.records(),
        records_count=ob.count,
        last_offset_delta=ob.count - 1,
        base_timestamp=ob.base_timestamp,
        max_timestamp=ob.max_timestamp,
        compression=compression,
        producer_id=7,
        producer_epoch=1,
        base_sequence=40,
    )


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=300, deadline=None)
@given(recs=records, compression=st.sampled_from([Compression.NONE, Compression.GZIP]))
def test_appending_gives_build_batchs_bytes(impl, recs, compression):
    ob = impl(BIG, 0, BIG)
    for i, r in enumerate(recs):
        assert ob.append(r.value, r.key, list(r.headers) or None, r.timestamp) == i
    expected = build_batch(
        recs,
        timestamp_ms=0,
        compression=compression,
        producer_id=7,
        producer_epoch=1,
        base_sequence=40,
    )
    # gzip output depends on nothing but its input here (no mtime in zlib streams)
    assert sealed(ob, compression) == expected
    assert [ob.timestamp(i) for i in range(len(recs))] == [r.timestamp for r in recs]


@pytest.mark.skipif(not HAVE_C, reason="the C encoder is not built")
@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=200)), min_size=1, max_size=40),
    limit=st.integers(min_value=0, max_value=2000),
    limit_records=st.integers(min_value=0, max_value=8),
    record_max=st.integers(min_value=5, max_value=300),
)
def test_the_c_type_and_the_python_twin_answer_alike(values, limit, limit_records, record_max):
    c, py = (
        OpenBatch(limit, limit_records, record_max),
        OpenBatchPython(limit, limit_records, record_max),
    )
    for v in values:
        assert c.append(v, None, None, 123) == py.append(v, None, None, 123)
        assert (c.count, c.size, c.full) == (py.count, py.size, py.full)
    assert c.records() == py.records()
    c2, py2 = (
        OpenBatch(limit, limit_records, record_max),
        OpenBatchPython(limit, limit_records, record_max),
    )
    assert c2.append_many(values, None, None, 0) == py2.append_many(values, None, None, 0)
    assert c2.records() == py2.records()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_room_rules(impl):
    ob = impl(30, 0, 100)
    assert ob.append(b"x" * 150) == TOO_LARGE  # larger than record_max: never
    assert ob.append(b"x" * 50) == 0  # an empty batch takes a record larger than the limit
    assert ob.full and ob.append(b"y") == NO_ROOM
    small = impl(30, 0, 100)
    assert small.append(b"x", None, None, 5) == 0 and not small.full  # 8 bytes each
    assert [small.append(b"x", None, None, 5) for _ in range(3)] == [1, 2, NO_ROOM]
    assert small.size == 24 and small.full  # a fourth of 8 bytes would not fit in 30
    counted = impl(1000, 2, 100)
    assert [counted.append(b"x") for _ in range(3)] == [0, 1, NO_ROOM]
    assert counted.full


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_close_refuses_and_release_keeps_the_timestamps(impl):
    ob = impl(1000, 0, 1000)
    ob.append(b"a", b"k", [("h", None)], 7)
    ob.append(None, None, None, 9)
    ob.close()
    assert ob.closed and ob.append(b"b") == NO_ROOM and ob.count == 2
    ((rec0, rec1),) = [list(iter_records(sealed(ob)))]
    assert (rec0.key, rec0.value, rec0.headers, rec0.timestamp) == (b"k", b"a", (("h", None),), 7)
    assert (rec1.value, rec1.timestamp) == (None, 9)
    ob.release()
    assert ob.timestamp(1) == 9 and ob.append(b"c") == NO_ROOM


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_append_many_stops_where_the_batch_is_full_and_equals_single_appends(impl):
    values = [b"v%d" % i for i in range(10)]
    stamps = [100 + i for i in range(10)]
    many = impl(40, 0, 1000)
    n = many.append_many(values, None, stamps, 2)
    one = impl(40, 0, 1000)
    singles = 0
    while one.append(values[2 + singles], None, None, stamps[2 + singles]) >= 0:
        singles += 1
    assert n == singles and 0 < n < 8 and many.records() == one.records()
    with pytest.raises(ValueError):
        many.append_many(values, None, stamps[:3], 0)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_bad_fields_raise_type_errors(impl):
    ob = impl(1000, 0, 1000)
    with pytest.raises(TypeError):
        ob.append("text")
    with pytest.raises(TypeError):
        ob.append(b"v", 5)
    with pytest.raises(TypeError):
        ob.append(b"v", None, [(b"not str", b"v")])
    assert ob.count == 0
    with pytest.raises(TypeError):
        ob.append_many([b"a", "b"], None, None, 0)
    assert ob.count == 1  # the records before the bad one are in


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_run_start_names_where_the_last_append_many_began(impl):
    ob = impl(1000, 0, 1000)
    ob.append(b"single")
    assert ob.append_many([b"a", b"b"], None, None, 0) == 2
    assert ob.run_start == 1
    ob.append(b"between")  # a single append does not move it
    assert ob.run_start == 1
    assert ob.append_many([b"c"], None, None, 0) == 1 and ob.run_start == 4


@pytest.mark.skipif(not HAVE_C, reason="the C OpenBatch is not built")
def test_a_batch_closed_while_its_timestamp_converts_refuses_the_record():
    """Converting a timestamp may run Python code (__index__), and so let
    another thread drain (close) the batch: the append must then be refused,
    not land in a batch whose records are already fixed."""
    ob = OpenBatch(1000, 0, 1000)

    class ClosingTimestamp:
        def __index__(self) -> int:
            ob.close()
            return 5

    assert ob.append(b"v", None, None, ClosingTimestamp()) == NO_ROOM
    assert ob.count == 0 and ob.records() == b""

"""plain_batch.build_plain_batch (the C column encoder, _columnencode, and its
pure-Python fallback) against batch.build_batch of the matching RecordInputs:
the same bytes for any columns, batches kafka-python reads back, and an
account of the records (`BuiltBatch.summary`) equal to what the record scan
of the bytes reports."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from lograft.errors import InvalidRecordError
from lograft.protocol import plain_batch
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.plain_batch import BuiltBatch, Item, build_plain_batch
from tests.batch_scan import scanned

needs_c = pytest.mark.skipif(
    plain_batch.IMPLEMENTATION != "c", reason="the C column encoder is not built"
)

items = st.one_of(st.none(), st.text(max_size=200), st.binary(max_size=200))
timestamps = st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 62))


@st.composite
def columns(
    draw: st.DrawFn,
) -> tuple[list[Item], list[Item] | None, list[int | None] | None]:
    n = draw(st.integers(min_value=1, max_value=30))
    values = draw(st.lists(items, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(items, min_size=n, max_size=n)))
    stamps = draw(st.one_of(st.none(), st.lists(timestamps, min_size=n, max_size=n)))
    return values, keys, stamps


def _as_bytes(item: Item) -> bytes | None:
    return item.encode() if isinstance(item, str) else item


def reference(
    values: list[Item], keys: list[Item] | None, stamps: list[int | None] | None, now_ms: int
) -> bytes:
    return build_batch(
        [
            RecordInput(
                _as_bytes(v),
                None if keys is None else _as_bytes(keys[i]),
                (),
                None if stamps is None else stamps[i],
            )
            for i, v in enumerate(values)
        ],
        timestamp_ms=now_ms,
    )


def assert_built_as_reference(built: BuiltBatch, want: bytes) -> None:
    assert isinstance(built, BuiltBatch) and type(built.data) is bytes
    assert built.data == want
    assert built.summary == scanned(want)


@needs_c
@settings(max_examples=300, deadline=None)
@given(columns(), st.integers(min_value=0, max_value=1 << 41))
def test_the_c_encoder_gives_build_batch_bytes(cols, now_ms) -> None:
    values, keys, stamps = cols
    built = build_plain_batch(values, keys, stamps, timestamp_ms=now_ms)
    assert_built_as_reference(built, reference(values, keys, stamps, now_ms))


@settings(max_examples=100, deadline=None)
@given(columns(), st.integers(min_value=0, max_value=1 << 41))
def test_the_python_fallback_gives_the_same_bytes(cols, now_ms) -> None:
    values, keys, stamps = cols
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plain_batch, "_columnencode", None)
        got = build_plain_batch(values, keys, stamps, timestamp_ms=now_ms)
    assert_built_as_reference(got, reference(values, keys, stamps, now_ms))


@needs_c
def test_a_crc_function_that_fails_fails_the_encode() -> None:
    def broken(_view: memoryview) -> int:
        raise OSError("no crc")

    with pytest.raises(OSError, match="no crc"):
        plain_batch._columnencode.encode_batch(["a"], None, None, 0, broken)
    with pytest.raises(ValueError, match="more than 32 bits"):
        plain_batch._columnencode.encode_batch(["a"], None, None, 0, lambda _v: 1 << 32)


def test_kafka_python_reads_the_batch() -> None:
    values: list[Item] = ["é" * 3, None, b"\x00\xff"]
    keys: list[Item] = [None, "k", b"k2"]
    built = build_plain_batch(values, keys, [None, 5, None], timestamp_ms=1_700_000_000_000)
    batch = DefaultRecordBatch(built.data)
    batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [
        (0, 1_700_000_000_000, None, "ééé".encode(), []),
        (1, 5, b"k", None, []),
        (2, 1_700_000_000_000, b"k2", b"\x00\xff", []),
    ]


@pytest.mark.parametrize("bad", [1, 1.5, bytearray(b"x"), ["x"]])
@pytest.mark.parametrize("column", ["values", "keys"])
def test_other_item_types_are_refused(bad, column) -> None:
    values: list[object] = ["a", "b"]
    keys: list[object] = ["a", "b"]
    (values if column == "values" else keys)[1] = bad
    with pytest.raises(TypeError, match="must be str, bytes or None"):
        build_plain_batch(values, keys, None, timestamp_ms=0)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plain_batch, "_columnencode", None)
        with pytest.raises(TypeError, match="must be str, bytes or None"):
            build_plain_batch(values, keys, None, timestamp_ms=0)  # type: ignore[arg-type]


@needs_c
def test_columns_of_another_length_or_shape_are_refused() -> None:
    with pytest.raises(ValueError, match="one entry per value"):
        build_plain_batch(["a", "b"], ["k"], None, timestamp_ms=0)
    with pytest.raises(ValueError, match="one entry per value"):
        build_plain_batch(["a"], None, [1, 2], timestamp_ms=0)
    with pytest.raises(TypeError, match="list or None"):
        build_plain_batch(["a"], ("k",), None, timestamp_ms=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timestamp must be int"):
        build_plain_batch(["a"], None, ["1"], timestamp_ms=0)  # type: ignore[list-item]


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(InvalidRecordError, match="at least one record"):
        build_plain_batch([], None, None, timestamp_ms=0)


# -- attribute_columns and texts_only ---------------------------------------------------------


class Rec:
    """An object with attributes a and b (a record as decoded)."""

    __slots__ = ("a", "b")

    def __init__(self, a: object, b: object) -> None:
        self.a, self.b = a, b


attr_values = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.binary(max_size=3))


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(attr_values, attr_values), min_size=0, max_size=20))
def test_attribute_columns_in_c_match_the_python_twin(pairs) -> None:
    objects = [Rec(a, b) for a, b in pairs]
    names = ("a", "b", "a")
    got = plain_batch.attribute_columns(objects, names)
    assert got == plain_batch.attribute_columns_python(objects, names)
    for column, name in zip(got, names, strict=True):
        want = [getattr(o, name) for o in objects]
        assert column == (want if any(v is not None for v in want) else None)


@needs_c
def test_attribute_columns_hands_back_the_same_objects_and_raises_as_getattr() -> None:
    value = "shared"
    [values] = plain_batch.attribute_columns([Rec(value, None)], ("a",))
    assert values is not None and values[0] is value
    with pytest.raises(AttributeError, match="c"):
        plain_batch.attribute_columns([Rec(1, 2), Rec(3, 4)], ("a", "c"))
    with pytest.raises(TypeError, match="names must be str"):
        plain_batch.attribute_columns([Rec(1, 2)], (1,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        plain_batch.attribute_columns((Rec(1, 2),), ("a",))  # type: ignore[arg-type]


class SubRec(Rec):
    """A subclass: not the first object's exact type, read with getattr."""

    __slots__ = ()


class Computed:
    """`a` a property, `b` an instance attribute: no slot to read directly."""

    def __init__(self, b: object) -> None:
        self.b = b

    @property
    def a(self) -> str:
        return "computed"


@needs_c
def test_attribute_columns_reads_slots_as_getattr_whatever_the_mix_of_types() -> None:
    # The C pass reads the first object's type's slots directly; every other
    # case (another type, a subclass, a property, a plain attribute) is a getattr.
    objects: list[object] = [Rec(1, None), SubRec(2, "x"), Computed(3), Rec(None, 4)]
    names = ("a", "b")
    assert plain_batch.attribute_columns(objects, names) == (
        [1, 2, "computed", None],
        [None, "x", 3, 4],
    )
    assert plain_batch.attribute_columns([Computed(1), Rec(2, 3)], names) == (
        ["computed", 2],
        [1, 3],
    )


@needs_c
def test_attribute_columns_raises_for_an_unset_slot_as_getattr() -> None:
    unset = Rec.__new__(Rec)
    unset.a = 1  # b never set
    with pytest.raises(AttributeError, match="b"):
        plain_batch.attribute_columns([Rec(1, 2), unset], ("a", "b"))
    with pytest.raises(AttributeError, match="b"):
        plain_batch.attribute_columns([unset], ("b",))


class Decoded(msgspec.Struct, frozen=True, kw_only=True):
    """A record as the JSON produce path decodes one (a msgspec Struct)."""

    value: object = None
    key: str | None = None
    timestamp: int | None = None


@needs_c
def test_attribute_columns_of_decoded_structs_match_the_python_twin() -> None:
    body = b'[{"value": 1, "key": "k"}, {"value": null}, {"timestamp": 5}]'
    records = msgspec.json.decode(body, type=list[Decoded])
    names = ("value", "key", "timestamp")
    got = plain_batch.attribute_columns(records, names)
    assert got == plain_batch.attribute_columns_python(records, names)
    assert got == ([1, None, None], ["k", None, None], [None, None, 5])


@needs_c
def test_attribute_columns_refuses_a_list_changed_while_read() -> None:
    objects: list[object] = []

    class Shrinking:
        @property
        def a(self) -> int:
            objects.clear()  # a property that empties the list being read
            return 1

    objects.extend([Shrinking(), Shrinking()])
    with pytest.raises(RuntimeError, match="changed size"):
        plain_batch.attribute_columns(objects, ("a",))


@needs_c
@pytest.mark.parametrize(
    ("column", "want"),
    [
        ([], True),
        ([None, "x", ""], True),
        (["x", b"x"], False),
        (["x", 1], False),
        ([type("S", (str,), {})("sub")], False),  # exactly str, as type() compares
    ],
)
def test_texts_only(column: list[object], want: bool) -> None:
    assert plain_batch.texts_only(column) is want
    assert plain_batch.texts_only_python(column) is want

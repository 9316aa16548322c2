"""The snapshot file format: round trips, and every damage is detected."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.quorum.raft.snapshot import (
    MAGIC,
    Snapshot,
    SnapshotFormatError,
    as_entry,
    decode_snapshot,
    encode_snapshot,
    read_snapshot_file,
    write_snapshot_file,
)

indexes = st.integers(min_value=0, max_value=2**62)
terms = st.integers(min_value=0, max_value=2**62)
commands = st.binary(max_size=200)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    prev = draw(indexes)
    return Snapshot(
        last_entry=(draw(commands), prev + 1, draw(terms)),
        prev_entry=(draw(commands), prev, draw(terms)),
        state=draw(st.binary(max_size=2000)),
    )


@given(snapshots())
def test_round_trip(snap: Snapshot) -> None:
    data = encode_snapshot(snap)
    assert data.startswith(MAGIC)
    assert decode_snapshot(data) == snap


@given(snapshots(), st.data())
def test_any_flipped_byte_is_detected(snap: Snapshot, data: st.DataObject) -> None:
    encoded = bytearray(encode_snapshot(snap))
    pos = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(SnapshotFormatError):
        decode_snapshot(bytes(encoded))


@given(snapshots(), st.data())
def test_truncated_or_extended_file_is_detected(snap: Snapshot, data: st.DataObject) -> None:
    encoded = encode_snapshot(snap)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(SnapshotFormatError):
        decode_snapshot(encoded[:cut])
    with pytest.raises(SnapshotFormatError):
        decode_snapshot(encoded + b"\x00")


def test_entries_must_be_adjacent() -> None:
    with pytest.raises(SnapshotFormatError):
        Snapshot(last_entry=(b"", 10, 1), prev_entry=(b"", 8, 1), state=b"")


def test_pickle_or_gzip_dump_is_not_accepted() -> None:
    # pysyncobj's default full dump is a gzip of a pickle; it must never load.
    import gzip
    import pickle

    with pytest.raises(SnapshotFormatError):
        decode_snapshot(gzip.compress(pickle.dumps({"x": 1})))


def test_as_entry_normalises_pysyncobj_entries() -> None:
    assert as_entry(("abc", 3, 1)) == (b"abc", 3, 1)
    assert as_entry([b"\x00", 3, 1]) == (b"\x00", 3, 1)
    with pytest.raises(SnapshotFormatError):
        as_entry((b"", 1))


def test_file_round_trip(tmp_path: Path) -> None:
    snap = Snapshot(last_entry=(b"\x01x", 8, 2), prev_entry=(b"\x01y", 7, 2), state=b"state")
    path = tmp_path / "snap"
    write_snapshot_file(path, snap)
    assert read_snapshot_file(path) == snap

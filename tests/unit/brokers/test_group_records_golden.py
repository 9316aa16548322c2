"""Existing `__consumer_offsets` segments keep decoding: golden key and value
bytes written by the encoder before group values became msgspec Structs (see
golden_group.py)."""

from __future__ import annotations

import json
from pathlib import Path

from lograft.brokers.groups.records import decode_record, encode_record
from tests.unit.brokers.golden_group import RECORDS

GOLDEN = Path(__file__).parents[2] / "fixtures" / "golden" / "group_records.json"


def _pairs() -> list[tuple[bytes, bytes | None]]:
    return [
        (bytes.fromhex(p["key"]), None if p["value"] is None else bytes.fromhex(p["value"]))
        for p in json.loads(GOLDEN.read_text())
    ]


def test_golden_records_decode_to_the_same_values() -> None:
    pairs = _pairs()
    assert len(pairs) == len(RECORDS)
    for (key, value), expected in zip(pairs, RECORDS, strict=True):
        decoded = decode_record(key, value)
        assert decoded == expected
        assert type(decoded.value) is type(expected.value)


def test_encoding_is_byte_for_byte_what_it_was() -> None:
    # Compaction keys on the key bytes, and equal values should stay equal bytes.
    for pair, record in zip(_pairs(), RECORDS, strict=True):
        assert encode_record(record) == pair

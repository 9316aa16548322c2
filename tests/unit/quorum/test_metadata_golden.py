"""Existing Raft logs and snapshots keep decoding: golden bytes written by the
codec before records became msgspec Structs (see golden_metadata.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from lograft.errors import MetadataRecordError
from lograft.quorum.image import MetadataImage
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.records import Partition, PartitionChange, decode_batch, encode_batch
from tests.unit.quorum.golden_metadata import EVERY_TYPE, HISTORY

GOLDEN = Path(__file__).parents[2] / "fixtures" / "golden"


def _batches() -> list[bytes]:
    return (GOLDEN / "metadata_batches.jsonl").read_bytes().splitlines()


def test_golden_batches_decode_to_the_same_records() -> None:
    lines = _batches()
    assert len(lines) == 1 + len(HISTORY)
    for line, expected in zip(lines, [EVERY_TYPE, *HISTORY], strict=True):
        decoded = decode_batch(line)
        assert decoded == expected
        assert [type(r) for r in decoded] == [type(r) for r in expected]


# What version 2 of Partition and PartitionChange added (eligible leader
# replicas), with the values a version 1 record is upgraded with.
_V2_DEFAULTS = {
    "Partition": {"elr": [], "last_known_leader": -1},
    "PartitionChange": {"elr": None, "last_known_leader": None},
}


def _upgraded(batch: dict[str, Any]) -> dict[str, Any]:
    """An old batch document as this codec writes it: Partition and
    PartitionChange at version 2 with their new fields defaulted, every
    other record unchanged."""
    records = []
    for record in batch["records"]:
        added = _V2_DEFAULTS.get(record["type"])
        if added is not None and record["version"] == 1:
            record = {**record, **added, "version": 2}
        records.append(record)
    return {**batch, "records": records}


def test_encoding_writes_what_old_decoders_read() -> None:
    # The same JSON document (key order aside: a JSON object is unordered, and
    # the old decoder compared key sets), so a node not yet upgraded reads it;
    # except the records of a newer version, which an old node refuses by
    # their version number (it cannot hold their ELR).
    for line, records in zip(_batches(), [EVERY_TYPE, *HISTORY], strict=True):
        assert orjson.loads(encode_batch(records)) == _upgraded(orjson.loads(line))


def test_version_2_partition_records_are_written_and_read_with_their_elr() -> None:
    records = [
        Partition("t", 0, (1, 2, 3), (), -1, 4, 9, (2, 3), 1),
        PartitionChange("t", 0, isr=(2,), leader=2, elr=(3,), last_known_leader=-1),
    ]
    data = encode_batch(records)
    assert orjson.loads(data)["records"] == [
        {
            "type": "Partition",
            "topic_id": "t",
            "partition": 0,
            "replicas": [1, 2, 3],
            "isr": [],
            "leader": -1,
            "leader_epoch": 4,
            "partition_epoch": 9,
            "elr": [2, 3],
            "last_known_leader": 1,
            "version": 2,
        },
        {
            "type": "PartitionChange",
            "topic_id": "t",
            "partition": 0,
            "isr": [2],
            "leader": 2,
            "replicas": None,
            "elr": [3],
            "last_known_leader": -1,
            "version": 2,
        },
    ]
    assert decode_batch(data) == records


def test_an_unknown_partition_version_is_refused() -> None:
    line = b'{"batch_version":1,"records":[{"type":"PartitionChange","version":3,'
    line += b'"topic_id":"t","partition":0}]}'
    with pytest.raises(MetadataRecordError, match="PartitionChange version 3"):
        decode_batch(line)


def test_golden_snapshot_restores_the_image_of_its_history() -> None:
    replayed = MetadataStore()
    for offset, line in enumerate(_batches()[1:], start=1):
        replayed.apply(offset, line)
    restored = MetadataStore()
    restored.restore((GOLDEN / "metadata_snapshot.json").read_bytes())
    # Equal up to what a restore sets on purpose (catch-up offsets become the
    # snapshot's offset): the records that rebuild them are the same.
    assert restored.image.to_records() == replayed.image.to_records()
    assert restored.image.offset == len(HISTORY)
    old = orjson.loads((GOLDEN / "metadata_snapshot.json").read_bytes())
    new = orjson.loads(restored.snapshot())
    assert orjson.loads(new.pop("batch")) == _upgraded(orjson.loads(old.pop("batch")))
    assert new == old


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"{", "metadata snapshot: not valid JSON"),
        (b"[]", "metadata snapshot: Expected `object`, got `array`"),
        (b'{"snapshot_version":1,"batch":""}', "metadata snapshot.offset: required"),
        (b'{"snapshot_version":1,"offset":"8","batch":""}', "metadata snapshot.offset: Expected"),
        (b'{"snapshot_version":1,"offset":8,"batch":7}', "metadata snapshot.batch: Expected"),
        (b'{"snapshot_version":2,"offset":8,"batch":""}', "snapshot version 2 is not supported"),
    ],
)
def test_a_bad_snapshot_wrapper_is_refused_naming_the_field(data: bytes, says: str) -> None:
    store = MetadataStore()
    with pytest.raises(MetadataRecordError) as caught:
        store.restore(data)
    assert says in str(caught.value)
    assert store.image.offset == MetadataImage.empty().offset

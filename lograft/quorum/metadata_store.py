"""The Raft state machine that holds the metadata image.

`apply` decodes a committed batch of metadata records and replays it into a
new immutable `MetadataImage`, which replaces the old one in a single
reference assignment: readers on any thread see either the old image or the
new one, never a half-applied batch.

Snapshot format (what the Raft adapter stores as its full dump): the image's
offset and the records that rebuild it from empty (`MetadataImage.to_records`,
in the manner of a KRaft snapshot, which is also a list of records)::

    {"snapshot_version": 1, "offset": <int>, "batch": <encode_batch(records) as text>}

A batch that does not decode or replay raises, and the adapter halts the
node (fail-stop): every node applies the same entries, so carrying on past
one would diverge.
"""

from __future__ import annotations

from lograft.errors import MetadataRecordError
from lograft.quorum.image import MetadataImage
from lograft.quorum.records import decode_batch, encode_batch
from lograft.typed import Record, decode_json, encode_json

SNAPSHOT_VERSION = 1


class SnapshotDocument(Record, frozen=True):
    """The snapshot wrapper as stored: fields in this order, so the bytes
    written are those the hand-built dict wrote (golden:
    tests/fixtures/golden/metadata_snapshot.json). `snapshot_version` is any
    integer here so that an unknown version is reported as such, not as a
    type error."""

    snapshot_version: int
    offset: int
    batch: str


class MetadataStore:
    def __init__(self) -> None:
        self._image = MetadataImage.empty()

    @property
    def image(self) -> MetadataImage:
        return self._image

    # -- StateMachine ------------------------------------------------------------------

    def apply(self, offset: int, batch: bytes) -> None:
        records = decode_batch(batch)
        self._image = self._image.apply_batch(offset, records)

    def snapshot(self) -> bytes:
        image = self._image
        return encode_json(
            SnapshotDocument(
                snapshot_version=SNAPSHOT_VERSION,
                offset=image.offset,
                batch=encode_batch(image.to_records()).decode(),
            )
        )

    def restore(self, data: bytes) -> None:
        doc = decode_json(
            data, SnapshotDocument, error=MetadataRecordError, where="metadata snapshot"
        )
        if doc.snapshot_version != SNAPSHOT_VERSION:
            raise MetadataRecordError(
                f"metadata snapshot version {doc.snapshot_version!r} is not supported"
            )
        image = MetadataImage.empty()
        if doc.offset >= 0:
            image = image.apply_batch(doc.offset, decode_batch(doc.batch.encode()))
        self._image = image

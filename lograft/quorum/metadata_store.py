"""The Raft state machine that holds the metadata image.

`apply` decodes a committed batch of metadata records and replays it into a
new immutable `MetadataImage`, which replaces the old one in a single
reference assignment: readers on any thread see either the old image or the
new one, never a half-applied batch.

Snapshot format (what the Raft adapter stores as its full dump): the image's
offset and the records that rebuild it from empty (`MetadataImage.to_records`,
in the manner of a KRaft snapshot, which is also a list of records)::

    {"snapshot_version": 1, "offset": <int>, "batch": <encode_batch(records) as text>,
     "fsynced_since": {<topic id>: <offset>, ...}}

`fsynced_since` (left out while empty) names the topics whose flush policy
started to fsync after they were created, with the offset it did
(`MetadataImage.fsynced_since`): the records alone would date them from
their creation. A snapshot without it (written before it existed) restores
every fsynced topic as fsynced since its creation.

A batch that does not decode or replay raises, and the adapter halts the
node (fail-stop): every node applies the same entries, so carrying on past
one would diverge.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from lograft.errors import MetadataRecordError
from lograft.quorum.image import FSYNCED_SINCE_CREATION, MetadataImage
from lograft.quorum.records import decode_batch, encode_batch
from lograft.typed import Record, decode_json, encode_json

SNAPSHOT_VERSION = 1


class SnapshotDocument(Record, frozen=True, omit_defaults=True):
    """The snapshot wrapper as stored: fields in this order, so the bytes
    written are those the hand-built dict wrote (golden:
    tests/fixtures/golden/metadata_snapshot.json). `snapshot_version` is any
    integer here so that an unknown version is reported as such, not as a
    type error."""

    snapshot_version: int
    offset: int
    batch: str
    fsynced_since: dict[str, int] = {}


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
                fsynced_since={
                    t: since
                    for t, since in image.fsynced_since.items()
                    if since != FSYNCED_SINCE_CREATION
                },
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
        if doc.fsynced_since:
            # Replay from empty dated every fsynced topic from its creation.
            since = {t: doc.fsynced_since.get(t, s) for t, s in image.fsynced_since.items()}
            image = replace(image, fsynced_since=MappingProxyType(since))
        self._image = image

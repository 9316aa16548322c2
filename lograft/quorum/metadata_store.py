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

import orjson

from lograft.errors import MetadataRecordError
from lograft.quorum.image import MetadataImage
from lograft.quorum.records import decode_batch, encode_batch

SNAPSHOT_VERSION = 1


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
        return orjson.dumps(
            {
                "snapshot_version": SNAPSHOT_VERSION,
                "offset": image.offset,
                "batch": encode_batch(image.to_records()).decode(),
            }
        )

    def restore(self, data: bytes) -> None:
        try:
            doc = orjson.loads(data)
            version = doc["snapshot_version"]
            offset = int(doc["offset"])
            batch = doc["batch"].encode()
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MetadataRecordError(f"metadata snapshot does not decode: {exc}") from None
        if version != SNAPSHOT_VERSION:
            raise MetadataRecordError(f"metadata snapshot version {version!r} is not supported")
        image = MetadataImage.empty()
        if offset >= 0:
            image = image.apply_batch(offset, decode_batch(batch))
        self._image = image

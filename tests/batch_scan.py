"""What the leader's record scan reports of a batch, for tests that compare
it with what an encoder says of the bytes it built."""

from __future__ import annotations

from lograft.protocol.batch import validate_batches
from lograft.protocol.record_scan import RecordsSummary


def scanned(data: bytes) -> RecordsSummary:
    """What the leader's record scan reports of the one batch in `data`."""
    seen: list[RecordsSummary] = []
    validate_batches(
        data,
        max_batch_bytes=len(data),
        contiguous=True,
        deep=True,
        on_records=lambda _h, summary, _i: seen.append(summary),
    )
    [summary] = seen
    return summary

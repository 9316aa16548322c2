"""What a leader refuses in a producer's batch beyond its bytes' structure.

Kafka's LogValidator checks more of a batch a client sends (its
AppendOrigin.CLIENT) than its structure and CRC; lograft does the same on the
leader's client-append path (`Partition.append_records`), for every batch of
a request before any of it is written. Followers never apply these rules: a
replica copies whatever its leader wrote, and refusing it would only stop
replication. What they protect is everything downstream of the leader's log:
follower appends, producer-state rebuilds after a restart, the cleaner,
readers rendering records to JSON.

Header rules (`check_producer_header`); every refusal carries
`details.reason` (the name before the colon) and `details.batch_index`:

- unknown_attributes: attribute bits 7-15 set (RecordBatch v2 defines none
  of them). INVALID_RECORD.
- control_batch: the control bit; only a transaction coordinator writes
  markers (Kafka: "Clients are not allowed to write control records").
  INVALID_RECORD.
- transactional_batch: the transactional bit; lograft has no transactions
  yet. INVALID_RECORD.
- delete_horizon: the delete-horizon bit, which only the cleaner sets.
  INVALID_RECORD.
- log_append_time: the LogAppendTime bit; the broker sets it on topics
  configured for it (Kafka refuses it the same way). INVALID_TIMESTAMP.
- producer_id: a producerId below -1. INVALID_RECORD.
- producer_fields: producerId -1 with an epoch or baseSequence other than -1.
  INVALID_RECORD.
- producer_epoch / base_sequence: producerId >= 0 with an epoch outside
  0..32767 or a baseSequence outside 0..2^31-1 (Kafka: "Invalid sequence
  number"). INVALID_RECORD.
- producer_id_not_allocated: a producerId the cluster has not handed out
  (yet). PRODUCER_ID_NOT_ALLOCATED, retriable.

Record rules (`check_records_summary`), from the leader's walk of every record
(`lograft.protocol.record_scan.RecordsSummary`):

- null_key_compacted: a record without a key in a compacted topic (Kafka:
  "Compacted topic cannot accept message without key"). INVALID_RECORD.
- timestamp_out_of_range (CreateTime topics): a record timestamp
  (baseTimestamp + timestampDelta) outside [now - before, now + after], with
  the topic's `message_timestamp_before_max_ms` and
  `message_timestamp_after_max_ms`, and never below 0. INVALID_TIMESTAMP.
- max_timestamp (CreateTime topics): maxTimestamp is not the largest record
  timestamp; the time index and retention trust it. INVALID_TIMESTAMP.

Kafka accepts record timestamps of -1 ("none") and, by default, any time in
the past; lograft refuses negative timestamps: retention and the time index
read a negative largest timestamp as "no timestamps" and would fall back to
file times, and a timestamp search never finds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from lograft.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    LograftError,
    ProducerIdNotAllocatedError,
)
from lograft.protocol.batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from lograft.protocol.record_scan import RecordsSummary

INT16_MAX = (1 << 15) - 1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
# Every attribute bit RecordBatch v2 defines; the rest must be 0.
_DEFINED_ATTRIBUTES = (
    COMPRESSION_MASK | TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT | DELETE_HORIZON_BIT
)


@dataclass(frozen=True, slots=True)
class TimestampBounds:
    """The record timestamps a CreateTime append accepts, inclusive, ms."""

    earliest_ms: int
    latest_ms: int

    @classmethod
    def around(cls, now_ms: int, before_max_ms: int, after_max_ms: int) -> TimestampBounds:
        return cls(max(0, now_ms - before_max_ms), min(INT64_MAX, now_ms + after_max_ms))


@dataclass(frozen=True, slots=True)
class RecordRules:
    """What the leader checks of a batch's records beyond their structure.

    `timestamps` None: no timestamp rule (LogAppendTime topics, where the
    broker's time replaces the producer's)."""

    timestamps: TimestampBounds | None = None
    keys_required: bool = False


def check_producer_header(
    h: BatchHeader, index: int, *, producer_id_end: int | None = None
) -> None:
    """Refuse a producer's batch whose header no producer may send.

    `index` is the batch's place in the request (for the error);
    `producer_id_end` the first producer id the cluster has not allocated
    (None: not known, not checked)."""
    attrs = h.attributes
    if attrs & ~_DEFINED_ATTRIBUTES & 0xFFFF:
        raise _refuse(
            InvalidRecordError,
            f"batch {index}: attributes {attrs & 0xFFFF:#06x} set bits no RecordBatch v2 "
            f"defines (only {_DEFINED_ATTRIBUTES:#06x} are)",
            "unknown_attributes",
            index,
            attributes=attrs & 0xFFFF,
        )
    if attrs & CONTROL_BIT:
        raise _refuse(
            InvalidRecordError,
            f"batch {index} is a control batch; producers may not write control records",
            "control_batch",
            index,
        )
    if attrs & TRANSACTIONAL_BIT:
        raise _refuse(
            InvalidRecordError,
            f"batch {index} is transactional; lograft has no transactions, send it with the "
            "transactional attribute bit (0x10) clear",
            "transactional_batch",
            index,
        )
    if attrs & DELETE_HORIZON_BIT:
        raise _refuse(
            InvalidRecordError,
            f"batch {index} sets the delete-horizon bit (0x40), which only the log cleaner sets",
            "delete_horizon",
            index,
        )
    if attrs & TIMESTAMP_TYPE_BIT:
        raise _refuse(
            InvalidTimestampError,
            f"batch {index} says LogAppendTime; producers send CreateTime (the broker stamps "
            "LogAppendTime on topics configured for it)",
            "log_append_time",
            index,
        )
    _check_producer_fields(h, index, producer_id_end)


def _check_producer_fields(h: BatchHeader, index: int, producer_id_end: int | None) -> None:
    pid, epoch, seq = h.producer_id, h.producer_epoch, h.base_sequence
    if pid == NO_PRODUCER_ID:
        if epoch != NO_PRODUCER_EPOCH or seq != NO_SEQUENCE:
            raise _refuse(
                InvalidRecordError,
                f"batch {index} has no producer id (-1) but producer epoch {epoch} and base "
                f"sequence {seq}; a batch that is not idempotent carries -1 in all three",
                "producer_fields",
                index,
                producer_epoch=epoch,
                base_sequence=seq,
            )
        return
    if pid < 0:
        raise _refuse(
            InvalidRecordError,
            f"batch {index} has producer id {pid}; use -1 (not idempotent) or an id from "
            "POST /v1/producers",
            "producer_id",
            index,
            producer_id=pid,
        )
    if not 0 <= epoch <= INT16_MAX:
        raise _refuse(
            InvalidRecordError,
            f"batch {index} of producer {pid} has producer epoch {epoch}; it must be "
            f"0..{INT16_MAX}",
            "producer_epoch",
            index,
            producer_id=pid,
            producer_epoch=epoch,
        )
    if not 0 <= seq <= INT32_MAX:
        raise _refuse(
            InvalidRecordError,
            f"batch {index} of producer {pid} has base sequence {seq}; it must be 0..{INT32_MAX}",
            "base_sequence",
            index,
            producer_id=pid,
            base_sequence=seq,
        )
    if producer_id_end is not None and pid >= producer_id_end:
        raise ProducerIdNotAllocatedError(
            f"batch {index} has producer id {pid}, which this cluster has not handed out "
            f"(ids below {producer_id_end} are allocated); take one from POST /v1/producers. "
            "A broker whose metadata is behind may not know an id allocated just now: "
            "retrying helps then",
            reason="producer_id_not_allocated",
            batch_index=index,
            producer_id=pid,
            producer_id_end=producer_id_end,
        )


def check_records_summary(
    h: BatchHeader, summary: RecordsSummary, rules: RecordRules, index: int
) -> None:
    """Refuse a batch whose records break `rules` (its structure already passed)."""
    if rules.keys_required and summary.null_keys:
        raise _refuse(
            InvalidRecordError,
            f"batch {index} has {summary.null_keys} record(s) without a key; a compacted topic "
            "keeps the newest record of each key, so every record needs one",
            "null_key_compacted",
            index,
            null_keys=summary.null_keys,
        )
    bounds = rules.timestamps
    if bounds is None:
        return
    first = h.base_timestamp + summary.ts_delta_min
    last = h.base_timestamp + summary.ts_delta_max
    if first < bounds.earliest_ms or last > bounds.latest_ms:
        low = first < bounds.earliest_ms
        bad = first if low else last
        raise _refuse(
            InvalidTimestampError,
            f"batch {index} has a record timestamp {bad} (baseTimestamp {h.base_timestamp} "
            f"+ timestampDelta {bad - h.base_timestamp}) outside the accepted range "
            f"[{bounds.earliest_ms}, {bounds.latest_ms}] (the topic's "
            "message_timestamp_before_max_ms and message_timestamp_after_max_ms around "
            "the broker's time, never below 0)",
            "timestamp_out_of_range",
            index,
            # The two int64 fields, not their sum, which may not be one (JSON
            # details must stay within int64).
            base_timestamp=h.base_timestamp,
            timestamp_delta=summary.ts_delta_min if low else summary.ts_delta_max,
            earliest=bounds.earliest_ms,
            latest=bounds.latest_ms,
        )
    if h.max_timestamp != last:
        raise _refuse(
            InvalidTimestampError,
            f"batch {index} has maxTimestamp {h.max_timestamp} but its largest record "
            f"timestamp is {last}",
            "max_timestamp",
            index,
            max_timestamp=h.max_timestamp,
            largest=last,
        )


def _refuse(
    cls: type[LograftError], message: str, reason: str, index: int, **details: object
) -> LograftError:
    return cls(message, reason=reason, batch_index=index, **details)

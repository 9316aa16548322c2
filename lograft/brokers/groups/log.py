"""The coordinator's records in its `__consumer_offsets` partition.

Each handler result is written as one RecordBatch v2 (so it commits or fails
as a whole), every record keyed by its `group_records` key bytes, with the
value bytes or, for a tombstone, a null value (what compaction expects).
Loading reads the partition back from its log start to a given end offset and
decodes every record; a record that does not decode stops the load
(`GroupRecordError`): guessing would let replicas disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from lograft.brokers.groups.records import GroupRecord, decode_record, encode_record
from lograft.brokers.groups.state import CoordinatorState
from lograft.errors import GroupRecordError
from lograft.protocol.batch import RecordInput, build_batch, iter_batch_records, iter_batches
from lograft.storage.log import Log


def encode_batch(records: Iterable[GroupRecord], timestamp_ms: int) -> bytes:
    inputs = []
    for record in records:
        key, value = encode_record(record)
        inputs.append(RecordInput(value=value, key=key))
    if not inputs:
        raise ValueError("a batch needs at least one record")
    return build_batch(inputs, timestamp_ms=timestamp_ms)


def read_records(log: Log, start: int, end: int, read_bytes: int) -> Iterator[GroupRecord]:
    """Every record at offsets [start, end) of `log`, decoded. Blocking file I/O."""
    offset = start
    while offset < end:
        data = log.read(offset, read_bytes, max_offset=end)
        if not data:
            return
        progressed = offset
        for pos, header in iter_batches(data):
            if not header.is_control:
                for rec in iter_batch_records(data, pos, header):
                    if offset <= rec.offset < end:
                        if rec.key is None:
                            raise GroupRecordError(f"record at offset {rec.offset} has no key")
                        yield decode_record(rec.key, rec.value)
            progressed = max(progressed, header.next_offset)
        if progressed <= offset:
            raise GroupRecordError(f"reading the log made no progress at offset {offset}")
        offset = progressed


def load_state(log: Log, end: int, read_bytes: int) -> CoordinatorState:
    """The state the partition's records up to `end` rebuild. Blocking: run in a thread."""
    return CoordinatorState.from_records(read_records(log, log.log_start_offset, end, read_bytes))

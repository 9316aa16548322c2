"""kafka-python, a reader nobody here wrote, as the oracle: it parses our
segment files and read() output with the same offsets, keys, values, headers
and timestamps (its CRC check passing), and batches it builds append through
our Log and read back identically."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder

from lograft.protocol.batch import iter_batches, iter_records
from lograft.protocol.compression import Compression
from lograft.storage.config import LogConfig, TimestampType
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

from .storage_support import (
    FakeClock,
    LogHarness,
    ModelRecord,
    no_fsync,  # noqa: F401 (fixture)
    read_everything,
    segment_logs,
)

pytestmark = pytest.mark.usefixtures("no_fsync")

CODECS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]


def kafka_read(data: bytes) -> tuple[list[ModelRecord], list]:
    """Every record kafka-python finds in `data`, checking each batch's CRC first."""
    records, batches = [], []
    mr = MemoryRecords(bytes(data))
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc(), f"kafka-python rejects the CRC of batch {batch.base_offset}"
        batches.append(batch)
        for r in batch:
            records.append(
                ModelRecord(
                    r.offset,
                    r.key,
                    r.value,
                    tuple((k, v) for k, v in r.headers),
                    r.timestamp,
                )
            )
    return records, batches


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32),
    appends=st.lists(
        st.tuples(
            st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3),
            st.sampled_from(CODECS),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_kafka_python_reads_our_segment_files(tmp_path_factory, seed, appends):
    rnd = random.Random(seed)
    directory = tmp_path_factory.mktemp("oracle") / "p"
    h = LogHarness(directory, LogConfig(segment_bytes=2048, segment_index_bytes=4096))
    for counts, codec in appends:
        h.epoch += rnd.randrange(2)
        h.append(counts, rnd, compression=codec, value_size=100)
    h.log.close()
    found, batches = [], []
    for path in segment_logs(directory):
        recs, bs = kafka_read(path.read_bytes())
        found += recs
        batches += bs
    assert found == h.model.records()
    assert [b.base_offset for b in batches] == [b.base_offset for b in h.model.batches]
    assert [b.leader_epoch for b in batches] == [h.epochs[b.base_offset] for b in h.model.batches]
    assert all(b.magic == 2 for b in batches)


def test_kafka_python_reads_our_fetch_output(tmp_path):
    rnd = random.Random(3)
    h = LogHarness(tmp_path / "p", LogConfig())
    for codec in CODECS:
        h.append([3, 1, 4], rnd, compression=codec)
    for offset in range(h.model.leo):
        data = h.log.read(offset, 1 << 20)
        recs, _ = kafka_read(data)
        first = h.model.batch_index_for(offset)
        assert recs == [r for b in h.model.batches[first:] for r in b.records]


def _kafka_batch(codec, records, *, producer=(-1, -1, -1), transactional=False) -> bytes:
    pid, pepoch, seq = producer
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=int(codec),
        batch_size=1 << 20,
        transactional=transactional,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=seq,
    )
    for ts, key, value, headers in records:
        assert builder.append(ts, key, value, headers) is not None
    builder.close()
    return bytes(builder.buffer())


def _records(rnd: random.Random, n: int):
    out = []
    for i in range(n):
        key = None if i % 4 == 3 else f"key-{rnd.randrange(100)}".encode()
        value = None if i % 7 == 6 else (b"value %d " % i) * rnd.randrange(1, 30)
        headers = [("trace", b"t%d" % i), ("empty", None)] if i % 3 == 0 else []
        out.append((1_600_000_000_000 + rnd.randrange(-5000, 5000), key, value, headers))
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    ("producer", "transactional"),
    [((-1, -1, -1), False), ((4242, 3, 17), False), ((99, 0, 2_147_483_000), True)],
)
def test_batches_built_by_kafka_python_append_and_read_back(
    tmp_path, codec, producer, transactional
):
    rnd = random.Random(int(codec) * 7 + producer[0])
    log = Log(tmp_path / "p", LogConfig(), pool=FilePool(8), clock=FakeClock())
    log.append(_kafka_batch(Compression.NONE, _records(rnd, 2)), leader_epoch=1)
    sent = _records(rnd, 25)
    blob = _kafka_batch(codec, sent, producer=producer, transactional=transactional)
    info = log.append(blob, leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.records) == (2, 26, 25)
    data = log.read(2, 1 << 20)
    # Byte for byte what kafka-python built, but for the two broker fields.
    assert data[12:16] == (7).to_bytes(4, "big")
    assert data[16:] == blob[16:]
    ((_pos, header),) = iter_batches(data)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.is_transactional == transactional
    want = [
        ModelRecord(2 + i, key, value, tuple(headers), ts)
        for i, (ts, key, value, headers) in enumerate(sent)
    ]
    ours = [
        ModelRecord(r.offset, r.key, r.value, r.headers, r.timestamp) for r in iter_records(data)
    ]
    assert ours == want
    theirs, (batch,) = kafka_read(data)
    assert theirs == want
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert batch.is_transactional == transactional
    log.close()
    reopened = Log(tmp_path / "p", LogConfig(), pool=FilePool(8), clock=FakeClock())
    assert read_everything(reopened)[2:] == want


def test_default_record_batch_builder_batches(tmp_path):
    log = Log(tmp_path / "p", LogConfig(), pool=FilePool(8), clock=FakeClock())
    blobs, want, offset = [], [], 0
    for codec in CODECS:
        b = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=int(codec),
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        for i in range(10):
            key, value = b"k%d" % i, b"some value " * (i + 1)
            b.append(i, timestamp=1000 + i, key=key, value=value, headers=[])
            want.append(ModelRecord(offset, key, value, (), 1000 + i))
            offset += 1
        blobs.append(bytes(b.build()))
    # Several batches in one append, as a produce request carries them.
    log.append(b"".join(blobs), leader_epoch=0)
    assert read_everything(log) == want


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time(tmp_path, codec):
    clock = FakeClock(1_700_000_123_456)
    config = LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = Log(tmp_path / "p", config, pool=FilePool(8), clock=clock)
    sent = _records(random.Random(1), 12)
    info = log.append(_kafka_batch(codec, sent), leader_epoch=0)
    assert info.log_append_time_ms == clock.now
    assert info.max_timestamp == clock.now
    clock.advance(5000)
    log.append(_kafka_batch(codec, sent[:2]), leader_epoch=0)
    for data in (log.read(0, 1 << 20), (tmp_path / "p" / "00000000000000000000.log").read_bytes()):
        theirs, batches = kafka_read(data)  # validate_crc passes after the rewrite
        assert [b.timestamp_type for b in batches] == [1, 1]
        assert [r.timestamp for r in theirs] == [clock.now - 5000] * 12 + [clock.now] * 2
        ours = list(iter_records(data))
        assert [r.timestamp for r in ours] == [r.timestamp for r in theirs]
        assert [(r.key, r.value) for r in ours] == [(k, v) for _t, k, v, _h in sent + sent[:2]]
    # The time index and timestamp lookup see the append time.
    assert log.offset_for_timestamp(clock.now - 5000).offset == 0
    assert log.offset_for_timestamp(clock.now - 4999).offset == 12
    assert log.offset_for_timestamp(clock.now + 1) is None

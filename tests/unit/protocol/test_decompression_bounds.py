"""Bounds on what compressed batches may inflate to, batch by batch and in all.

Regression: a zstd batch of one 63 MiB record of zeros is 2,109 bytes; 250 of
them in one 527 KB produce request inflated 15 GiB, one batch at a time, and
held the node's event loop for 10.5 s. Now a record may not exceed the
topic's max_message_bytes once decompressed (Kafka's producer bounds each
uncompressed record by its max.request.size; Kafka's broker checks only the
compressed batch against max.message.bytes), so a batch of N records
inflates to at most N x (max_message_bytes + 10) bytes and the bomb is
refused after ~1 MiB; and a request's batches share one budget of
decompressed bytes.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from lograft.errors import RecordTooLargeError
from lograft.protocol.batch import (
    HEADER_SIZE,
    RecordInput,
    build_batch,
    check_records,
    decode_records,
    parse_header,
    records_section,
    validate_batches,
)
from lograft.protocol.compression import Compression, DecompressionBudget
from lograft.protocol.varint import decode_varint
from lograft.storage.config import LogConfig
from lograft.storage.handles import FilePool
from lograft.storage.log import Log

MIB = 1024 * 1024
CODECS = [Compression.GZIP, Compression.LZ4, Compression.ZSTD]


def bomb(codec: Compression, record_bytes: int = 63 * MIB) -> bytes:
    return build_batch([RecordInput(bytes(record_bytes))], timestamp_ms=1, compression=codec)


@pytest.mark.parametrize("codec", CODECS)
def test_a_record_over_the_limit_is_refused_after_inflating_little(codec):
    data = bomb(codec, 16 * MIB)
    header = parse_header(data)
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError) as info:
            check_records(data, 0, header, contiguous=True, record_bytes_max=MIB)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MIB, f"inflated {peak} bytes to refuse one record over 1 MiB"
    assert info.value.details["limit"] == MIB
    assert info.value.details["limit_name"] == "max_message_bytes"
    assert "max_message_bytes" in info.value.message


@pytest.mark.parametrize("codec", [Compression.NONE, *CODECS])
def test_a_record_at_the_limit_passes_and_one_byte_over_does_not(codec):
    records = [RecordInput(b"k" * 10, b"v" * 5000), RecordInput(b"small")]
    data = build_batch(records, timestamp_ms=1, compression=codec)
    header = parse_header(data)
    section = records_section(data, 0, header)
    length, _ = decode_varint(section, 0)  # the first (larger) record's length
    check_records(data, 0, header, contiguous=True, record_bytes_max=length)
    with pytest.raises(RecordTooLargeError) as info:
        check_records(data, 0, header, contiguous=True, record_bytes_max=length - 1)
    assert info.value.details["position"] == 0


def test_the_batches_of_a_request_share_one_budget():
    batches = [bomb(Compression.ZSTD, MIB - 100) for _ in range(5)]
    request = b"".join(batches)
    budget = DecompressionBudget(3 * MIB, "produce_decompressed_bytes_max")
    with pytest.raises(RecordTooLargeError) as info:
        validate_batches(
            request, max_batch_bytes=MIB + 12, contiguous=True, deep=True, budget=budget
        )
    assert info.value.details["limit_name"] == "produce_decompressed_bytes_max"
    assert info.value.details["limit"] == 3 * MIB
    assert info.value.details["position"] == 3 * len(batches[0])
    assert "produce_decompressed_bytes_max" in info.value.message
    assert budget.used <= 3 * MIB
    # Within budget, every batch passes and what it inflated is counted.
    budget = DecompressionBudget(5 * MIB, "produce_decompressed_bytes_max")
    validate_batches(request, max_batch_bytes=MIB + 12, contiguous=True, deep=True, budget=budget)
    assert 5 * (MIB - 100) <= budget.used <= 5 * MIB


def test_uncompressed_batches_do_not_spend_the_budget():
    batch = build_batch([RecordInput(b"x" * 1000)] * 10, timestamp_ms=1)
    budget = DecompressionBudget(1, "produce_decompressed_bytes_max")
    validate_batches(batch * 3, max_batch_bytes=MIB, contiguous=True, deep=True, budget=budget)
    assert budget.used == 0


def test_the_log_refuses_a_compressed_record_over_max_message_bytes(tmp_path: Path):
    log = Log(tmp_path / "p", LogConfig(max_message_bytes=64 * 1024), pool=FilePool(8))
    try:
        # 2,000 bytes compressed: under max_message_bytes as a batch (all Kafka checks).
        data = bomb(Compression.ZSTD, 100 * 1024)
        assert len(data) < 64 * 1024
        with pytest.raises(RecordTooLargeError):
            log.append(data, leader_epoch=0)
        assert log.log_end_offset == 0
        ok = build_batch(
            [RecordInput(bytes(60 * 1024))] * 3, timestamp_ms=1, compression=Compression.ZSTD
        )
        log.append(ok, leader_epoch=0)  # records under the limit: the batch may inflate past it
        assert log.log_end_offset == 3
    finally:
        log.close()


def test_decode_steps_over_records_below_the_start_and_refuses_large_ones_uncopied():
    records = [RecordInput(bytes(2000)), RecordInput(b"b"), RecordInput(bytes(5000))]
    data = build_batch(records, timestamp_ms=1, base_offset=10)
    header = parse_header(data)
    section = memoryview(data)[HEADER_SIZE:]
    records_from_11 = decode_records(section, header, start_offset=11, record_bytes_max=100)
    assert next(records_from_11).offset == 11  # offset 10 (2,000 bytes) was stepped over
    with pytest.raises(RecordTooLargeError) as info:
        next(records_from_11)
    assert info.value.details["offset"] == 12
    assert info.value.details["record_bytes"] > 5000

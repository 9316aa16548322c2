"""How appends put bytes on disk.

A leader append writes each batch as a patched 16-byte prefix (baseOffset,
batchLength, partitionLeaderEpoch) plus a view of the rest of the request,
with os.pwritev, instead of copying the request. These tests hold that path
to the same results as a copy-and-patch: the stored bytes are the request's
with only those fields changed, short writes are continued, requests of more
pieces than one pwritev takes are written whole, and the caller's buffer is
never modified. A batch this process encoded itself (`check_built`) is
judged as `check_append` judges it without being walked.
"""

from __future__ import annotations

import os
import random

import pytest

from lograft.errors import CorruptRecordError, LograftError, RecordTooLargeError
from lograft.protocol.batch import (
    LEADER_EPOCH_POS,
    RecordInput,
    build_batch,
    iter_batches,
    validate_batch,
)
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.plain_batch import BuiltBatch, build_plain_batch
from lograft.storage import log as log_module
from lograft.storage import segment as segment_module
from lograft.storage.config import LogConfig, TimestampType
from lograft.storage.handles import FilePool
from lograft.storage.log import Log
from lograft.storage.produce_rules import RecordRules, TimestampBounds

from .storage_support import FakeClock, read_everything


def _request(rnd: random.Random, batches: int, value_size: int = 40) -> bytes:
    return b"".join(
        build_batch(
            [RecordInput(rnd.randbytes(value_size), key=b"k") for _ in range(rnd.randint(1, 4))],
            timestamp_ms=1_000 + i,
        )
        for i in range(batches)
    )


def _patched(request: bytes, first_offset: int, epoch: int) -> bytes:
    """The request as a copy-and-patch append stores it."""
    out = bytearray(request)
    offset = first_offset
    for pos, h in iter_batches(request):
        out[pos : pos + 8] = offset.to_bytes(8, "big", signed=True)
        out[pos + LEADER_EPOCH_POS : pos + LEADER_EPOCH_POS + 4] = epoch.to_bytes(4, "big")
        offset += h.last_offset_delta + 1
    return bytes(out)


def _log(tmp_path, **cfg) -> Log:
    return Log(tmp_path / "p", LogConfig(**cfg), pool=FilePool(8), clock=FakeClock())


class ShortWrites:
    """os.pwritev that writes at most `limit` bytes per call, as a kernel
    may; it also records how many buffers each call was handed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.real = os.pwritev
        self.buffer_counts: list[int] = []

    def __call__(self, fd, buffers, position):
        self.buffer_counts.append(len(buffers))
        data = b"".join(bytes(b) for b in buffers)[: self.limit]
        return self.real(fd, [data], position)


@pytest.mark.parametrize("limit", [1, 7, 16, 100, 1 << 30])
def test_short_writes_are_continued(tmp_path, monkeypatch, limit):
    rnd = random.Random(limit)
    log = _log(tmp_path)
    before = _request(rnd, 3)
    log.append(before, leader_epoch=1)
    request = _request(rnd, 5)
    writes = ShortWrites(limit)
    monkeypatch.setattr(segment_module.os, "pwritev", writes)
    info = log.append(request, leader_epoch=2)
    monkeypatch.undo()
    if limit < len(request):
        assert len(writes.buffer_counts) > 1
    on_disk = log.active_segment.log_path.read_bytes()
    assert on_disk == _patched(before, 0, 1) + _patched(request, info.first_offset, 2)
    records = read_everything(log)
    log.close_unclean()
    reopened = Log(tmp_path / "p", LogConfig(), pool=FilePool(8), clock=FakeClock())
    assert reopened.recovery.bytes_dropped == 0
    assert read_everything(reopened) == records
    reopened.close()


@pytest.mark.parametrize("limit", [1 << 30, 1000])
def test_a_request_of_more_pieces_than_one_pwritev_takes(tmp_path, monkeypatch, limit):
    """700 batches are 1,400 pieces; pwritev takes at most 1,024 at once."""
    rnd = random.Random(5)
    log = _log(tmp_path)
    request = _request(rnd, 700, value_size=3)
    writes = ShortWrites(limit)
    monkeypatch.setattr(segment_module.os, "pwritev", writes)
    info = log.append(request, leader_epoch=0)
    monkeypatch.undo()
    assert info.batches == 700
    assert max(writes.buffer_counts) == 1024
    assert log.active_segment.log_path.read_bytes() == _patched(request, 0, 0)
    assert log.read(0, 1 << 30) == _patched(request, 0, 0)
    log.close()


@pytest.mark.parametrize("limit", [1 << 30, 999])
def test_writing_many_pieces_looks_at_each_piece_a_bounded_number_of_times(
    tmp_path, monkeypatch, limit
):
    """Each pwritev call takes the next 1,024 pieces; what remains must not be
    re-sliced after every call. It was: 50,000 one-record batches (100,000
    pieces, 3.6 MB) held a leader's event loop for 17 s. Counted, not timed:
    the pieces' memoryviews made, linear in the pieces, not quadratic."""
    pieces = [bytes([i % 251]) * 7 for i in range(20_000)]
    made = 0

    def counting_memoryview(obj):
        nonlocal made
        made += 1
        return memoryview(obj)

    monkeypatch.setattr(segment_module, "memoryview", counting_memoryview, raising=False)
    monkeypatch.setattr(segment_module.os, "pwritev", ShortWrites(limit))
    path = tmp_path / "pieces"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        segment_module._pwrite_all(fd, pieces, 0, 7 * len(pieces))
    finally:
        os.close(fd)
    monkeypatch.undo()
    assert path.read_bytes() == b"".join(pieces)
    # Quadratic re-slicing made about 10,000 views per call, 20 calls or more.
    assert made <= 2 * len(pieces) + 100


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_the_callers_buffer_is_never_modified(tmp_path, kind):
    rnd = random.Random(9)
    log = _log(tmp_path)
    log.append(_request(rnd, 2), leader_epoch=0)
    request = _request(rnd, 3)
    given = kind(bytearray(request)) if kind is not bytes else request
    info = log.append(given, leader_epoch=4)  # type: ignore[arg-type]
    assert bytes(given) == request
    assert info.first_offset > 0
    stored = log.read(info.first_offset, 1 << 20)
    assert stored == _patched(request, info.first_offset, 4)
    log.close()


def test_log_append_time_batches_are_copied_and_checksummed_again(tmp_path):
    rnd = random.Random(3)
    clock = FakeClock(5_000_000)
    log = Log(
        tmp_path / "p",
        LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME),
        pool=FilePool(8),
        clock=clock,
    )
    request = _request(rnd, 3)
    info = log.append(request, leader_epoch=7)
    assert info.log_append_time_ms == clock.now
    assert info.max_timestamp == clock.now
    stored = log.read(0, 1 << 20)
    assert len(stored) == len(request)
    for pos, h in iter_batches(stored):
        validate_batch(stored, pos, available=h.size)  # the CRC covers the new time
        assert h.is_log_append_time
        assert h.max_timestamp == clock.now
        assert h.partition_leader_epoch == 7
    log.close()


# -- an append of bytes checked before (check_append) -------------------------------------

BUDGET = DecompressionBudget(1 << 20, "produce_decompressed_bytes_max")


def test_checked_bytes_are_not_validated_again_but_written_the_same(tmp_path, monkeypatch):
    rnd = random.Random(7)
    log = _log(tmp_path)
    request = _request(rnd, 3)
    checked = log.check_append(request, rules=None, budget=BUDGET)

    def no_second_walk(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("checked bytes were validated again")

    monkeypatch.setattr(log_module, "validate_batches", no_second_walk)
    info = log.append(request, leader_epoch=2, validate_records=False, checked=checked)
    monkeypatch.undo()
    assert log.active_segment.log_path.read_bytes() == _patched(request, info.first_offset, 2)
    log.close()


def test_a_check_of_other_bytes_is_not_trusted(tmp_path):
    rnd = random.Random(8)
    log = _log(tmp_path)
    request = _request(rnd, 2)
    checked = log.check_append(request, rules=None, budget=BUDGET)
    corrupt = bytearray(request)
    corrupt[-1] ^= 0xFF  # inside the CRC
    with pytest.raises(CorruptRecordError):
        log.append(bytes(corrupt), leader_epoch=1, validate_records=False, checked=checked)
    assert log.log_end_offset == 0
    log.close()


def test_checked_bytes_are_held_to_the_batch_size_limit_as_it_is_now(tmp_path):
    rnd = random.Random(9)
    log = _log(tmp_path)
    request = _request(rnd, 1, value_size=400)
    checked = log.check_append(request, rules=None, budget=BUDGET)
    log.update_config(LogConfig(max_message_bytes=len(request) - 1))
    with pytest.raises(RecordTooLargeError):
        log.append(request, leader_epoch=1, validate_records=False, checked=checked)
    assert log.log_end_offset == 0
    log.close()


# -- a batch this process encoded (check_built) -------------------------------------------

RULES_NOW = 1_700_000_000_000


def _built(values: list[str | None], keys: list[str | None] | None, stamps=None) -> BuiltBatch:
    return build_plain_batch(values, keys, stamps, timestamp_ms=RULES_NOW)


def _refusal(check) -> tuple[object, ...] | None:
    try:
        check()
    except LograftError as exc:
        return (type(exc), exc.code, exc.message, exc.details)
    return None


CASES = [
    # (values, keys, timestamps, log config, rules): each judged as check_append judges it
    (["a", "b"], ["k", "l"], None, {}, RecordRules()),
    (["a", "b"], ["k", None], None, {}, RecordRules(keys_required=True)),
    (["a"], None, None, {}, RecordRules(keys_required=True)),
    (["x" * 300], None, None, {"max_message_bytes": 200}, None),
    (["a", "b"], None, [RULES_NOW - 10_000, None], {}, None),
    (
        ["a", "b"],
        None,
        [RULES_NOW - 10_000, None],
        {},
        RecordRules(TimestampBounds.around(RULES_NOW, 5_000, 5_000)),
    ),
    (
        ["a", "b"],
        None,
        [None, RULES_NOW + 10_000],
        {},
        RecordRules(TimestampBounds.around(RULES_NOW, 5_000, 5_000)),
    ),
    (
        ["a", "b"],
        None,
        [None, RULES_NOW + 1],
        {},
        RecordRules(TimestampBounds.around(0, 0, 1 << 60)),
    ),
]


@pytest.mark.parametrize(("values", "keys", "stamps", "cfg", "rules"), CASES)
def test_a_built_batch_is_judged_as_check_append_judges_it(
    tmp_path, values, keys, stamps, cfg, rules
):
    log = _log(tmp_path, **cfg)
    built = _built(values, keys, stamps)
    full = _refusal(lambda: log.check_append(built.data, rules=rules, budget=BUDGET))
    assert (
        _refusal(lambda: log.check_built(built.data, built.summary, rules=rules, budget=BUDGET))
        == full
    )
    if full is None:
        want = log.check_append(built.data, rules=rules, budget=BUDGET)
        got = log.check_built(built.data, built.summary, rules=rules, budget=BUDGET)
        assert got.headers == want.headers and got.data is built.data
    log.close()


def test_a_built_batch_is_not_walked_but_written_as_a_checked_one(tmp_path, monkeypatch):
    log = _log(tmp_path)
    built = _built(["a", None, "c"], ["k", "l", "m"])

    def no_walk(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a built batch was walked")

    monkeypatch.setattr(log_module, "validate_batches", no_walk)
    checked = log.check_built(built.data, built.summary, rules=RecordRules(), budget=BUDGET)
    info = log.append(built.data, leader_epoch=3, validate_records=False, checked=checked)
    monkeypatch.undo()
    assert log.active_segment.log_path.read_bytes() == _patched(built.data, info.first_offset, 3)
    log.close()


def test_bytes_that_are_not_one_built_batch_get_the_full_check(tmp_path):
    log = _log(tmp_path)
    built = _built(["a"], ["k"])
    two = built.data + _request(random.Random(10), 1)
    checked = log.check_built(two, built.summary, rules=RecordRules(), budget=BUDGET)
    assert [pos for pos, _h in checked.headers] == [0, len(built.data)]
    corrupt = bytearray(two)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.check_built(bytes(corrupt), built.summary, rules=RecordRules(), budget=BUDGET)
    log.close()

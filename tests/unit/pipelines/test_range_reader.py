"""An executor's read of one offset range, against a scripted leader: exactly
the records of the range (batches straddling either end, compaction gaps),
leader changes, and every data-loss path under failOnDataLoss."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

pytest.importorskip("pyarrow", reason="pyarrow is not installed (the spark extra)")

from lograft.client.errors import ClientTimeoutError
from lograft.client.transport import HttpResponse
from lograft.pipelines.offsets import OffsetRange
from lograft.pipelines.range_reader import DataLossError, ReadSettings, read_range
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.compression import Compression
from tests.unit.client.fakes import (
    Call,
    ScriptedTransport,
    brokers_doc,
    error_response,
    json_response,
    topic_doc,
)

LEADER = "http://leader:1"
OTHER = "http://other:2"
TS = 1_700_000_000_000


def batch(base: int, n: int, *, deltas: list[int] | None = None) -> bytes:
    deltas = deltas or list(range(n))
    recs = [RecordInput(b"v%d" % (base + d), key=b"k%d" % (base + d)) for d in deltas]
    return build_batch(
        recs,
        timestamp_ms=TS,
        base_offset=base,
        offset_deltas=deltas,
        last_offset_delta=deltas[-1],
    )


@dataclass
class Log:
    """One partition as its leader serves it."""

    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # (base, next, bytes)
    log_start: int = 0
    high_watermark: int | None = None  # default: the log end
    leader_url: str = LEADER
    partitions: int = 1
    batches_per_response: int = 1

    def add(self, base: int, n: int, *, deltas: list[int] | None = None) -> None:
        d = deltas or list(range(n))
        self.batches.append((base, base + d[-1] + 1, batch(base, n, deltas=d)))

    @property
    def log_end(self) -> int:
        return self.batches[-1][1] if self.batches else self.log_start

    def handle(self, call: Call) -> HttpResponse:
        if call.path == "/v1/topics/t":
            return json_response(call, topic_doc("t", [1] * self.partitions))
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc({1: self.leader_url}))
        if call.base != self.leader_url:
            return error_response(
                call,
                421,
                "NOT_LEADER_OR_FOLLOWER",
                True,
                leader_id=1,
                leader_url=self.leader_url,
            )
        hw = self.log_end if self.high_watermark is None else self.high_watermark
        if call.path.endswith("/offsets"):
            body = {"earliest": self.log_start, "latest": hw, "log_end_offset": self.log_end}
            return json_response(call, body)
        assert call.path.endswith("/records") and call.params is not None
        offset = int(call.params["offset"])
        if offset < self.log_start or offset > self.log_end:
            return error_response(call, 416, "OFFSET_OUT_OF_RANGE", False)
        out, nxt, taken = b"", offset, 0
        for _base, end, data in self.batches:
            if end > offset and end <= hw:
                out += data
                nxt = max(nxt, end)
                taken += 1
                if taken == self.batches_per_response:
                    break  # by default one batch per response: ranges take several fetches
        headers = {
            "X-Lograft-Next-Offset": str(nxt),
            "X-Lograft-High-Watermark": str(hw),
            "X-Lograft-Log-Start-Offset": str(self.log_start),
        }
        return HttpResponse(200, out, headers, call.url)


def settings(**kw) -> ReadSettings:
    base = {
        "bootstrap": (LEADER,),
        "fail_on_data_loss": True,
        "include_headers": False,
        "poll_timeout_ms": 300,
        "fetch_max_bytes": 1 << 20,
        "request_timeout_ms": 5000,
    }
    return ReadSettings(**{**base, **kw})


def offsets_read(log: Log, start: int, end: int, hint: str | None = LEADER, **kw) -> list[int]:
    transport = ScriptedTransport(log.handle)
    rng = OffsetRange("t", 0, start, end, hint)
    out = []
    for b in read_range(settings(**kw), rng, transport=transport):
        rows = b.to_pylist()
        assert all(r["value"] == b"v%d" % r["offset"] for r in rows)
        out.extend(r["offset"] for r in rows)
    assert transport.closed or start == end  # every connection released
    return out


def test_exactly_the_range_when_batches_straddle_both_ends():
    log = Log()
    log.add(0, 5)
    log.add(5, 3)
    log.add(8, 4)
    assert offsets_read(log, 3, 9) == [3, 4, 5, 6, 7, 8]
    assert offsets_read(log, 0, 12) == list(range(12))
    assert offsets_read(log, 7, 7) == []


def test_offsets_compaction_removed_are_stepped_over():
    log = Log()
    log.add(0, 3)
    log.add(3, 2, deltas=[2, 3])  # offsets 3 and 4 were compacted away
    log.add(7, 1)
    assert offsets_read(log, 0, 8) == [0, 1, 2, 5, 6, 7]
    assert offsets_read(log, 3, 5) == []


def test_a_new_leader_is_followed():
    log = Log(leader_url=OTHER)
    log.add(0, 4)
    # The driver's hint names the old leader; it answers NOT_LEADER naming the new one.
    assert offsets_read(log, 1, 4, hint=LEADER) == [1, 2, 3]
    assert offsets_read(log, 1, 4, hint=None) == [1, 2, 3]


def test_records_deleted_before_they_were_read(caplog):
    log = Log(log_start=10)
    log.add(10, 6)
    with pytest.raises(DataLossError, match=r"Offsets \[4, 10\) of t-0 were deleted"):
        offsets_read(log, 4, 15)
    with caplog.at_level(logging.WARNING, logger="lograft.pipelines"):
        assert offsets_read(log, 4, 15, fail_on_data_loss=False) == [10, 11, 12, 13, 14]
    assert "Offsets [4, 10) of t-0 were deleted" in caplog.text


def test_a_log_that_now_ends_below_the_range(caplog):
    log = Log()
    log.add(0, 3)  # the topic was re-created: it ends at 3, the range is [5, 9)
    with pytest.raises(DataLossError, match=r"t-0 now ends at offset 3, below offset 5"):
        offsets_read(log, 5, 9)
    with caplog.at_level(logging.WARNING, logger="lograft.pipelines"):
        assert offsets_read(log, 5, 9, fail_on_data_loss=False) == []


def test_a_partition_that_no_longer_exists():
    log = Log(partitions=1)
    log.add(0, 3)
    transport = ScriptedTransport(log.handle)
    with pytest.raises(DataLossError, match=r"t-3 does not exist any more"):
        list(read_range(settings(), OffsetRange("t", 3, 0, 2, None), transport=transport))


def test_no_progress_fails_after_the_poll_timeout():
    log = Log(high_watermark=2)
    log.add(0, 2)
    log.add(2, 3)
    # The leader's high watermark stays below the range's end (5): records 2..4
    # exist but are not committed; after kafkaConsumer.pollTimeoutMs the task fails.
    with pytest.raises(ClientTimeoutError, match=r"could not read t-0 at offset 2"):
        offsets_read(log, 0, 5)


def test_a_response_inflating_past_the_budget_is_read_on_from_where_it_was_cut():
    # Small gzip batches around one that inflates to 4 MiB from a few KiB; a
    # response carries all three. With a 64 KiB budget the first response
    # stops before the big batch, the next starts with it (a first batch
    # always inflates) and stops before the third.
    log = Log(batches_per_response=3)
    log.batches.append((0, 10, gzip_batch(0, [b"v%d" % i for i in range(10)])))
    log.batches.append((10, 14, gzip_batch(10, [b"\0" * (1 << 20)] * 4)))
    log.batches.append((14, 24, gzip_batch(14, [b"v%d" % i for i in range(14, 24)])))
    transport = ScriptedTransport(log.handle)
    got = []
    rng = OffsetRange("t", 0, 0, 24, LEADER)
    for b in read_range(settings(fetch_max_decompressed_bytes=64 * 1024), rng, transport=transport):
        got.extend(r["offset"] for r in b.to_pylist())
    assert got == list(range(24))
    fetches = transport.to("/records")
    assert [int(c.params["offset"]) for c in fetches] == [0, 10, 14]
    # Every fetch answer is bounded too: what was asked plus one batch.
    assert {c.body_max_bytes for c in fetches} == {(1 << 20) + (64 << 20)}


def gzip_batch(base: int, values: list[bytes]) -> bytes:
    return build_batch(
        [RecordInput(v, key=b"k%d" % (base + i)) for i, v in enumerate(values)],
        timestamp_ms=TS,
        base_offset=base,
        compression=Compression.GZIP,
    )

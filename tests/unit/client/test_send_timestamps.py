"""A record's timestamp that no batch can hold is the caller's error
(SerializationError, raised by the send), on every send path, and leaves the
producer and its open batch as they were.

Kafka's producer refuses a negative timestamp; an int64 holds the rest, and
two timestamps in 0..2^63-1 are less than 2^63 apart, so no record's
timestampDelta can overflow its varlong. Before, a timestamp 2^62 below an
open batch's first raised the encoder's ValueError, and a negative one that
did not overflow went into the batch, which the leader then refused whole
(INVALID_TIMESTAMP) with every good record in it."""

from __future__ import annotations

import pytest

from lograft.client import AsyncProducer, Producer
from lograft.client.errors import SerializationError
from lograft.client.producer import TIMESTAMP_MS_MAX
from lograft.protocol.batch import iter_records
from tests.unit.client.fakes import Call, ScriptedTransport
from tests.unit.client.test_scripted import FAST, A, ack, cluster_handler

# The batch stays open between sends (the sync producer's lock-free path
# takes records into it) until flush.
OPEN = {**FAST, "linger_ms": 60_000}
GOOD = 1_700_000_000_000

BAD = [
    pytest.param(-1, id="negative"),
    pytest.param(-(1 << 62), id="2^62-below-an-open-batch"),
    pytest.param(TIMESTAMP_MS_MAX + 1, id="past-int64"),
    pytest.param(1 << 64, id="past-uint64"),
    pytest.param("soon", id="not-a-number"),
]


class Log:
    """Acknowledges every batch and keeps each record's (value, timestamp)."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, int]] = []

    def on_batch(self, call: Call):
        base = len(self.records)
        self.records.extend((r.value, r.timestamp) for r in iter_records(call.data))
        return ack(call, base=base)


@pytest.mark.parametrize("bad", BAD)
def test_sync_send_refuses_a_timestamp_no_batch_holds(bad):
    log = Log()
    with Producer(A, transport=ScriptedTransport(cluster_handler([1], log.on_batch)), **OPEN) as p:
        p.send("t", b"first", timestamp_ms=GOOD)
        # the record would join the open batch on the lock-free path
        with pytest.raises(SerializationError, match="timestamp_ms"):
            p.send("t", b"bad", timestamp_ms=bad)
        # ... and on the full path (headers take it)
        with pytest.raises(SerializationError, match="timestamp_ms"):
            p.send("t", b"bad", headers=[("h", b"v")], timestamp_ms=bad)
        p.send("t", b"last", timestamp_ms=GOOD + 1)
        p.flush()
    assert log.records == [(b"first", GOOD), (b"last", GOOD + 1)]


@pytest.mark.parametrize("bad", BAD)
async def test_async_send_refuses_a_timestamp_no_batch_holds(bad):
    log = Log()
    transport = ScriptedTransport(cluster_handler([1], log.on_batch))
    async with AsyncProducer(A, transport=transport, **OPEN) as p:
        await p.send("t", b"first", timestamp_ms=GOOD)
        with pytest.raises(SerializationError, match="timestamp_ms"):
            await p.send("t", b"bad", timestamp_ms=bad)
        await p.send("t", b"last", timestamp_ms=GOOD + 1)
        await p.flush()
    assert log.records == [(b"first", GOOD), (b"last", GOOD + 1)]


@pytest.mark.parametrize("keys", [None, [b"k", b"k", b"k"]], ids=["raw-column", "per-record"])
@pytest.mark.parametrize("bad", BAD)
def test_send_many_refuses_a_timestamp_no_batch_holds_before_queueing_any(bad, keys):
    log = Log()
    with Producer(A, transport=ScriptedTransport(cluster_handler([1], log.on_batch)), **OPEN) as p:
        with pytest.raises(SerializationError, match=r"timestamps_ms\[1\]"):
            p.send_many("t", [b"a", b"b", b"c"], keys, timestamps_ms=[GOOD, bad, None])
        done = p.send_many("t", [b"d"], timestamps_ms=[0])
        p.flush()
        assert done.result(10)[0].timestamp == 0
    assert log.records == [(b"d", 0)]


@pytest.mark.parametrize("bad", BAD)
async def test_async_send_many_refuses_a_timestamp_no_batch_holds(bad):
    log = Log()
    transport = ScriptedTransport(cluster_handler([1], log.on_batch))
    async with AsyncProducer(A, transport=transport, **OPEN) as p:
        with pytest.raises(SerializationError, match=r"timestamps_ms\[0\]"):
            await p.send_many("t", [b"a"], timestamps_ms=[bad])
        done = await p.send_many("t", [b"b"], timestamps_ms=[TIMESTAMP_MS_MAX])
        await p.flush()
        assert (await done)[0].timestamp == TIMESTAMP_MS_MAX
    assert log.records == [(b"b", TIMESTAMP_MS_MAX)]

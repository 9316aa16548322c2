"""The producer's back-off ends once the metadata names a new leader.

A partition whose leader died is retried on the doubling back-off schedule;
a new leader elected meanwhile used to be tried only when the current wait
ran out (up to `retry_backoff_max_ms` later). Now the wait re-reads the
topic every `retry_backoff_ms` and retries at the new leader at once."""

from __future__ import annotations

import time

from lograft.client import AsyncProducer
from lograft.client.errors import NetworkError
from lograft.client.metadata import ClusterMetadata
from tests.unit.client.fakes import Call, ScriptedTransport, brokers_doc, json_response, topic_doc

A, B = "http://a:1", "http://b:2"
BROKERS = {1: A, 2: B}
# Failures at the dead leader before the new one is named: the wait after the
# last is 20 ms * 2**6 = 1.28 s (+-20 %), the one a new leader had to sit out.
FAILURES = 7


async def test_a_new_leader_is_tried_at_once_not_after_the_current_back_off():
    failed_at: list[float] = []
    sent_to_b: list[float] = []

    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc(BROKERS))
        if call.path == "/v1/topics/t":
            leader = 2 if len(failed_at) >= FAILURES else 1
            return json_response(call, topic_doc("t", [leader]))
        if call.path == "/v1/producers":
            return json_response(call, {"producer_id": 7, "producer_epoch": 0}, 201)
        assert call.path.endswith("/batches"), call
        if call.base == A:
            failed_at.append(time.monotonic())
            raise NetworkError("connection refused (scripted)", sent=False)
        sent_to_b.append(time.monotonic())
        return json_response(
            call,
            {"partition": 0, "base_offset": 0, "last_offset": 0, "log_append_time": -1},
        )

    t = ScriptedTransport(handler)
    settings = {"retry_backoff_ms": 20, "retry_backoff_max_ms": 60_000, "linger_ms": 0}
    async with AsyncProducer(A, transport=t, **settings) as p:
        meta = await p.send_and_wait("t", b"v")
    assert meta.offset == 0 and len(failed_at) == FAILURES and len(sent_to_b) == 1
    gap = sent_to_b[0] - failed_at[-1]
    # The back-off after the last failure was at least 1.02 s; the new leader
    # is named at the first re-read, 20 ms in (generous bound for a loaded box).
    assert gap < 0.8, f"the new leader was tried {gap:.2f} s after the last failure"


async def test_polling_for_a_leader_refreshes_a_topic_at_most_once_per_interval():
    now = [0.0]

    def handler(call: Call):
        if call.path == "/v1/brokers":
            return json_response(call, brokers_doc(BROKERS))
        return json_response(call, topic_doc("t", [1]))

    t = ScriptedTransport(handler)
    md = ClusterMetadata(
        t, [A], request_timeout_ms=1000, metadata_max_age_ms=60_000, clock=lambda: now[0]
    )
    await md.refresh_at_most_every("t", 0.1)
    now[0] = 0.05
    await md.refresh_at_most_every("t", 0.1)
    assert md.refreshes == 1, "a fresh entry younger than the interval is reused"
    md.request_update("t")
    await md.refresh_at_most_every("t", 0.1)
    assert md.refreshes == 2, "a stale entry is always refreshed"
    now[0] = 0.2
    await md.refresh_at_most_every("t", 0.1)
    assert md.refreshes == 3

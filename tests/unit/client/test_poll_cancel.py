"""A cancelled poll stops, even when the cancel lands as its wait for records
ends (Python 3.11's asyncio.wait_for swallowed such a cancel, so a cancelled
poll ran on to its timeout)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lograft.client import AsyncConsumer, TopicPartition
from lograft.client.transport import HttpResponse
from tests.raft_support import eventually_async
from tests.unit.client.fakes import Call, ScriptedTransport, brokers_doc, json_response, topic_doc

A = "http://a:1"
T0 = TopicPartition("t", 0)
WAIT_S = 10.0

pytestmark = pytest.mark.timeout(60)


def metadata_only(call: Call) -> HttpResponse:
    if call.path == "/v1/brokers":
        return json_response(call, brokers_doc({1: A}))
    if call.path == "/v1/topics/t":
        return json_response(call, topic_doc("t", [1]))
    raise AssertionError(f"unexpected {call}")


class SilentPartitions(ScriptedTransport):
    """Answers metadata; offset lookups and fetches never answer, so nothing
    but the test wakes a waiting poll."""

    async def request(self, method: str, url: str, **kwargs: Any) -> HttpResponse:
        if "/partitions/" in url:
            self.calls.append(Call(method, url, kwargs.get("params"), None, None))
            await asyncio.Event().wait()
        return await super().request(method, url, **kwargs)


async def test_a_poll_cancelled_as_its_wait_ends_is_cancelled():
    transport = SilentPartitions(metadata_only)
    consumer = AsyncConsumer(A, transport=transport, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([T0])
    long_poll = asyncio.ensure_future(consumer.poll(timeout_ms=60_000))
    try:
        # poll starts the offset lookup just before it waits: once the
        # lookup is sent, poll waits for a change (which never comes).
        await eventually_async(lambda: transport.to("/offsets"), WAIT_S, "the lookup")
        consumer.seek(T0, 5)  # ends the wait: its inner waiter finishes at the next step...
        await asyncio.sleep(0)  # ...which runs now, before poll itself resumes
        long_poll.cancel()  # so the cancel lands as the wait ends
        await asyncio.wait({long_poll}, timeout=WAIT_S)
        assert long_poll.cancelled(), "the cancelled poll went on waiting for records"
    finally:
        long_poll.cancel()
        await asyncio.gather(long_poll, return_exceptions=True)
        await consumer.close()

"""Client quotas on a real node (issue 12): a quota set with POST /v1/quotas
throttles its client id only (X-Lograft-Throttle-Ms, throttle_time_ms), a
produce over the hard limit is 429 with Retry-After and writes nothing, and
the Python producer backs off and still delivers everything.

The node's `[quotas] throttle_max_ms` is 1 s so that the hard limit is
reached with little data. No assertion is on speed: a lower bound on the
time the throttled producer took is the quota working, never a slow machine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp
import pytest

from lograft.client import AsyncConsumer, AsyncProducer, TopicPartition
from lograft.protocol.batch import RecordInput, build_batch
from tests.integration.cluster_harness import ClusterNode, LograftCluster

THROTTLE = "X-Lograft-Throttle-Ms"
CLIENT_ID = "X-Lograft-Client-Id"
BATCH_TYPE = "application/vnd.lograft.batch"
QUOTA = 100_000  # bytes/s
THROTTLE_MAX_MS = 1000


@pytest.fixture
def node(lograft_cluster: Callable[..., LograftCluster]) -> Iterator[ClusterNode]:
    cluster = lograft_cluster(
        size=1, overrides={1: {"quotas": {"throttle_max_ms": THROTTLE_MAX_MS}}}
    )
    cluster.start()
    node = cluster[1]
    node.ok("POST", "/v1/topics", {"name": "q", "partitions": 1, "replication_factor": 1}, 201)
    cluster.eventually(
        lambda: node.get("/v1/topics/q/partitions/0/offsets").status == 200, 20, "leader of q"
    )
    yield node


def set_quota(
    node: ClusterNode, client_id: str, value: int, key: str = "producer_byte_rate"
) -> None:
    body = {"entity": {"client_id": client_id}, "set": {key: value}}
    node.ok("POST", "/v1/quotas", body)

    def applied() -> bool:
        got = node.ok("GET", f"/v1/quotas?client_id={client_id}")
        return any(q["values"].get(key) == value for q in got["quotas"])

    node.cluster.eventually(applied, 20, f"quota of {client_id} applied")


def latest(node: ClusterNode) -> int:
    return int(node.ok("GET", "/v1/topics/q/partitions/0/offsets")["latest"])


def batch(nbytes: int) -> bytes:
    return build_batch([RecordInput(value=b"x" * nbytes)], timestamp_ms=int(time.time() * 1000))


async def produce_raw(
    session: aiohttp.ClientSession, node: ClusterNode, data: bytes, client_id: str
) -> tuple[int, Mapping[str, str], Any]:
    async with session.post(
        f"{node.url}/v1/topics/q/partitions/0/batches",
        data=data,
        headers={"Content-Type": BATCH_TYPE, CLIENT_ID: client_id},
    ) as resp:
        return resp.status, resp.headers, await resp.json()


async def test_throttle_header_then_429_with_retry_after_writes_nothing(node):
    set_quota(node, "it-raw", QUOTA)
    async with aiohttp.ClientSession() as session:
        # 150 kB against 100 kB/s: half a second over.
        status, headers, body = await produce_raw(session, node, batch(150_000), "it-raw")
        assert status == 200, body
        ms = int(headers[THROTTLE])
        assert ms > 0 and body["throttle_time_ms"] == ms
        before = latest(node)
        # As much again at once: more than throttle_max_ms over -> refused.
        status, headers, body = await produce_raw(session, node, batch(190_000), "it-raw")
        assert status == 429, body
        assert body["error"]["code"] == "THROTTLING_QUOTA_EXCEEDED"
        assert int(headers["Retry-After"]) >= 1
        assert body["error"]["details"]["retry_after_ms"] > 0
        assert THROTTLE not in headers
        assert latest(node) == before  # nothing written
        # Another client id has no quota: neither throttled nor refused.
        status, headers, body = await produce_raw(session, node, batch(190_000), "it-free")
        assert status == 200 and THROTTLE not in headers, body


async def test_the_producer_backs_off_and_delivers_everything(node):
    set_quota(node, "it-client", QUOTA)
    records, size = 8, 40_000
    producer = AsyncProducer(
        node.url,
        client_id="it-client",
        acks="all",
        linger_ms=0,
        batch_bytes=64 * 1024,
    )
    before = latest(node)
    started = time.monotonic()
    try:
        futures = [await producer.send("q", b"y" * size) for _ in range(records)]
        await asyncio.wait_for(producer.flush(), 60)
        offsets = [(await f).offset for f in futures]
    finally:
        await producer.close()
    took = time.monotonic() - started
    assert len(set(offsets)) == records
    assert latest(node) == before + records
    stats = producer.stats.throttle
    assert stats.throttled_responses + stats.quota_refusals > 0, stats
    # 320 kB at 100 kB/s, with one window's credit: at least 2 s of waiting.
    assert took >= (records * size - QUOTA) / QUOTA - 0.2, (took, stats)


async def test_the_consumer_is_throttled_and_reads_everything(node):
    records, size = 4, 60_000
    async with aiohttp.ClientSession() as session:
        for _ in range(records):
            status, _, body = await produce_raw(session, node, batch(size), "it-writer")
            assert status == 200, body
    set_quota(node, "it-reader", QUOTA, "consumer_byte_rate")
    tp = TopicPartition("q", 0)
    started = time.monotonic()
    async with AsyncConsumer(node.url, client_id="it-reader", auto_offset_reset="earliest") as c:
        c.assign([tp])
        got: list[bytes] = []
        while len(got) < records:
            polled = await asyncio.wait_for(c.poll(timeout_ms=1000), 60)
            got += [r.value for r in polled.get(tp, [])]
        stats = c.throttle_stats
    took = time.monotonic() - started
    assert got == [b"x" * size] * records
    assert stats.throttled_responses + stats.quota_refusals > 0, stats
    # 240 kB at 100 kB/s, with one window's credit: over a second of waiting.
    assert took >= (records * size - QUOTA) / QUOTA - 0.5, (took, stats)

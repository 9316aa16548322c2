"""Client quotas on the public routes (api/quota_gate.py) against a real
one-broker ReplicaManager, with the quotas' clock and the throttle's sleep
faked: what is counted, the throttle header and field, 429 over the hard
limit with nothing written, and what is not counted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import SECRET_HEADER, create_app
from lograft.api.caller import CLIENT_ID_HEADER
from lograft.api.quota_gate import (
    THROTTLE_HEADER,
    QuotaGate,
    RequestQuota,
    _Timed,
    request_quota,
    serve_with_quotas,
)
from lograft.api.routes_data import BATCH_CONTENT_TYPE, DataRoutes
from lograft.api.stream.limits import StreamLimits
from lograft.api.stream.routes import StreamRoutes
from lograft.brokers.replica_manager import BrokerSettings, ReplicaManager
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.produce_wire import CONTENT_TYPE as FORWARD_CONTENT_TYPE
from lograft.protocol.produce_wire import Acks, PartitionBatch, ProduceRequest, encode_request
from lograft.protocol.topic_partition import TopicPartition
from lograft.security.quotas import QuotaConfig, QuotaEntity, QuotaKey
from tests.unit.api.one_broker import OneBrokerMetadata

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
CONSUME = QuotaKey.CONSUMER_BYTE_RATE
REQUEST = QuotaKey.REQUEST_PERCENTAGE
SLOW = {CLIENT_ID_HEADER: "slow"}
FAST = {CLIENT_ID_HEADER: "fast"}


@dataclass
class Env:
    client: TestClient
    rm: ReplicaManager
    gate: QuotaGate
    quotas: dict[QuotaEntity, Mapping[QuotaKey, float]]
    slept_ms: list[int] = field(default_factory=list)

    def set_quota(self, client_id: str, key: QuotaKey, value: float) -> None:
        # A new object, as the image makes one when a quota record is replayed.
        entity = QuotaEntity(client_id=client_id)
        self.quotas = {**self.quotas, entity: {**self.quotas.get(entity, {}), key: value}}

    def log_end(self, partition: int = 0) -> int:
        return self.rm.partition(TopicPartition("orders", partition)).log.log_end_offset


@pytest.fixture
async def env(tmp_path) -> AsyncIterator[Env]:
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    md = OneBrokerMetadata()
    md.set_topic("orders", 1)
    rm.apply_metadata(md.wanted())
    holder: list[Env] = []

    async def fake_sleep(seconds: float) -> None:
        holder[0].slept_ms.append(round(seconds * 1000))
        await asyncio.sleep(0)

    gate = QuotaGate(
        QuotaConfig(throttle_max_ms=10_000),
        lambda: holder[0].quotas,
        clock=lambda: 1000.0,  # frozen: every rate is over one window
        sleep=fake_sleep,
    )
    app = create_app(
        cluster_secret="s", request_bytes_max=1 << 20, ready=lambda: (True, {}), quotas=gate
    )
    DataRoutes(rm, md).add_to(app)
    StreamRoutes(rm, md, StreamLimits(heartbeat_interval_ms=100)).add_to(app)
    async with TestClient(TestServer(app)) as client:
        holder.append(Env(client, rm, gate, {}))
        yield holder[0]
    await rm.stop()


def _batch(size: int) -> bytes:
    return build_batch([RecordInput(value=b"x" * size)], timestamp_ms=1)


async def _produce_raw(env: Env, data: bytes, headers: dict[str, str]):
    return await env.client.post(
        "/v1/topics/orders/partitions/0/batches",
        data=data,
        headers={"Content-Type": BATCH_CONTENT_TYPE, **headers},
    )


async def test_no_quota_no_header_no_field(env):
    resp = await _produce_raw(env, _batch(5000), SLOW)
    assert resp.status == 200
    assert THROTTLE_HEADER not in resp.headers
    assert "throttle_time_ms" not in await resp.json()
    assert env.slept_ms == []


async def test_a_produce_over_the_quota_is_delayed_and_says_by_how_much(env):
    env.set_quota("slow", PRODUCE, 1000)
    data = _batch(2900)
    resp = await _produce_raw(env, data, SLOW)
    assert resp.status == 200, await resp.text()
    # (rate - quota) / quota * window, the rate being the bytes as received.
    want = round((len(data) - 1000) / 1000 * 1000)
    assert resp.headers[THROTTLE_HEADER] == str(want)
    assert (await resp.json())["throttle_time_ms"] == want
    assert env.slept_ms == [want]
    # Another client id of the same user has no quota: not throttled.
    resp = await _produce_raw(env, data, FAST)
    assert resp.status == 200 and THROTTLE_HEADER not in resp.headers
    assert env.slept_ms == [want]


async def test_json_produce_counts_its_body_and_carries_the_field(env):
    env.set_quota("slow", PRODUCE, 100)
    body = orjson.dumps({"records": [{"value": "v" * 300}]})
    resp = await env.client.post(
        "/v1/topics/orders/records",
        data=body,
        headers={"Content-Type": "application/json", **SLOW},
    )
    assert resp.status == 200, await resp.text()
    want = round((len(body) - 100) / 100 * 1000)
    assert resp.headers[THROTTLE_HEADER] == str(want)
    assert (await resp.json())["throttle_time_ms"] == want


async def test_over_the_hard_limit_429_with_retry_after_and_nothing_written(env):
    env.set_quota("slow", PRODUCE, 1000)
    data = _batch(15_000)  # throttle ~14 s > throttle_max_ms
    resp = await _produce_raw(env, data, SLOW)
    assert resp.status == 429, await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "THROTTLING_QUOTA_EXCEEDED" and error["retriable"] is True
    wanted = round((len(data) - 1000) / 1000 * 1000)
    assert error["details"]["retry_after_ms"] == wanted - 10_000
    assert resp.headers["Retry-After"] == str(-(-(wanted - 10_000) // 1000))
    assert "client_id=slow" in error["message"]
    assert env.log_end() == 0  # nothing written
    assert env.slept_ms == []  # a refusal is not delayed
    # Its bytes were taken back: a small produce now goes through.
    resp = await _produce_raw(env, _batch(100), SLOW)
    assert resp.status == 200 and env.log_end() == 1


async def test_a_request_too_large_for_the_quota_alone_says_so(env):
    env.set_quota("slow", PRODUCE, 10)
    resp = await _produce_raw(env, _batch(500), SLOW)
    assert resp.status == 429
    details = (await resp.json())["error"]["details"]
    assert details["request_bytes_max"] == 10 * 11  # quota * (window + max) s
    assert details["request_bytes"] > details["request_bytes_max"]


async def test_a_changed_quota_applies_and_a_removed_one_stops(env):
    env.set_quota("slow", PRODUCE, 1000)
    assert (await _produce_raw(env, _batch(2000), SLOW)).headers.get(THROTTLE_HEADER)
    env.quotas = {}
    resp = await _produce_raw(env, _batch(2000), SLOW)
    assert resp.status == 200 and THROTTLE_HEADER not in resp.headers


async def test_forwarded_produce_on_the_internal_route_is_not_counted(env):
    env.quotas = {QuotaEntity(client_id=None): {PRODUCE: 1}}  # every client id
    req = ProduceRequest("orders", Acks.ALL, [PartitionBatch(0, _batch(10_000))])
    resp = await env.client.post(
        "/internal/v1/produce",
        data=encode_request(req),
        headers={"Content-Type": FORWARD_CONTENT_TYPE, SECRET_HEADER: "s"},
    )
    assert resp.status == 200, await resp.text()
    assert THROTTLE_HEADER not in resp.headers
    assert env.gate.quotas[PRODUCE].sensor_count() == 0
    assert env.log_end() == 1


async def test_fetch_counts_bytes_sent_and_refuses_when_owing_too_much(env):
    resp = await _produce_raw(env, _batch(3000), FAST)
    assert resp.status == 200
    env.set_quota("slow", CONSUME, 1000)
    resp = await env.client.get(
        "/v1/topics/orders/partitions/0/records", params={"offset": "0"}, headers=SLOW
    )
    assert resp.status == 200, await resp.text()
    ms = int(resp.headers[THROTTLE_HEADER])
    body = await resp.json()
    assert body["throttle_time_ms"] == ms > 0 and len(body["records"]) == 1
    assert env.slept_ms == [ms]
    # Raw fetches count the batches sent; the client now owes far more than
    # throttle_max_ms (the clock is frozen): then a fetch reads nothing.
    for _ in range(10):
        resp = await env.client.get(
            "/v1/topics/orders/partitions/0/records",
            params={"offset": "0"},
            headers={"Accept": BATCH_CONTENT_TYPE, **SLOW},
        )
        if resp.status == 429:
            break
        assert int(resp.headers[THROTTLE_HEADER]) > 0
    assert resp.status == 429
    assert int(resp.headers["Retry-After"]) >= 1
    assert (await resp.json())["error"]["details"]["quota"] == "consumer_byte_rate"


async def test_an_error_answer_is_throttled_too(env):
    env.set_quota("slow", PRODUCE, 1000)
    # Counted, then refused by the partition: a batch that does not parse.
    resp = await _produce_raw(env, b"\x00" * 3000, SLOW)
    assert resp.status == 400
    assert int(resp.headers[THROTTLE_HEADER]) == 2000
    assert env.slept_ms == [2000]


async def test_request_percentage_counts_handler_time(env):
    env.set_quota("slow", REQUEST, 0.001)  # any time at all is over it
    resp = await env.client.get("/v1/topics/orders/partitions/0/offsets", headers=SLOW)
    assert resp.status == 200
    # Bounded by one window (Kafka's request quota throttle).
    ms = int(resp.headers[THROTTLE_HEADER])
    assert 0 < ms <= 1000
    resp = await env.client.get("/v1/topics/orders/partitions/0/offsets", headers=FAST)
    assert THROTTLE_HEADER not in resp.headers


async def test_stream_is_paced_between_pushes(env):
    for _ in range(3):
        assert (await _produce_raw(env, _batch(2000), FAST)).status == 200
    env.set_quota("slow", CONSUME, 1000)
    async with env.client.get(
        "/v1/topics/orders/stream",
        params={"offset": "earliest", "format": "base64"},
        headers=SLOW,
    ) as resp:
        assert resp.status == 200
        seen = b""
        while seen.count(b"data:") < 3 or b": throttle_ms=" not in seen:
            seen += await asyncio.wait_for(resp.content.readany(), 30)
    assert b": throttle_ms=" in seen
    assert env.slept_ms and all(ms > 0 for ms in env.slept_ms)


async def test_timed_counts_steps_not_waits():
    async def handler() -> str:
        await asyncio.sleep(0.3)
        started = time.perf_counter()
        while time.perf_counter() - started < 0.01:
            pass
        return "done"

    timed = _Timed(handler())
    assert await timed == "done"
    assert 0.01 <= timed.seconds < 0.3


async def test_timed_passes_cancellation_through():
    gate = asyncio.Event()

    async def handler() -> None:
        await gate.wait()

    async def run() -> None:
        await _Timed(handler())

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_fetch_reads_no_more_than_the_quota_lets_one_answer_carry(env):
    for _ in range(3):
        assert (await _produce_raw(env, _batch(2000), FAST)).status == 200
    env.set_quota("slow", CONSUME, 100)  # one answer: 100 B/s * (1 s + 10 s) = 1100 B
    resp = await env.client.get(
        "/v1/topics/orders/partitions/0/records",
        params={"offset": "0"},
        headers={"Accept": BATCH_CONTENT_TYPE, **SLOW},
    )
    assert resp.status == 200
    # At least one batch, whatever its size, and no more.
    assert resp.headers["X-Lograft-Next-Offset"] == "1"
    resp = await env.client.get(
        "/v1/topics/orders/partitions/0/records",
        params={"offset": "0"},
        headers={"Accept": BATCH_CONTENT_TYPE, **FAST},
    )
    assert resp.headers["X-Lograft-Next-Offset"] == "3"


async def test_a_requests_quota_is_its_own_and_only_while_it_is_served() -> None:
    """`request_quota` finds the dealings of the request being served with
    quotas in this task, never another request's, and nothing after it."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    gate = QuotaGate(QuotaConfig(), dict, clock=lambda: 1.0)
    served = make_mocked_request("POST", "/v1/topics/orders/records")
    other = make_mocked_request("POST", "/v1/topics/orders/records")
    seen: list[object] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.extend([request_quota(request), request_quota(other)])
        return web.Response()

    assert request_quota(served) is None
    await serve_with_quotas(gate, served, handler)
    assert isinstance(seen[0], RequestQuota) and seen[1] is None
    assert request_quota(served) is None

"""Compressed bombs and oversized work against the data routes.

Regressions (issue 9, part 2): a zstd batch holding one 63 MiB record of
zeros is 2,109 bytes; 250 of them in one 527 KB produce request held a
node's event loop for 10.5 s, and fetching one as JSON rendered a 378 MiB
body on the loop (8.45 s, 1.2 GB RSS, the broker fenced). These tests send
the same requests to one broker's routes and check the answers and what
was written, while a probe on the same event loop measures its worst lag.

STALL_BOUND_MS is deliberately generous: it must hold on a loaded 2-core CI
machine. The 100 ms target is checked by scripts/bench_stall.py, whose
figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from lograft.api.app import SECRET_HEADER, create_app
from lograft.api.record_work import RecordWork
from lograft.api.records_json import RenderLimits
from lograft.api.routes_data import BATCH_CONTENT_TYPE, DataLimits, DataRoutes
from lograft.api.services import TopicView
from lograft.api.stream.routes import StreamRoutes
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.errors import LograftError
from lograft.node.loop_lag import LoopLagProbe
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.compression import Compression
from lograft.protocol.produce_wire import CONTENT_TYPE as FORWARD_CONTENT_TYPE
from lograft.protocol.produce_wire import (
    Acks,
    PartitionBatch,
    ProduceRequest,
    decode_response,
    encode_request,
)
from lograft.protocol.topic_partition import TopicPartition
from tests.sse_support import SseParser

MIB = 1024 * 1024
STALL_BOUND_MS = 1000  # generous on purpose; see the module docstring
A = Assignment((1,), (1,), 1, 1, 0)
T = TypeVar("T")


def bomb(record_bytes: int = 63 * MIB, codec: Compression = Compression.ZSTD) -> bytes:
    return build_batch([RecordInput(bytes(record_bytes))], timestamp_ms=1, compression=codec)


BOMB = bomb()  # 2,109 bytes


class Topics:
    """`t`: 2 partitions, default configs. `big`: max_message_bytes raised
    to 128 MiB (any client may), so that one bomb record passes the
    per-record bound and the other bounds are what stop it."""

    views = {
        "t": TopicView("t", "id-1", {0: A, 1: A}),
        "big": TopicView("big", "id-2", {0: A}),
    }

    def topic(self, name: str) -> TopicView | None:
        return self.views.get(name)

    def topics(self) -> list[TopicView]:
        return list(self.views.values())

    def broker_url(self, broker_id: int) -> str | None:
        return None

    def live_brokers(self) -> list[int]:
        return [1]


@dataclass
class Env:
    client: TestClient[Any, Any]
    rm: ReplicaManager

    async def produce_raw(self, topic: str, body: bytes, partition: int = 0) -> Any:
        return await self.client.post(
            f"/v1/topics/{topic}/partitions/{partition}/batches?acks=1",
            data=body,
            headers={"Content-Type": BATCH_CONTENT_TYPE},
        )

    async def fetch(self, topic: str, offset: int, **params: int) -> Any:
        query = {"offset": str(offset), **{k: str(v) for k, v in params.items()}}
        return await self.client.get(f"/v1/topics/{topic}/partitions/0/records", params=query)

    def latest(self, topic: str, partition: int = 0) -> int:
        return self.rm.partition(TopicPartition(topic, partition)).log.log_end_offset

    def store(self, topic: str, data: bytes) -> None:
        """Append as a broker before these bounds would have (no record checks)."""
        part = self.rm.partition(TopicPartition(topic, 0))
        part.append_records(data, Acks.LEADER, validate_records=False)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    rm.apply_metadata(
        {
            TopicPartition("t", 0): PartitionMeta("id-1", A),
            TopicPartition("t", 1): PartitionMeta("id-1", A),
            TopicPartition("big", 0): PartitionMeta(
                "id-2", A, {"max_message_bytes": str(128 * MIB)}
            ),
        }
    )
    app = create_app(cluster_secret="s", request_bytes_max=16 * MIB, ready=lambda: (True, {}))
    work = RecordWork(2)
    limits = DataLimits(
        produce_decompressed_bytes_max=16 * MIB,
        render=RenderLimits(record_render_bytes_max=4 * MIB, fetch_decompressed_bytes_max=2 * MIB),
    )
    DataRoutes(rm, Topics(), limits=limits, work=work).add_to(app)
    StreamRoutes(rm, Topics(), work=work, render=limits.render).add_to(app)
    try:
        async with TestClient(TestServer(app)) as client:
            yield Env(client, rm)
    finally:
        work.close()
        await rm.stop()


async def worst_lag_during(work: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    """`work()`'s result, and the worst lag (ms) of this event loop meanwhile."""
    probe = LoopLagProbe()
    task = asyncio.create_task(probe.run())
    await asyncio.sleep(0.05)  # the probe takes its first turn
    try:
        result = await work()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return result, probe.worst_ms()


async def error_of(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    err = (await resp.json())["error"]
    assert err["code"] == code, err
    return err


# -- produce ---------------------------------------------------------------------------


async def test_the_bomb_request_is_refused_at_once_with_nothing_written(env: Env) -> None:
    assert len(BOMB) < 2200
    body = BOMB * 250  # 527 KB; 15.4 GiB inflated

    async def attack() -> tuple[Any, float]:
        t0 = time.monotonic()
        resp = await env.produce_raw("t", body)
        return resp, time.monotonic() - t0

    (resp, seconds), lag = await worst_lag_during(attack)
    err = await error_of(resp, 413, "MESSAGE_TOO_LARGE")
    assert err["details"]["limit_name"] == "max_message_bytes"
    assert err["details"]["position"] == 0, "refused at the first batch"
    assert env.latest("t") == 0
    assert seconds < 5, f"refusing took {seconds:.1f} s"
    assert lag < STALL_BOUND_MS, f"the event loop stalled {lag:.0f} ms"


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4])
async def test_bombs_of_every_codec_are_refused(env: Env, codec: Compression) -> None:
    resp = await env.produce_raw("t", bomb(8 * MIB, codec) * 3)
    await error_of(resp, 413, "MESSAGE_TOO_LARGE")
    assert env.latest("t") == 0


async def test_a_request_inflating_past_its_budget_is_refused_whole(env: Env) -> None:
    # `big` lets a record be 128 MiB: the request's budget (16 MiB here) is what stops it.
    four = bomb(4 * MIB)
    resp = await env.produce_raw("big", four * 2)
    assert resp.status == 200, await resp.text()
    assert env.latest("big") == 2

    async def attack() -> Any:
        return await env.produce_raw("big", bomb(6 * MIB) * 3 + BOMB)

    resp, lag = await worst_lag_during(attack)
    err = await error_of(resp, 413, "MESSAGE_TOO_LARGE")
    assert err["details"]["limit_name"] == "produce_decompressed_bytes_max"
    assert err["details"]["limit"] == 16 * MIB
    assert env.latest("big") == 2, "a refused request writes nothing"
    assert lag < STALL_BOUND_MS


async def test_a_forwarded_produce_refuses_the_bomb_partition_only(env: Env) -> None:
    good = build_batch([RecordInput(b"fine")], timestamp_ms=1)
    req = ProduceRequest("t", Acks.LEADER, [PartitionBatch(0, BOMB * 3), PartitionBatch(1, good)])
    resp = await env.client.post(
        "/internal/v1/produce",
        data=encode_request(req),
        headers={"Content-Type": FORWARD_CONTENT_TYPE, SECRET_HEADER: "s"},
    )
    assert resp.status == 200, await resp.text()
    outcomes = decode_response(await resp.read(), [0, 1])
    assert isinstance(outcomes[0], LograftError) and outcomes[0].code == "MESSAGE_TOO_LARGE"
    assert not isinstance(outcomes[1], LograftError)
    assert (env.latest("t", 0), env.latest("t", 1)) == (0, 1)


# -- JSON fetch ----------------------------------------------------------------------


async def test_a_json_fetch_of_a_stored_bomb_is_bounded_and_names_the_next_offset(
    env: Env,
) -> None:
    env.store("big", build_batch([RecordInput(b"before")], timestamp_ms=1))
    env.store("big", BOMB)
    env.store("big", build_batch([RecordInput(b"after")], timestamp_ms=1))

    async def fetches() -> list[Any]:
        return [await env.fetch("big", 0), await env.fetch("big", 1, max_bytes=50 * MIB)]

    (first, second), lag = await worst_lag_during(fetches)
    assert first.status == 200, await first.text()
    page = await first.json()
    assert [r["value"] for r in page["records"]] == ["before"]
    assert page["next_offset"] == 1, "the bomb is the next fetch's"
    err = await error_of(second, 413, "MESSAGE_TOO_LARGE")
    assert err["details"]["offset"] == 1 and err["details"]["next_offset"] == 2
    assert err["details"]["limit_name"] == "record_render_bytes_max"
    assert lag < STALL_BOUND_MS, f"the event loop stalled {lag:.0f} ms"
    page = await (await env.fetch("big", 2)).json()
    assert [r["value"] for r in page["records"]] == ["after"]


async def test_rendered_records_are_bounded_by_max_bytes(env: Env) -> None:
    value = "x" * 1000
    env.store("t", build_batch([RecordInput(value.encode())] * 200, timestamp_ms=1))
    seen: list[int] = []
    offset = 0
    while offset < 200:
        resp = await env.fetch("t", offset, max_bytes=10_000, max_records=10_000)
        body = await resp.read()
        page = orjson.loads(body)
        assert len(body) <= 10_000 + 200, "records past max_bytes were rendered"
        assert page["records"], "every fetch makes progress"
        seen += [r["offset"] for r in page["records"]]
        offset = page["next_offset"]
    assert seen == list(range(200))
    # The first record comes whatever max_bytes says (as Kafka's first batch).
    page = await (await env.fetch("t", 0, max_bytes=1)).json()
    assert [r["offset"] for r in page["records"]] == [0]


async def test_a_fetch_inflates_at_most_its_budget_but_always_the_first_batch(env: Env) -> None:
    # Four zstd batches of 1.5 MiB of records each; the fetch budget is 2 MiB.
    for i in range(4):
        records = [RecordInput(b"%d" % i * 1500)] * 1000
        env.store("t", build_batch(records, timestamp_ms=1, compression=Compression.ZSTD))
    offsets: list[int] = []
    offset = 0
    while offset < 4000:
        page = await (await env.fetch("t", offset, max_records=10_000, max_bytes=50 * MIB)).json()
        assert len(page["records"]) == 1000, "one batch per fetch: the next would pass 2 MiB"
        offsets += [r["offset"] for r in page["records"]]
        offset = page["next_offset"]
    assert offsets == list(range(4000))


async def test_a_large_raw_fetch_comes_whole(env: Env) -> None:
    batch = build_batch([RecordInput(b"r" * 100)] * 5000, timestamp_ms=1)  # ~0.5 MiB
    for _ in range(6):
        env.store("t", batch)
    resp = await env.client.get(
        "/v1/topics/t/partitions/0/records",
        params={"offset": "0", "max_bytes": str(50 * MIB)},
        headers={"Accept": BATCH_CONTENT_TYPE},
    )
    assert resp.status == 200
    body = await resp.read()
    assert len(body) == 6 * len(batch)
    assert resp.headers["X-Lograft-Next-Offset"] == "30000"
    assert resp.headers["X-Lograft-High-Watermark"] == "30000"


# -- streams ---------------------------------------------------------------------------


async def test_a_stream_reaching_a_stored_bomb_ends_naming_the_next_offset(env: Env) -> None:
    env.store("big", build_batch([RecordInput(b"before")], timestamp_ms=1))
    env.store("big", BOMB)

    async def read_stream() -> list[Any]:
        parser = SseParser()
        events: list[Any] = []
        async with env.client.get("/v1/topics/big/stream", params={"offset": "earliest"}) as resp:
            assert resp.status == 200
            while not any(e.name == "error" for e in events):
                chunk = await asyncio.wait_for(resp.content.readany(), 10)
                assert chunk, f"the stream ended without an error event: {events}"
                events += parser.feed(chunk)
        return events

    events, lag = await worst_lag_during(read_stream)
    records = [e.json() for e in events if e.name == "message" and e.data]
    assert [r["value"] for r in records] == ["before"]
    err = next(e for e in events if e.name == "error").json()["error"]
    assert err["code"] == "MESSAGE_TOO_LARGE"
    assert err["details"]["offset"] == 1 and err["details"]["next_offset"] == 2
    assert lag < STALL_BOUND_MS

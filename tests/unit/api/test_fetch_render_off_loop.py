"""A large JSON fetch is rendered off the event loop.

Regression: rendering ~10,000 records of a 1 MiB fetch took ~150 ms of CPU on
the node's event loop; under load (scripts/bench.py, JSON fetches of 100-byte
records) that held up broker heartbeats and controller duties long enough for
brokers to be fenced. Fetched data over RENDER_INLINE_BYTES_MAX is now
rendered in a worker thread; small fetches stay inline (no thread hop).

The switch once looked at the compressed size only: a 2 KB zstd batch of a
63 MiB record was rendered inline and held the loop for 8 s. Any compressed
batch now goes to a thread, whatever its size.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from lograft.api import routes_data
from lograft.api.app import create_app
from lograft.api.routes_data import BATCH_CONTENT_TYPE, DataRoutes
from lograft.api.services import TopicView
from lograft.brokers.partition import Assignment
from lograft.brokers.replica_manager import BrokerSettings, PartitionMeta, ReplicaManager
from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.compression import Compression
from lograft.protocol.topic_partition import TopicPartition

ASSIGNMENT = Assignment((1,), (1,), 1, 1, 0)


class OneTopic:
    view = TopicView("t", "id-1", {0: ASSIGNMENT})

    def topic(self, name: str) -> TopicView | None:
        return self.view if name == "t" else None

    def topics(self) -> list[TopicView]:
        return [self.view]

    def broker_url(self, broker_id: int) -> str | None:
        return None

    def live_brokers(self) -> list[int]:
        return [1]


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    rm = ReplicaManager(1, tmp_path, BrokerSettings(min_insync_replicas=1))
    await rm.start()
    rm.apply_metadata({TopicPartition("t", 0): PartitionMeta("id-1", ASSIGNMENT)})
    app = create_app(cluster_secret="s", request_bytes_max=4 << 20, ready=lambda: (True, {}))
    DataRoutes(rm, OneTopic()).add_to(app)
    async with TestClient(TestServer(app)) as c:
        yield c
    await rm.stop()


async def test_large_json_fetches_render_in_a_thread_small_ones_inline(
    client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    real = routes_data.render_page

    def spy(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(routes_data, "render_page", spy)
    small = build_batch([RecordInput(b"x" * 100)], timestamp_ms=1)
    large = build_batch([RecordInput(b"y" * 100) for _ in range(2000)], timestamp_ms=1)
    assert len(small) < routes_data.RENDER_INLINE_BYTES_MAX < len(large)
    for data in (small, large):
        resp = await client.post(
            "/v1/topics/t/partitions/0/batches?acks=1",
            data=data,
            headers={"Content-Type": BATCH_CONTENT_TYPE},
        )
        assert resp.status == 200, await resp.text()
    loop_thread = threading.get_ident()  # the test and the server share one loop

    resp = await client.get("/v1/topics/t/partitions/0/records?offset=0&max_bytes=200")
    body = await resp.json()
    assert [r["value"] for r in body["records"]] == ["x" * 100]
    resp = await client.get("/v1/topics/t/partitions/0/records?offset=1&max_records=10000")
    body = await resp.json()
    assert len(body["records"]) == 2000 and body["next_offset"] == 2001
    assert body["records"][0] == {
        "partition": 0,
        "offset": 1,
        "timestamp": 1,
        "key": None,
        "value": "y" * 100,
    }
    assert threads[0] == loop_thread, "a small fetch should render inline"
    assert threads[1] != loop_thread, "a large fetch rendered on the event loop"

    tiny = build_batch([RecordInput(b"z" * 50_000)], timestamp_ms=1, compression=Compression.ZSTD)
    assert len(tiny) < 200
    resp = await client.post(
        "/v1/topics/t/partitions/0/batches?acks=1",
        data=tiny,
        headers={"Content-Type": BATCH_CONTENT_TYPE},
    )
    assert resp.status == 200, await resp.text()
    resp = await client.get("/v1/topics/t/partitions/0/records?offset=2001")
    body = await resp.json()
    assert body["records"][0]["value"] == "z" * 50_000
    assert threads[2] != loop_thread, "a small compressed fetch rendered on the event loop"

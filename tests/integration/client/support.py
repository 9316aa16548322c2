"""Helpers for client tests against a real node: transports that count or
break requests, and reading a topic back with the harness's plain HTTP (not
through the client under test)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lograft.client.errors import NetworkError
from lograft.client.transport import HttpResponse, HttpTransport
from lograft.protocol.batch import Record, iter_records
from tests.integration.cluster_harness import ClusterNode, LograftCluster
from tests.integration.data_plane import raw_request

BATCH_TYPE = "application/vnd.lograft.batch"


@dataclass
class Node:
    cluster: LograftCluster
    node: ClusterNode

    @property
    def url(self) -> str:
        return self.node.url

    def wait_leaders(self, topic: str, partitions: int) -> None:
        """Every partition has a leader that serves it (its offsets answer 200)."""

        def ready() -> bool:
            return all(
                self.node.get(f"/v1/topics/{topic}/partitions/{p}/offsets").status == 200
                for p in range(partitions)
            )

        self.cluster.eventually(ready, 20, f"leaders of {topic}")

    def read_partition(self, topic: str, partition: int) -> list[Record]:
        """Every record below the high watermark, fetched raw over plain HTTP."""
        out: list[Record] = []
        offset = 0
        while True:
            resp = raw_request(
                "GET",
                f"{self.url}/v1/topics/{topic}/partitions/{partition}/records"
                f"?offset={offset}&max_bytes=1048576",
                headers={"Accept": BATCH_TYPE},
            )
            assert resp.status == 200, resp
            recs = [r for r in iter_records(resp.body) if r.offset >= offset]
            if not recs:
                return out
            out += recs
            offset = recs[-1].offset + 1

    def end_offset(self, topic: str, partition: int) -> int:
        return int(
            self.node.ok("GET", f"/v1/topics/{topic}/partitions/{partition}/offsets")["latest"]
        )


@dataclass
class Sent:
    method: str
    path: str
    params: Mapping[str, str] | None
    headers: Mapping[str, str] | None
    body: bytes | None


class CountingTransport:
    """The real HTTP transport, with every request recorded."""

    def __init__(self) -> None:
        self.inner = HttpTransport()
        self.sent: list[Sent] = []

    async def request(self, method: str, url: str, **kw: Any) -> HttpResponse:
        self.sent.append(
            Sent(method, urlsplit(url).path, kw.get("params"), kw.get("headers"), kw.get("data"))
        )
        return await self.inner.request(method, url, **kw)

    async def close(self) -> None:
        await self.inner.close()

    def produce_requests(self) -> list[Sent]:
        return [s for s in self.sent if s.method == "POST" and s.path.endswith("/batches")]

    def fetch_requests(self) -> list[Sent]:
        return [s for s in self.sent if s.method == "GET" and s.path.endswith("/records")]


class DropFirstAnswer(CountingTransport):
    """Each distinct batch's FIRST produce request reaches the broker and is
    appended, then the answer is lost: the client sees a broken connection
    after sending, exactly what a retry must survive without duplicating."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: dict[str, int] = {}  # sha256 of the body -> requests with it
        self.dropped = 0

    async def request(self, method: str, url: str, **kw: Any) -> HttpResponse:
        resp = await super().request(method, url, **kw)
        if method == "POST" and url.endswith("/batches"):
            digest = hashlib.sha256(kw["data"]).hexdigest()
            self.attempts[digest] = self.attempts.get(digest, 0) + 1
            if self.attempts[digest] == 1:
                assert resp.status == 200, resp  # the broker did append it
                self.dropped += 1
                raise NetworkError(f"POST {url} failed: connection reset (injected)", sent=True)
        return resp


class Gate(CountingTransport):
    """Produce requests wait until `open()`; everything else goes through."""

    def __init__(self) -> None:
        super().__init__()
        self._open: asyncio.Event | None = None
        self.waiting = 0

    async def request(self, method: str, url: str, **kw: Any) -> HttpResponse:
        if method == "POST" and url.endswith("/batches"):
            if self._open is None:
                self._open = asyncio.Event()
            self.waiting += 1
            await self._open.wait()
        return await super().request(method, url, **kw)


class SwapPairs(CountingTransport):
    """Produce requests are sent to the node in swapped pairs: the first of
    two requests in flight at once waits until the second has been answered
    (or `PAIR_WAIT_S` passed without a second), so the later batch always
    reaches the leader first. Counts the node's OUT_OF_ORDER_SEQUENCE_NUMBER
    refusals."""

    # How long a lone produce request waits for a partner before it goes, s.
    PAIR_WAIT_S = 1.0

    def __init__(self) -> None:
        super().__init__()
        self._first: asyncio.Future[None] | None = None
        self.refused = 0

    async def request(self, method: str, url: str, **kw: Any) -> HttpResponse:
        if not (method == "POST" and url.endswith("/batches")):
            return await super().request(method, url, **kw)
        if self._first is None:
            self._first = asyncio.get_running_loop().create_future()
            mine = self._first
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.PAIR_WAIT_S):
                    await asyncio.shield(mine)
            if self._first is mine:
                self._first = None
            return await self._counted(method, url, **kw)
        partner, self._first = self._first, None
        try:
            return await self._counted(method, url, **kw)
        finally:
            if not partner.done():
                partner.set_result(None)

    async def _counted(self, method: str, url: str, **kw: Any) -> HttpResponse:
        resp = await super().request(method, url, **kw)
        if resp.status == 409 and b"OUT_OF_ORDER_SEQUENCE_NUMBER" in resp.body:
            self.refused += 1
        return resp

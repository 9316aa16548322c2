"""ThrottledTransport (client/throttle.py): the client honours a node's quota
throttle (X-Lograft-Throttle-Ms) and its 429 Retry-After, per node."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import orjson
import pytest

from lograft.client.errors import NetworkError
from lograft.client.throttle import THROTTLE_HEADER, ThrottledTransport
from lograft.client.transport import HttpResponse

A = "http://node-a:9092/v1/topics/t/partitions/0/batches"
B = "http://node-b:9092/v1/topics/t/partitions/0/batches"


class Inner:
    """Answers from `answer(n, url)`, the n-th call; keeps when each was sent."""

    def __init__(self, answer: Callable[[int, str], HttpResponse]) -> None:
        self.answer = answer
        self.sent: list[tuple[str, float, int]] = []  # (url, loop time, timeout_ms)

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_ms: int,
        body_max_bytes: int | None = None,
    ) -> HttpResponse:
        self.sent.append((url, asyncio.get_running_loop().time(), timeout_ms))
        return self.answer(len(self.sent) - 1, url)

    async def close(self) -> None:
        pass


def ok(url: str, throttle_ms: int = 0) -> HttpResponse:
    headers = {THROTTLE_HEADER: str(throttle_ms)} if throttle_ms else {}
    return HttpResponse(200, b"{}", headers, url)


def refused(url: str, retry_after_ms: int) -> HttpResponse:
    body = {
        "error": {
            "code": "THROTTLING_QUOTA_EXCEEDED",
            "message": "over the quota",
            "retriable": True,
            "details": {"retry_after_ms": retry_after_ms},
        }
    }
    seconds = -(-retry_after_ms // 1000)
    return HttpResponse(429, orjson.dumps(body), {"Retry-After": str(seconds)}, url)


async def test_after_a_throttled_answer_the_next_request_to_that_node_waits():
    inner = Inner(lambda n, url: ok(url, 300) if n == 0 else ok(url))
    transport = ThrottledTransport(inner)
    first = await transport.request("POST", A, timeout_ms=5000)
    assert first.status == 200
    await transport.request("POST", A, timeout_ms=5000)
    (_, t0, _), (_, t1, timeout) = inner.sent
    assert t1 - t0 >= 0.3  # counted from when the throttled request was sent
    assert timeout < 5000  # the wait came out of the request's timeout
    stats = transport.stats
    assert stats.throttled_responses == 1 and stats.throttle_time_ms == 300
    assert stats.held_ms > 0


async def test_another_node_is_not_held():
    inner = Inner(lambda n, url: ok(url, 60_000) if n == 0 else ok(url))
    transport = ThrottledTransport(inner)
    await transport.request("POST", A, timeout_ms=5000)
    await asyncio.wait_for(transport.request("POST", B, timeout_ms=5000), 5)
    assert transport.stats.held_ms == 0


async def test_held_past_the_timeout_is_not_sent():
    inner = Inner(lambda n, url: ok(url, 60_000))
    transport = ThrottledTransport(inner)
    await transport.request("POST", A, timeout_ms=5000)
    with pytest.raises(NetworkError) as raised:
        await transport.request("POST", A, timeout_ms=100)
    assert raised.value.details["sent"] is False and raised.value.retriable
    assert len(inner.sent) == 1


async def test_a_429_is_sent_again_after_retry_after_within_the_timeout():
    inner = Inner(lambda n, url: refused(url, 200) if n == 0 else ok(url))
    transport = ThrottledTransport(inner)
    resp = await transport.request("POST", A, timeout_ms=5000)
    assert resp.status == 200
    (_, t0, _), (_, t1, _) = inner.sent
    assert t1 - t0 >= 0.2
    assert transport.stats.quota_refusals == 1 and transport.stats.quota_retries == 1


async def test_a_429_past_the_timeout_is_returned_and_the_node_stays_held():
    inner = Inner(lambda n, url: refused(url, 60_000))
    transport = ThrottledTransport(inner)
    resp = await transport.request("POST", A, timeout_ms=1000)
    assert resp.status == 429
    assert resp.error().code == "THROTTLING_QUOTA_EXCEEDED"
    assert len(inner.sent) == 1 and transport.stats.quota_retries == 0
    with pytest.raises(NetworkError):
        await transport.request("POST", A, timeout_ms=50)


async def test_other_429s_and_bad_headers_are_left_alone():
    other = HttpResponse(429, b"not json", {THROTTLE_HEADER: "soon"}, A)
    odd = HttpResponse(200, b"", {THROTTLE_HEADER: "\u00b2"}, A)
    inner = Inner(lambda n, url: other if n == 0 else odd)
    transport = ThrottledTransport(inner)
    assert (await transport.request("GET", A, timeout_ms=1000)).status == 429
    assert (await transport.request("GET", A, timeout_ms=1000)).status == 200
    assert transport.stats.quota_refusals == 0 and transport.stats.throttled_responses == 0

"""What a client can do with request bodies to a node: one real node process.

Issue 9. The node runs with small limits (below) so that every wait and
deadline shows within a second or two:

- slow clients that begin the largest bodies and stall hold the whole
  in-flight budget: further large bodies wait `request_bytes_inflight_wait_ms`
  and are answered 503, a small produce answers at once, the stalled ones are
  cut at `body_read_timeout_ms` (408), and then the whole budget is free
  again (four largest produces at once succeed);
- a body sent a byte at a time is cut at `body_read_timeout_ms` (408 JSON)
  and the connection closed soon after;
- gzip bombs (Content-Encoding: gzip, 100 MiB of zeros in ~100 KiB) are
  answered 415 before anything is inflated: no time, no memory;
- requests that do not parse get a JSON 400, never aiohttp's plain text.

The node log must have no ERROR line and no traceback (checked at the end).
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.integration.cluster_harness import ClusterNode
from tests.integration.quiet_node import quiet_node

BODY_MAX = 256 * 1024
INFLIGHT_MAX = 4 * BODY_MAX
WAIT_S = 0.3
BODY_TIMEOUT_S = 2.0
# A normal request while the budget is full must answer within this, s (it
# takes milliseconds; room for a loaded CI machine).
NORMAL_REQUEST_S_MAX = 1.0
# Slack for the node's timers and this machine's scheduling, s.
SLACK_S = 1.5
# The node's peak memory may grow by at most this while it refuses bombs, bytes.
BOMB_RSS_GROWTH_MAX = 16 * 1024 * 1024
# A lingering drain after an answer to an unread body (http_server.py), s.
UNREAD_BODY_DRAIN_S = 2.0

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterNode]:
    http = {
        "request_bytes_max": BODY_MAX,
        "request_bytes_inflight_max": INFLIGHT_MAX,
        "request_bytes_inflight_wait_ms": int(WAIT_S * 1000),
        "body_read_timeout_ms": int(BODY_TIMEOUT_S * 1000),
        "client_fault_log_interval_ms": 600_000,
    }
    with quiet_node(Path(tmp_path_factory.mktemp("bodies")), http) as node:
        yield node


# -- raw HTTP ------------------------------------------------------------------------------


def produce_head(length: int, *extra: str) -> bytes:
    lines = [
        "POST /v1/topics/t/records HTTP/1.1",
        "Host: x",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def largest_produce() -> bytes:
    """A valid JSON produce of exactly BODY_MAX bytes."""
    frame = b'{"records": [{"value": ""}]}'
    return frame[:-4] + b"x" * (BODY_MAX - len(frame)) + frame[-4:]


async def connect(node: ClusterNode) -> Conn:
    return await asyncio.open_connection("127.0.0.1", node.spec.http_port)


async def response(reader: asyncio.StreamReader, timeout_s: float) -> tuple[int, bytes, bytes]:
    """(status, head, body) of the next answer."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = await reader.readexactly(length)
    return int(head.split(b" ", 2)[1]), head, body


def code(body: bytes) -> str:
    return str(orjson.loads(body)["error"]["code"])


async def timed_produce(node: ClusterNode, body: bytes) -> float:
    """A produce over a fresh connection; its latency, s."""
    started = time.monotonic()
    reader, writer = await connect(node)
    try:
        writer.write(produce_head(len(body)) + body)
        status, _, answer = await response(reader, 10)
    finally:
        writer.close()
    assert status == 200, answer
    return time.monotonic() - started


def peak_rss_reset(pid: int) -> None:
    """Start a new peak (VmHWM) for `pid` (Linux: clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def rss(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the in-flight budget ------------------------------------------------------------------


async def test_slow_large_bodies_over_the_budget_are_refused_while_a_produce_answers(
    node: ClusterNode,
) -> None:
    # Six clients begin the largest produce and stall: four fill the budget.
    stalled = [await connect(node) for _ in range(6)]
    started = time.monotonic()
    for _, writer in stalled:
        writer.write(produce_head(BODY_MAX) + b'{"records": [')
    answers = [asyncio.ensure_future(response(r, BODY_TIMEOUT_S + 2 * SLACK_S)) for r, _ in stalled]
    try:
        refused = []
        for done in asyncio.as_completed(answers):
            status, head, body = await done
            if status == 408:
                break
            refused.append((status, code(body), b"Connection: close" in head))
            if len(refused) == 2:
                # Meanwhile a small produce answers at once.
                latency = await timed_produce(node, b'{"records": [{"value": "small"}]}')
                assert latency < NORMAL_REQUEST_S_MAX, f"a small produce took {latency:.2f} s"
        outcomes = [await a for a in answers]
    finally:
        for _, writer in stalled:
            writer.close()
    elapsed = time.monotonic() - started
    assert refused == [(503, "REQUEST_BYTES_INFLIGHT_LIMIT_REACHED", True)] * 2
    cut = [(status, code(body)) for status, _, body in outcomes if status != 503]
    assert cut == [(408, "REQUEST_BODY_TIMEOUT")] * 4
    assert BODY_TIMEOUT_S * 0.9 <= elapsed < BODY_TIMEOUT_S + 2 * SLACK_S
    # Every byte came back: four of the largest produces fit at once again.
    body = largest_produce()
    latencies = await asyncio.gather(*(timed_produce(node, body) for _ in range(4)))
    assert max(latencies) < WAIT_S + SLACK_S  # none had to wait its turn for long


async def test_a_slow_body_is_cut_at_its_timeout(node: ClusterNode) -> None:
    reader, writer = await connect(node)
    body = b'{"records": [{"value": "' + b"x" * 1000 + b'"}]}'
    writer.write(produce_head(len(body)))
    started = time.monotonic()
    answer = asyncio.ensure_future(response(reader, BODY_TIMEOUT_S + SLACK_S))
    sent = 0
    while not answer.done() and sent < len(body):  # ten bytes a second: never done in time
        writer.write(body[sent : sent + 1])
        sent += 1
        await asyncio.wait([answer], timeout=0.1)
    status, head, answer_body = await answer
    cut_at = time.monotonic() - started
    assert (status, code(answer_body)) == (408, "REQUEST_BODY_TIMEOUT")
    assert b"Connection: close" in head
    assert BODY_TIMEOUT_S * 0.9 <= cut_at < BODY_TIMEOUT_S + SLACK_S
    # And closed, once what is left of the body has been drained for a moment.
    async with asyncio.timeout(UNREAD_BODY_DRAIN_S + SLACK_S):
        assert await reader.read() == b""
    writer.close()


# -- coded bodies --------------------------------------------------------------------------


def gzip_of_zeros(mib: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(z.compress(bytes(1 << 20)) for _ in range(mib)) + z.flush()


async def test_gzip_bombs_are_refused_before_anything_is_inflated(node: ClusterNode) -> None:
    bomb = gzip_of_zeros(100)  # 100 MiB of zeros in about 100 KiB
    assert len(bomb) < BODY_MAX
    raw = produce_head(len(bomb), "Content-Encoding: gzip") + bomb
    pid = node.pid
    peak_rss_reset(pid)
    rss_before, cpu_before = rss(pid, "VmRSS"), cpu_s(pid)

    async def one() -> tuple[int, bytes, bytes]:
        reader, writer = await connect(node)
        try:
            writer.write(raw)
            return await response(reader, 5)
        finally:
            writer.close()

    started = time.monotonic()
    answers = await asyncio.gather(*(one() for _ in range(10)))
    elapsed = time.monotonic() - started
    assert [(status, code(body)) for status, _, body in answers] == [
        (415, "UNSUPPORTED_CONTENT_ENCODING")
    ] * 10
    assert all(b"Accept-Encoding: identity" in head for _, head, _ in answers)
    assert elapsed < NORMAL_REQUEST_S_MAX
    # Nothing inflated: 10 GiB of zeros would have cost seconds and memory.
    growth = rss(pid, "VmHWM") - rss_before
    assert growth < BOMB_RSS_GROWTH_MAX, f"peak RSS grew {growth / 2**20:.1f} MiB"
    assert cpu_s(pid) - cpu_before < 1.0


# -- HTTP that does not parse --------------------------------------------------------------

MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 20_000 + b"\r\n\r\n",
    b"POST /v1/topics/t/records HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: tea\r\n\r\n",
]


@pytest.mark.parametrize("raw", MALFORMED)
async def test_malformed_requests_get_a_json_400(node: ClusterNode, raw: bytes) -> None:
    reader, writer = await connect(node)
    try:
        writer.write(raw)
        status, head, body = await response(reader, 5)
    finally:
        writer.close()
    assert b"Content-Type: application/json" in head
    assert (status, code(body)) == (400, "INVALID_REQUEST")

"""Client-side quota throttling (Kafka's KIP-219), around any transport.

A node over whose quota this client goes answers late and says by how much
(`X-Lograft-Throttle-Ms`), or, past its `throttle_max_ms`, refuses with
`429 THROTTLING_QUOTA_EXCEEDED` and `Retry-After` (docs/api.md "Quotas").
`ThrottledTransport` honours both, per node (scheme, host and port):

- after a throttled answer it sends nothing more to that node until the
  throttle has passed. The node's throttle began when it took the request,
  and it already held the answer that long, so the wait is counted from
  when the request was sent: one request at a time adds no wait on top of
  the node's, and requests sent concurrently (the producer's in-flight
  batches, the consumer's partitions) are held instead of being sent only
  to be throttled in turn;
- after a 429 it sends nothing to that node for `details.retry_after_ms`
  (else `Retry-After` seconds), then sends the refused request again (the
  node wrote and read nothing for it) while the request's `timeout_ms`
  allows; past it, the 429 is returned, for the caller's own retries
  (the producer's are bounded by `delivery_timeout_ms`).

A request held past its `timeout_ms` is not sent: `NetworkError` with
`sent=False` (retriable). The time a request waited is taken from its
`timeout_ms`, so the caller's bound holds. Counts are in `stats`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from lograft.client.errors import NetworkError
from lograft.client.transport import HttpResponse, Transport

__all__ = [
    "THROTTLE_HEADER",
    "ThrottleStats",
    "ThrottledTransport",
    "throttle_stats_of",
]

THROTTLE_HEADER = "X-Lograft-Throttle-Ms"
QUOTA_REFUSED_STATUS = 429
# A Retry-After the client believes at most, seconds: a hostile or broken
# answer must not park the client for a year (requests are bounded by their
# timeout anyway).
RETRY_AFTER_MAX_S = 3600


@dataclass
class ThrottleStats:
    """What quotas cost this client (read on its loop, or after flush)."""

    throttled_responses: int = 0  # answers that carried X-Lograft-Throttle-Ms
    throttle_time_ms: int = 0  # the throttle those answers and 429s announced, in all
    quota_refusals: int = 0  # 429 THROTTLING_QUOTA_EXCEEDED answers
    quota_retries: int = 0  # refused requests sent again after Retry-After
    held_ms: float = 0.0  # time requests were held back before being sent


class ThrottledTransport:
    """`inner`, with the quota throttles of each node honoured (see above)."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.stats = ThrottleStats()
        # Node (scheme://host:port) -> loop time before which nothing is sent.
        self._until: dict[str, float] = {}

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
        loop = asyncio.get_running_loop()
        node = _node_of(url)
        deadline = loop.time() + timeout_ms / 1000
        while True:
            await self._hold(node, method, url, deadline)
            sent_at = loop.time()
            remaining_ms = max(1, int((deadline - sent_at) * 1000))
            resp = await self.inner.request(
                method,
                url,
                params=params,
                data=data,
                headers=headers,
                timeout_ms=remaining_ms,
                body_max_bytes=body_max_bytes,
            )
            if resp.status != QUOTA_REFUSED_STATUS:
                self._throttled(node, resp, sent_at)
                return resp
            wait_s = self._refused(node, resp, loop.time())
            if wait_s is None or loop.time() + wait_s >= deadline:
                return resp  # the caller's retries (or its error) take over
            self.stats.quota_retries += 1

    async def close(self) -> None:
        await self.inner.close()

    # -- bookkeeping --------------------------------------------------------------------

    async def _hold(self, node: str, method: str, url: str, deadline: float) -> None:
        """Wait until `node` may be sent to; NetworkError(sent=False) if that
        is past `deadline`."""
        until = self._until.get(node)
        if until is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if until <= now:
            if self._until.get(node) == until:
                del self._until[node]
            return
        wait = min(until, deadline) - now
        await asyncio.sleep(wait)
        self.stats.held_ms += wait * 1000
        if until > deadline:
            raise NetworkError(
                f"{method} {url} not sent: the node throttles this client (a quota) for "
                f"{(until - now) * 1000:.0f} ms more, past the request's timeout",
                url=url,
                sent=False,
                throttle_time_ms=round((until - now) * 1000),
            )

    def _hold_until(self, node: str, until: float) -> None:
        if until > self._until.get(node, 0.0):
            self._until[node] = until

    def _throttled(self, node: str, resp: HttpResponse, sent_at: float) -> None:
        ms = _int_header(resp.headers, THROTTLE_HEADER)
        if ms is None or ms <= 0:
            return
        self.stats.throttled_responses += 1
        self.stats.throttle_time_ms += ms
        self._hold_until(node, sent_at + ms / 1000)

    def _refused(self, node: str, resp: HttpResponse, now: float) -> float | None:
        """A 429: hold the node for its Retry-After; the wait in seconds, or
        None when it is not a quota refusal."""
        error = resp.error()
        if error.code != "THROTTLING_QUOTA_EXCEEDED":
            return None
        self.stats.quota_refusals += 1
        retry_ms = error.details.get("retry_after_ms")
        if not isinstance(retry_ms, int) or isinstance(retry_ms, bool) or retry_ms < 0:
            seconds = _int_header(resp.headers, "Retry-After")
            retry_ms = 1000 if seconds is None else seconds * 1000
        wait_s = min(retry_ms / 1000, RETRY_AFTER_MAX_S)
        self.stats.throttle_time_ms += round(wait_s * 1000)
        self._hold_until(node, now + wait_s)
        return wait_s


def throttle_stats_of(transport: Transport) -> ThrottleStats:
    """The throttle counters of a client's transport (zeros for one that is
    not a ThrottledTransport)."""
    return transport.stats if isinstance(transport, ThrottledTransport) else ThrottleStats()


def _node_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _int_header(headers: Mapping[str, str], name: str) -> int | None:
    raw = headers.get(name)
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        return None
    return int(raw)

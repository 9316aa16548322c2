"""The CLI's way to a consumer group's coordinator (`lograft groups ...`).

Group requests other than listing must reach the group's coordinator. The
client looks it up on a bootstrap node (`GET /v1/groups/{group}/coordinator`),
follows a `NOT_COORDINATOR` answer to the broker it names, and while the
coordinator moves or loads (`COORDINATOR_LOAD_IN_PROGRESS`,
`COORDINATOR_NOT_AVAILABLE`, the coordinator unreachable) looks it up again
after a pause, for at most `COORDINATOR_RETRY_TIMEOUT_MS`. An error answer
means the request was not carried out, so repeating it is safe; a timed-out
change is not repeated.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from lograft.cli.http_client import HttpClient, decode_error
from lograft.client.errors import ClusterUnreachableError
from lograft.errors import CoordinatorNotAvailableError, LograftError, NotCoordinatorError

# NOT_COORDINATOR answers followed for one request before looking up again
# (stale metadata on two brokers can send a request back and forth).
COORDINATOR_HOPS_MAX = 3
# How long one command keeps retrying while the coordinator moves or loads, ms.
COORDINATOR_RETRY_TIMEOUT_MS = 30_000
# Pause before the first lookup again, ms; it doubles up to RETRY_BACKOFF_MS_MAX.
RETRY_BACKOFF_MS_MIN = 100
RETRY_BACKOFF_MS_MAX = 2_000
# Codes that mean "the coordinator is moving or loading": look it up again, after a pause.
RETRIABLE_CODES = frozenset(
    {
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "CLUSTER_UNREACHABLE",
    }
)
# A timed-out change (reset, delete) may have been made: only reads retry it.
READ_RETRIABLE_CODES = RETRIABLE_CODES | {"REQUEST_TIMED_OUT"}


class CoordinatorClient:
    """Requests for one group, sent to its coordinator wherever it moves."""

    def __init__(
        self,
        client: HttpClient,
        group: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.group = group
        self.sleep = sleep
        self.clock = clock
        self.path = f"/v1/groups/{urllib.parse.quote(group, safe='')}"
        self.url: str | None = None  # None: look the coordinator up

    def call(self, method: str, suffix: str = "", json: Any = None) -> Any:
        deadline = self.clock() + COORDINATOR_RETRY_TIMEOUT_MS / 1000
        backoff_ms = RETRY_BACKOFF_MS_MIN
        retriable = READ_RETRIABLE_CODES if method == "GET" else RETRIABLE_CODES
        while True:
            try:
                return self._follow(method, self.path + suffix, json)
            except LograftError as exc:
                if exc.code not in retriable or self.clock() >= deadline:
                    raise
                if isinstance(exc, ClusterUnreachableError) and self.url is None:
                    raise  # every bootstrap node is down: say so now
            self.url = None
            self.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, RETRY_BACKOFF_MS_MAX)

    def _follow(self, method: str, path: str, json: Any) -> Any:
        for _hop in range(COORDINATOR_HOPS_MAX + 1):
            if self.url is None:
                self.url = self._lookup()
            reply = self.client.send(method, path, json=json, base=self.url)
            if reply.status < 400:
                return reply.body
            exc = decode_error(reply.status, reply.body, reply.url)
            url = exc.details.get("coordinator_url")
            if not isinstance(exc, NotCoordinatorError) or not isinstance(url, str) or not url:
                raise exc
            if url.rstrip("/") == self.url:
                raise exc
            self.url = url.rstrip("/")
        raise NotCoordinatorError(
            f"group {self.group!r}: still not at the coordinator after "
            f"{COORDINATOR_HOPS_MAX} redirects (metadata is moving)"
        )

    def _lookup(self) -> str:
        doc = self.client.get(self.path + "/coordinator")
        url = doc.get("coordinator_url")
        if not isinstance(url, str) or not url:
            raise CoordinatorNotAvailableError(
                f"group {self.group!r}: coordinator {doc.get('coordinator_id')} has no address yet"
            )
        return url.rstrip("/")

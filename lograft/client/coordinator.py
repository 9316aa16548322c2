"""Requests to a consumer group's coordinator.

Any node answers `GET /v1/groups/{group}/coordinator` with the coordinator's
URL; every other group request must go there. `send` makes one attempt (the
heartbeat loop retries with a fresh sequence number itself); `call` retries
retriable errors with backoff until a deadline (commits, offset fetches,
leave, and the admin calls of `admin.py`).

A call that is not `idempotent` (an admin change: delete a group, reset its
offsets) is not repeated once it may have taken effect: a REQUEST_TIMED_OUT
answer is raised as it is, a connection that broke after sending raises
OutcomeUnknownError. Error answers that say the request was not carried out
(the coordinator moved or is loading) are retried as for any call.

Re-discovery: a NOT_COORDINATOR answer names the new coordinator in
`details.coordinator_url`, which is used at once; COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE and connection failures forget the coordinator, so
the next attempt looks it up again (after the caller's backoff).

Loop-bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson

from lograft.client.backoff import backoff_ms
from lograft.client.config import CommonConfig
from lograft.client.errors import ClientTimeoutError, NetworkError
from lograft.client.metadata import ClusterMetadata, outcome_unknown
from lograft.client.transport import Transport
from lograft.errors import (
    CoordinatorNotAvailableError,
    LograftError,
    NotCoordinatorError,
    RequestTimedOutError,
)
from lograft.protocol.group_wire import COORDINATOR_ERRORS, group_path

JSON_HEADERS = {"Content-Type": "application/json"}


class CoordinatorClient:
    def __init__(
        self,
        group_id: str,
        config: CommonConfig,
        metadata: ClusterMetadata,
        transport: Transport,
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.metadata = metadata
        self.transport = transport
        self.url: str | None = None
        self.lookups = 0  # coordinator lookups made (for tests and stats)

    async def lookup(self) -> str:
        """Ask any node who coordinates the group (the first lookup of a cluster
        creates `__consumer_offsets`)."""
        self.lookups += 1
        resp = await self.metadata.request_any("GET", group_path(self.group_id, "/coordinator"))
        doc = resp.ok_json()
        url = doc.get("coordinator_url") if isinstance(doc, dict) else None
        if not isinstance(url, str) or not url:
            raise CoordinatorNotAvailableError(
                f"no coordinator for group {self.group_id} right now", group_id=self.group_id
            )
        self.url = url.rstrip("/")
        return self.url

    async def send(
        self,
        method: str,
        suffix_path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """One request to the coordinator (looked up first if unknown); the JSON
        answer, or the typed error (the coordinator forgotten or replaced first
        when the error says it moved)."""
        url = self.url or await self.lookup()
        try:
            resp = await self.transport.request(
                method,
                url + suffix_path,
                params=params,
                data=None if body is None else orjson.dumps(body),
                headers=JSON_HEADERS if body is not None else None,
                timeout_ms=timeout_ms or self.config.request_timeout_ms,
            )
        except NetworkError:
            self.url = None
            raise
        if resp.ok:
            return resp.json()
        err = resp.error()
        if isinstance(err, COORDINATOR_ERRORS):
            hint = None
            if isinstance(err, NotCoordinatorError):
                hint = err.details.get("coordinator_url")
            self.url = hint.rstrip("/") if isinstance(hint, str) and hint else None
        raise err

    async def call(
        self,
        method: str,
        suffix_path: str,
        *,
        deadline: float,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        idempotent: bool = True,
        retry_on: tuple[type[LograftError], ...] | None = None,
    ) -> Any:
        """`send`, retrying retriable errors (only those of `retry_on` if given)
        with backoff until `deadline` (loop time); then the last error is raised
        (ClientTimeoutError if none). Not `idempotent`: what may have taken
        effect is not repeated (see above)."""
        loop = asyncio.get_running_loop()
        attempt = 0
        last: LograftError | None = None
        while True:
            attempt += 1
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                if last is not None:
                    raise last  # as documented: the last error, which says why
                raise ClientTimeoutError(
                    f"{method} {suffix_path} to the coordinator of {self.group_id}: no answer "
                    "in time"
                )
            try:
                return await self.send(
                    method,
                    suffix_path,
                    body=body,
                    params=params,
                    timeout_ms=min(remaining_ms, self.config.request_timeout_ms),
                )
            except LograftError as exc:
                if (
                    not exc.retriable
                    or (retry_on is not None and not isinstance(exc, retry_on))
                    or (not idempotent and _may_have_taken_effect(exc))
                ):
                    if isinstance(exc, NetworkError):
                        where = f"{suffix_path} (to the coordinator of {self.group_id})"
                        raise outcome_unknown(method, where, exc) from exc
                    raise
                pause = backoff_ms(
                    attempt, self.config.retry_backoff_ms, self.config.retry_backoff_max_ms
                )
                if loop.time() + pause / 1000 >= deadline:
                    raise
                last = exc
                await asyncio.sleep(pause / 1000)


def _may_have_taken_effect(exc: LograftError) -> bool:
    """A timed-out answer, or a connection that broke after sending."""
    if isinstance(exc, RequestTimedOutError):
        return True
    return isinstance(exc, NetworkError) and bool(exc.details.get("sent", True))

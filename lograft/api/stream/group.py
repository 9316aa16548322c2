"""A stream's membership of a consumer group, through the group HTTP API.

A stream opened with `group=` is one member of the group, and a client of the
group endpoints like any other (the contract in docs/api.md, "Consumer
groups"): it finds the coordinator, joins with the stream's topic as its
subscription, heartbeats every `heartbeat_interval_ms` reporting the
partitions the stream holds, commits the positions it has delivered every
`commit_interval_ms`, and leaves when the stream ends. The coordinator may be
any broker, this one included; calls go over HTTP either way.

Ownership rules kept here (the coordinator relies on them: no partition has
two owners):

- `assigned` is the latest assignment; the stream reconciles to it, and
  `owned` is what it actually holds. A revoked partition's position is
  committed first, then it leaves `owned`, and only then does a heartbeat
  stop listing it.
- Commits and heartbeats go one at a time (a lock), so a periodic commit
  taken before a revocation cannot land after the heartbeat that gave the
  partition up.
- Fenced (`UNKNOWN_MEMBER_ID`, `FENCED_MEMBER_EPOCH`): every partition is
  dropped without a commit, and the member joins again only once the stream
  holds none.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import orjson
import yarl

from lograft.api.stream.limits import GroupLimits
from lograft.errors import (
    BrokerNotAvailableError,
    FencedMemberEpochError,
    LograftError,
    OutOfOrderHeartbeatError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)

AUTO_OFFSET_RESETS = ("earliest", "latest", "none")


class GroupMember:
    def __init__(
        self,
        http: aiohttp.ClientSession,
        bootstrap: Callable[[], str | None],
        dial: Callable[[int], str | None],
        group_id: str,
        topic: str,
        auto_offset_reset: str,
        limits: GroupLimits,
    ) -> None:
        self.http = http
        self.bootstrap = bootstrap  # this node's own URL: any broker answers lookups
        self.dial = dial  # broker id -> URL to call it at
        self.group_id = group_id
        self.topic = topic
        self.auto_offset_reset = auto_offset_reset
        self.limits = limits
        # Our own id (KIP-1082): a join retried after a lost answer is the same member.
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.heartbeat_interval_ms = 1_000
        self.assigned: frozenset[int] = frozenset()
        self.owned: set[int] = set()
        self.changed = asyncio.Event()  # `assigned` differs from what the stream last saw
        self.fenced = False
        # The node is stopping: one attempt per call, no waiting for a coordinator
        # that may be this very node, whose listener is already closed.
        self.closing = False
        self._sequence = 0
        self._committed: dict[int, int] = {}
        self._coordinator: str | None = None
        self._lock = asyncio.Lock()
        self._path = f"/v1/groups/{urllib.parse.quote(group_id, safe='')}"

    # -- membership ---------------------------------------------------------------------

    async def join(self) -> None:
        async with self._lock:
            doc = await self._call(
                "POST",
                f"{self._path}/members",
                {
                    "member_id": self.member_id,
                    "subscribed_topics": [self.topic],
                    "client_id": "lograft-stream",
                    "sequence": self._next_sequence(),
                },
            )
            self.fenced = False
            self._apply(doc)

    async def run(
        self, positions: Callable[[], Mapping[int, int]], commit_interval_ms: int
    ) -> None:
        """Heartbeat and commit until cancelled; raises what the stream cannot carry on from."""
        next_commit = time.monotonic() + commit_interval_ms / 1000
        while True:
            # A schedule, not a synchronisation: the protocol asks for a
            # heartbeat every heartbeat_interval_ms.
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            try:
                if self.fenced:
                    await self._rejoin()
                    continue
                await self.heartbeat()
                if time.monotonic() >= next_commit:
                    await self.commit(positions())
                    next_commit = time.monotonic() + commit_interval_ms / 1000
            except (UnknownMemberIdError, FencedMemberEpochError) as exc:
                log.info("stream member %s of %s fenced: %s", self.member_id, self.group_id, exc)
                self._fence()
            except OutOfOrderHeartbeatError:
                continue  # a delayed duplicate was refused; the next heartbeat carries on
            except LograftError as exc:
                if not exc.retriable:
                    raise
                # The coordinator is moving or loading: keep heartbeating. A
                # member silent past its session is fenced, and then joins again.
                log.info("stream member %s of %s: %s", self.member_id, self.group_id, exc)

    async def heartbeat(self) -> None:
        async with self._lock:
            doc = await self._call(
                "POST",
                f"{self._path}/members/{urllib.parse.quote(self.member_id, safe='')}/heartbeat",
                {
                    "member_epoch": self.member_epoch,
                    "owned_partitions": {self.topic: sorted(self.owned)},
                    "sequence": self._next_sequence(),
                },
            )
            self._apply(doc)

    async def _rejoin(self) -> None:
        # Every partition must be dropped before joining again: another member
        # may own them by now.
        if self.owned:
            return
        await self.join()

    def _fence(self) -> None:
        self.fenced = True
        self.member_epoch = 0
        self._set_assigned(frozenset())

    def _apply(self, doc: Mapping[str, Any]) -> None:
        self.member_epoch = int(doc["member_epoch"])
        self.heartbeat_interval_ms = int(doc["heartbeat_interval_ms"])
        self._set_assigned(frozenset(int(p) for p in doc["assignment"].get(self.topic, [])))

    def _set_assigned(self, assigned: frozenset[int]) -> None:
        if assigned != self.assigned:
            self.assigned = assigned
            self.changed.set()

    async def leave(self, positions: Mapping[int, int]) -> None:
        """Commit what was delivered and leave; bounded by `leave_timeout_ms`, never raises."""
        try:
            async with asyncio.timeout(self.limits.leave_timeout_ms / 1000):
                if not self.fenced:
                    await self.commit(positions)
                async with self._lock:
                    await self._call(
                        "DELETE",
                        f"{self._path}/members/{urllib.parse.quote(self.member_id, safe='')}",
                        params={"sequence": self._next_sequence()},
                    )
        except (LograftError, TimeoutError) as exc:
            # The coordinator removes a silent member after its session anyway.
            log.info("stream member %s could not leave %s: %s", self.member_id, self.group_id, exc)

    # -- offsets ------------------------------------------------------------------------

    async def commit(self, positions: Mapping[int, int]) -> None:
        """Commit the positions of owned partitions that moved since their last commit."""
        async with self._lock:
            todo = {
                p: pos
                for p, pos in positions.items()
                if p in self.owned and self._committed.get(p) != pos
            }
            if not todo or self.fenced:
                return
            body = {
                "member_id": self.member_id,
                "member_epoch": self.member_epoch,
                "offsets": [
                    {"topic": self.topic, "partition": p, "offset": pos}
                    for p, pos in sorted(todo.items())
                ],
            }
            try:
                await self._call("POST", f"{self._path}/offsets", body)
            except StaleMemberEpochError:
                return  # the next heartbeat brings the new epoch; the next commit carries these
            self._committed.update(todo)

    async def release(self, partition: int, position: int) -> None:
        """Give a revoked partition up: commit its position, then stop owning it."""
        await self.commit({partition: position})
        self.owned.discard(partition)
        self._committed.pop(partition, None)

    def drop(self, partition: int) -> None:
        """Stop owning a partition without a commit (fenced: the commit would be refused)."""
        self.owned.discard(partition)
        self._committed.pop(partition, None)

    async def start_positions(self, partitions: set[int]) -> dict[int, int]:
        """Where each newly assigned partition starts: the committed offset, else
        `auto_offset_reset` (NO_OFFSET when that is `none`)."""
        async with self._lock:
            doc = await self._call(
                "GET",
                f"{self._path}/offsets",
                params={"topics": self.topic, "auto_offset_reset": self.auto_offset_reset},
            )
        out: dict[int, int] = {}
        for entry in doc["offsets"]:
            p = int(entry["partition"])
            if entry["topic"] != self.topic or p not in partitions:
                continue
            if "error" in entry:
                raise _error_of(entry["error"])
            out[p] = int(entry["start_offset"])
        return out

    # -- HTTP to the coordinator --------------------------------------------------------

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One call to the coordinator, found again and retried while it moves."""
        deadline = time.monotonic() + self.limits.request_timeout_ms / 1000
        while True:
            try:
                base = self._coordinator or await self._find_coordinator()
                self._coordinator = base
                return await self._send(method, base + path, body, params)
            except LograftError as exc:
                if not exc.retriable or self.closing or time.monotonic() >= deadline:
                    raise
                self._coordinator = None
            # A back-off between attempts while the coordinator moves.
            await asyncio.sleep(self.limits.retry_backoff_ms / 1000)

    async def _find_coordinator(self) -> str:
        base = self.bootstrap()
        if base is None:
            raise BrokerNotAvailableError("this broker has no registered address yet")
        doc = await self._send("GET", f"{base}{self._path}/coordinator", None, None)
        url = self.dial(int(doc["coordinator_id"])) or doc.get("coordinator_url")
        if not url:
            raise BrokerNotAvailableError(
                f"the coordinator of group {self.group_id!r} has no address yet"
            )
        return str(url)

    async def _send(
        self, method: str, url: str, body: Any, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        try:
            async with self.http.request(
                method,
                yarl.URL(url, encoded=True),
                params=params,
                data=None if body is None else orjson.dumps(body),
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.limits.request_timeout_ms / 1000),
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BrokerNotAvailableError(
                f"group {self.group_id!r}: {method} {url} failed: {type(exc).__name__}: {exc}"
            ) from None
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BrokerNotAvailableError(
                f"group {self.group_id!r}: {url} answered HTTP {status}: {raw[:200]!r}"
            ) from None
        if status >= 400:
            raise _error_of(doc.get("error") if isinstance(doc, dict) else None)
        assert isinstance(doc, dict)
        return doc


def _error_of(err: Any) -> LograftError:
    """The coordinator's error as it raised it (UNKNOWN_SERVER_ERROR when the
    answer carries no error object)."""
    try:
        return LograftError.from_dict(err)
    except ValueError as exc:
        return LograftError(f"the coordinator refused the request: {exc}")


__all__ = ["AUTO_OFFSET_RESETS", "GroupLimits", "GroupMember"]

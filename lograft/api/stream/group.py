"""A stream's membership of a consumer group, through the group HTTP API.

A stream opened with `group=` is one member of the group, and a client of the
group endpoints like any other (the contract in docs/api.md, "Consumer
groups"): it finds the coordinator, joins with the stream's topic as its
subscription, heartbeats every `heartbeat_interval_ms` reporting the
partitions it holds, commits the positions it has delivered every
`commit_interval_ms`, and leaves when the stream ends. The coordinator may be
any broker, this one included; calls go over HTTP either way.

The member's rules are the sans-IO `GroupMemberCore`
(`lograft/protocol/group_member.py`), the one the Python client drives too:
what to send, what an answer or a refusal means, which partitions to take and
to give up. This module is its driver for a stream: the HTTP calls (found
again and retried while the coordinator moves), the heartbeat schedule, the
periodic commit. The stream's session (`session.py`) consumes `assigned`,
reconciling what it reads to it whenever `changed` is set.

Ownership rules kept here (the coordinator relies on them: no partition has
two owners):

- A revoked partition's position is committed first, then the core is told
  it was given up (`release`), and only then does a heartbeat stop listing it.
- Commits and heartbeats go one at a time (a lock), so a periodic commit
  taken before a revocation cannot land after the heartbeat that gave the
  partition up.
- Fenced (`UNKNOWN_MEMBER_ID`, `FENCED_MEMBER_EPOCH`): every partition is
  dropped without a commit, and the member joins again only once the stream
  holds none of them (`held`); a partition taken away while its start
  position was looked up is not taken up (`hold`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from lograft.api.services import PeerCalls
from lograft.api.stream.limits import GroupLimits
from lograft.errors import (
    BrokerNotAvailableError,
    LograftError,
    PeerUnreachableError,
    StaleMemberEpochError,
)
from lograft.protocol.group_member import ErrorAction, GroupMemberCore
from lograft.protocol.group_wire import (
    Partitions,
    commit_body,
    group_path,
    parse_heartbeat,
)
from lograft.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

AUTO_OFFSET_RESETS = ("earliest", "latest", "none")


class GroupMember:
    def __init__(
        self,
        calls: PeerCalls,
        bootstrap: Callable[[], str | None],
        dial: Callable[[int], str | None],
        group_id: str,
        topic: str,
        auto_offset_reset: str,
        limits: GroupLimits,
        on_behalf: Mapping[str, str] | None = None,
    ) -> None:
        self.calls = calls  # the streams' short calls to other nodes
        # The stream client's own credentials (Authorization, client id):
        # the group routes are public, so the coordinator authenticates and
        # authorizes the client, not this node (the cluster secret is no
        # credential there).
        self.on_behalf = dict(on_behalf or {})
        self.bootstrap = bootstrap  # this node's own URL: any broker answers lookups
        self.dial = dial  # broker id -> URL to call it at
        self.group_id = group_id
        self.topic = topic
        self.auto_offset_reset = auto_offset_reset
        self.limits = limits
        self.core = GroupMemberCore(
            group_id,
            [topic],
            # Our own id (KIP-1082): a join retried after a lost answer is the same member.
            member_id=str(uuid.uuid4()),
            client_id="lograft-stream",
        )
        self.held: set[int] = set()  # partitions the stream reads now
        self.changed = asyncio.Event()  # `assigned` differs from what the stream last saw
        # The node is stopping: one attempt per call, no waiting for a coordinator
        # that may be this very node, whose listener is already closed.
        self.closing = False
        self._committed: dict[int, int] = {}
        self._coordinator: str | None = None
        self._lock = asyncio.Lock()

    @property
    def assigned(self) -> frozenset[int]:
        """The partitions the stream should read now."""
        return self._numbers(self.core.consuming)

    def _numbers(self, tps: Partitions) -> frozenset[int]:
        return frozenset(tp.partition for tp in tps if tp.topic == self.topic)

    def _tps(self, partitions: set[int] | frozenset[int]) -> Partitions:
        return frozenset(TopicPartition(self.topic, p) for p in partitions)

    # -- membership ---------------------------------------------------------------------

    async def join(self) -> None:
        """The first join; what it is refused with is the caller's to answer."""
        async with self._lock:
            await self._exchange()

    async def run(
        self, positions: Callable[[], Mapping[int, int]], commit_interval_ms: int
    ) -> None:
        """Heartbeat and commit until cancelled; raises what the stream cannot carry on from."""
        next_commit = time.monotonic() + commit_interval_ms / 1000
        while True:
            # A schedule, not a synchronisation: the protocol asks for a
            # heartbeat every heartbeat_interval_ms.
            await asyncio.sleep(self.core.heartbeat_interval_ms / 1000)
            try:
                joining = not self.core.joined
                # A join again after a fence (once the stream holds nothing), else a heartbeat.
                async with self._lock:
                    await self._exchange()
                if joining:
                    continue
                if time.monotonic() >= next_commit:
                    await self.commit(positions())
                    next_commit = time.monotonic() + commit_interval_ms / 1000
            except LograftError as exc:
                action = self.core.on_error(exc)
                if action is ErrorAction.REJOIN:
                    log.info(
                        "stream member %s of %s fenced: %s", self.core.member_id, self.group_id, exc
                    )
                    self._lost()
                elif action is ErrorAction.FATAL:
                    raise
                elif action is ErrorAction.RETRY:
                    # The coordinator is moving or loading: keep heartbeating. A
                    # member silent past its session is fenced, and then joins again.
                    log.info("stream member %s of %s: %s", self.core.member_id, self.group_id, exc)
                # SKIP: a delayed duplicate was refused; the next heartbeat carries on.

    async def _exchange(self) -> None:
        """The core's next join or heartbeat, sent, and its answer applied."""
        request = self.core.next_request()
        if request is None:
            return  # fenced, and the stream still reads some partitions: not yet
        doc = await self._call(request.method, request.path, request.body)
        answer = parse_heartbeat(doc, BrokerNotAvailableError)
        plan = self.core.on_answer(request, answer)
        if plan:
            # Revoked before the stream read them (or looked up where to
            # start, see `hold`): nothing to commit, given up at once.
            unread = plan.revoked - self._tps(self.held)
            if unread:
                self.core.revoked(unread, request.generation)
            self.changed.set()

    def _lost(self) -> None:
        """The core dropped every partition: those the stream does not read
        are gone at once; the session drops the rest (`release`)."""
        self.core.dropped(self.core.dropping - self._tps(self.held))
        self.changed.set()

    async def leave(self, positions: Mapping[int, int]) -> None:
        """Commit what was delivered and leave; bounded by `leave_timeout_ms`, never raises."""
        try:
            async with asyncio.timeout(self.limits.leave_timeout_ms / 1000):
                if self.core.joined:
                    await self.commit(positions)
                async with self._lock:
                    request = self.core.leave()
                    if request is not None:
                        await self._call(request.method, request.path, params=request.params)
        except (LograftError, TimeoutError) as exc:
            # The coordinator removes a silent member after its session anyway.
            log.info(
                "stream member %s could not leave %s: %s", self.core.member_id, self.group_id, exc
            )

    # -- offsets ------------------------------------------------------------------------

    async def commit(self, positions: Mapping[int, int]) -> None:
        """Commit the positions of owned partitions that moved since their last commit."""
        async with self._lock:
            owned = self._numbers(self.core.owned)
            todo = {
                p: pos
                for p, pos in positions.items()
                if p in owned and self._committed.get(p) != pos
            }
            if not todo or not self.core.joined:
                return
            offsets = {TopicPartition(self.topic, p): pos for p, pos in todo.items()}
            body = commit_body(self.core.member_id, self.core.member_epoch, offsets)
            try:
                await self._call("POST", group_path(self.group_id, "/offsets"), body)
            except StaleMemberEpochError:
                return  # the next heartbeat brings the new epoch; the next commit carries these
            self._committed.update(todo)

    def hold(self, partition: int) -> bool:
        """The stream starts reading `partition`, unless it was taken away
        (revoked or lost) while its start position was looked up."""
        if partition not in self.assigned:
            return False
        self.held.add(partition)
        return True

    async def release(self, partition: int, position: int) -> None:
        """The stream stopped reading `partition`: a revoked one's position is
        committed, then the core is told it was given up; a lost one is only
        dropped (the commit would be refused)."""
        tp = frozenset({TopicPartition(self.topic, partition)})
        if tp <= self.core.revoking:
            generation = self.core.generation
            await self.commit({partition: position})
            self.core.revoked(tp, generation)
        else:
            self.core.dropped(tp)
        self.held.discard(partition)
        self._committed.pop(partition, None)

    async def start_positions(self, partitions: set[int]) -> dict[int, int]:
        """Where each newly assigned partition starts: the committed offset, else
        `auto_offset_reset` (NO_OFFSET when that is `none`)."""
        async with self._lock:
            doc = await self._call(
                "GET",
                group_path(self.group_id, "/offsets"),
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
        path = group_path(self.group_id, "/coordinator")
        doc = await self._send("GET", f"{base}{path}", None, None)
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
            # `url` is whole (base and path): the peer client sends it as it is.
            raw = await self.calls.call(
                url,
                method,
                "",
                body=None if body is None else orjson.dumps(body),
                params=params,
                timeout_ms=self.limits.request_timeout_ms,
                headers=self.on_behalf,
            )
        except PeerUnreachableError as exc:
            raise BrokerNotAvailableError(f"group {self.group_id!r}: {exc.message}") from None
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BrokerNotAvailableError(
                f"group {self.group_id!r}: {url} answered with invalid JSON: {raw[:200]!r}"
            ) from None
        if not isinstance(doc, dict):
            raise BrokerNotAvailableError(f"group {self.group_id!r}: {url} answered a non-object")
        return doc


def _error_of(err: Any) -> LograftError:
    """The coordinator's error as it raised it (UNKNOWN_SERVER_ERROR when the
    answer carries no error object)."""
    try:
        return LograftError.from_dict(err)
    except ValueError as exc:
        return LograftError(f"the coordinator refused the request: {exc}")


__all__ = ["AUTO_OFFSET_RESETS", "GroupLimits", "GroupMember"]

"""One `__consumer_offsets` partition this broker leads: its groups' state and
the one queue their handlers run through.

Life cycle (one object per leader epoch; a new epoch gets a new object):

    LOADING --(log read up to its end, and that end committed)--> ACTIVE
    ACTIVE --(append failed with records maybe written)--> LOADING
    any --(leadership lost, broker stopping)--> CLOSED

Invariants:

- handlers run one at a time (`_lock`), each against the state every earlier
  handler's committed records produced;
- the state holds exactly the records of the log up to the high watermark,
  and the log holds nothing past it but an append in flight: a handler's
  records are replayed only after the append returned with acks=all, and
  when an append fails after writing (timeout, leadership lost) the state is
  rebuilt from the log, never guessed;
- a handler runs only while this broker still leads the partition at the
  epoch it loaded (checked when the handler runs, not when the request came),
  so a request delayed in flight to an old coordinator is refused there;
- the critical section runs in its own task: a caller that goes away cannot
  release the lock halfway through an append.

Soft state (member sessions) lives here, per group, and is swapped in as
handlers return it; `_expiry_loop` removes members at their deadlines and
expires offsets every `offsets_retention_check_interval_ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from typing import TypeVar

from lograft.brokers.groups.heartbeat import expire_members
from lograft.brokers.groups.log import encode_batch, load_state
from lograft.brokers.groups.offsets import expire_offsets
from lograft.brokers.groups.records import TargetAssignmentMetadataKey
from lograft.brokers.groups.result import GroupResult
from lograft.brokers.groups.runtime_config import GroupRuntimeSettings
from lograft.brokers.groups.sessions import GroupSessions
from lograft.brokers.groups.state import CoordinatorState
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    LograftError,
    NotCoordinatorError,
)
from lograft.protocol.produce_wire import Acks
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import Clock

log = logging.getLogger(__name__)

T = TypeVar("T")

# After an expiry run failed (e.g. NOT_ENOUGH_REPLICAS for the removal
# records), the loop tries again this soon rather than at the next deadline, ms.
EXPIRY_RETRY_BACKOFF_MS = 1_000
Handler = Callable[[CoordinatorState], GroupResult[T]]


class CoordinatorPhase(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    CLOSED = "closed"


_ALLOWED = {
    CoordinatorPhase.LOADING: {CoordinatorPhase.ACTIVE, CoordinatorPhase.CLOSED},
    CoordinatorPhase.ACTIVE: {CoordinatorPhase.LOADING, CoordinatorPhase.CLOSED},
    CoordinatorPhase.CLOSED: set[CoordinatorPhase](),
}


class GroupCounters:
    """What the coordinators of one broker count for its metrics (read at scrape)."""

    __slots__ = ("rebalances",)

    def __init__(self) -> None:
        # New target assignments committed (KIP-848's consumer-group-rebalance-count).
        self.rebalances = 0


class PartitionCoordinator:
    def __init__(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        replicas: ReplicaManager,
        settings: GroupRuntimeSettings,
        *,
        clock: Clock,
        wall_clock: Clock,
        counters: GroupCounters | None = None,
    ) -> None:
        self.tp = tp
        self.counters = counters or GroupCounters()
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.settings = settings
        self.config = settings.coordinator
        # Monotonic: sessions and deadlines. Wall: commit times, offset expiry.
        self.clock = clock
        self.wall_clock = wall_clock
        self.phase = CoordinatorPhase.LOADING
        self._state = CoordinatorState()
        self._sessions: dict[str, GroupSessions] = {}
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._loaded = asyncio.Event()
        self._load_task: asyncio.Task[None] | None = None
        self._expiry_task: asyncio.Task[None] | None = None
        self._next_offsets_expiry_ms = 0
        # When the expiry loop will next look at sessions (monotonic ms; None:
        # no member deadline pending). A handler wakes it only for an earlier
        # deadline, so heartbeats, which push deadlines later, do not.
        self._expiry_scheduled_ms: int | None = None
        # Handlers waiting for or holding the lock (bounded by
        # coordinator_requests_queued_max).
        self._queued = 0

    # -- life cycle ---------------------------------------------------------------------

    def _transition(self, to: CoordinatorPhase) -> None:
        if to not in _ALLOWED[self.phase]:
            raise AssertionError(f"{self.tp}: illegal transition {self.phase} -> {to}")
        self.phase = to

    def start(self) -> None:
        self._load_task = asyncio.create_task(self._load(), name=f"group-load-{self.tp}")
        self._expiry_task = asyncio.create_task(self._expiry_loop(), name=f"group-expiry-{self.tp}")

    async def close(self) -> None:
        if self.phase is not CoordinatorPhase.CLOSED:
            self._transition(CoordinatorPhase.CLOSED)
        self._wake.set()
        tasks = [t for t in (self._load_task, self._expiry_task) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Soft state goes with the leadership: the next coordinator starts fresh.
        self._sessions.clear()
        self._state = CoordinatorState()

    async def wait_loaded(self, timeout_s: float) -> bool:
        # asyncio.timeout, not wait_for, which on Python 3.11 swallows a cancel
        # that lands as the wait ends (the cancelled caller would go on).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._loaded.wait()
        return self.phase is CoordinatorPhase.ACTIVE

    def _still_leader(self) -> bool:
        part = self.replicas.partitions.get(self.tp)
        return part is not None and part.is_leader and part.leader_epoch == self.leader_epoch

    async def _load(self) -> None:
        """Replay the partition up to its log end, then wait until that end is committed."""
        started = self.clock()
        try:
            part = self.replicas.partition(self.tp)
            end = part.log.log_end_offset
            state = await asyncio.to_thread(
                load_state, part.log, end, self.settings.offsets_load_buffer_bytes
            )
            # Records past the HW were written by an earlier leader (or an
            # append of ours that failed): they count once committed, not before.
            await part.wait_for_high_watermark(end)
        except LograftError as exc:
            # Usually leadership moving on while loading; the runtime starts a
            # new coordinator if this broker leads again. Clients retry meanwhile.
            log.warning("loading %s at leader epoch %d failed: %s", self.tp, self.leader_epoch, exc)
            return
        except Exception:
            log.exception("loading %s at leader epoch %d failed", self.tp, self.leader_epoch)
            return
        if self.phase is not CoordinatorPhase.LOADING or not self._still_leader():
            return
        now = self.clock()
        self._state = state
        self._sessions = {
            group_id: GroupSessions.after_failover(group, now, self.config)
            for group_id, group in state.groups.items()
        }
        self._transition(CoordinatorPhase.ACTIVE)
        self._loaded.set()
        self._wake.set()
        log.info(
            "coordinator for %s loaded at leader epoch %d: %d groups, log up to offset %d, %d ms",
            self.tp,
            self.leader_epoch,
            len(state.groups),
            end,
            now - started,
        )

    def _reload(self) -> None:
        """The log may hold records the state lacks: read it again."""
        if self.phase is not CoordinatorPhase.ACTIVE:
            return
        self._transition(CoordinatorPhase.LOADING)
        self._loaded.clear()
        self._state = CoordinatorState()
        self._sessions.clear()
        self._load_task = asyncio.create_task(self._load(), name=f"group-reload-{self.tp}")

    # -- handlers -----------------------------------------------------------------------

    def _check_active(self) -> None:
        if self.phase is CoordinatorPhase.LOADING:
            raise CoordinatorLoadInProgressError(
                f"the coordinator is still loading {self.tp}; retry shortly",
                partition=self.tp.partition,
            )
        if self.phase is CoordinatorPhase.CLOSED or not self._still_leader():
            raise NotCoordinatorError(f"this broker no longer leads {self.tp}")

    def sessions_of(self, group_id: str) -> GroupSessions:
        return self._sessions.get(group_id) or GroupSessions()

    def read(self) -> CoordinatorState:
        """The state for a read-only request (list, describe, fetch offsets)."""
        self._check_active()
        return self._state

    async def run(self, group_id: str | None, handler: Handler[T]) -> T:
        """Run a request's `handler` in turn (bounded by
        coordinator_requests_queued_max); append and replay its records;
        return its response."""
        limit = self.settings.coordinator_requests_queued_max
        if self._queued >= limit:
            raise CoordinatorNotAvailableError(
                f"the coordinator of {self.tp} has {self._queued} requests queued "
                f"(coordinator_requests_queued_max={limit}); retry shortly",
                coordinator_requests_queued_max=limit,
            )
        self._queued += 1
        task = asyncio.create_task(self._run(group_id, handler))
        task.add_done_callback(self._dequeued)
        # The task holds the lock for the whole append: a caller that goes
        # away (client disconnect) must not release it halfway.
        return await asyncio.shield(task)

    async def _run_expiry(self, group_id: str | None, handler: Handler[T]) -> T:
        """Run the expiry loop's `handler` in turn, outside the request bound:
        the loop runs one handler at a time, so it needs no bound; counted, it
        would refuse a request for a slot no request holds, and a full queue
        of requests would stop members and offsets from expiring."""
        task = asyncio.create_task(self._run(group_id, handler))
        # Shielded for the same reason as a request's: close() cancelling the
        # loop must not release the lock halfway through an append.
        return await asyncio.shield(task)

    def _dequeued(self, _task: asyncio.Task[object]) -> None:
        self._queued -= 1

    async def _run(self, group_id: str | None, handler: Handler[T]) -> T:
        async with self._lock:
            self._check_active()
            result = handler(self._state)
            previous = None if group_id is None else self._sessions.get(group_id)
            if result.sessions is not None and group_id is not None:
                self._set_sessions(group_id, result.sessions)
            if result.records:
                try:
                    await self._append(result)
                except BaseException:
                    if group_id is not None and self.phase is CoordinatorPhase.ACTIVE:
                        # Nothing was written (else a reload rebuilds the
                        # sessions): the sessions must match the state again,
                        # e.g. a member whose removal failed keeps its
                        # deadline, so its expiry is retried (after the
                        # back-off: restoring wakes nobody).
                        self._restore_sessions(group_id, previous)
                    raise
            return result.response

    def _restore_sessions(self, group_id: str, sessions: GroupSessions | None) -> None:
        if sessions is None:
            self._sessions.pop(group_id, None)
        else:
            self._sessions[group_id] = sessions

    def _set_sessions(self, group_id: str, sessions: GroupSessions) -> None:
        if sessions.members:
            self._sessions[group_id] = sessions
        else:
            self._sessions.pop(group_id, None)
        deadline = sessions.next_deadline_ms()
        scheduled = self._expiry_scheduled_ms
        if deadline is not None and (scheduled is None or deadline < scheduled):
            self._wake.set()

    async def _append(self, result: GroupResult[T]) -> None:
        part = self.replicas.partition(self.tp)
        end_before = part.log.log_end_offset
        batch = encode_batch(result.records, self.wall_clock())
        try:
            await self.replicas.produce(
                self.tp,
                batch,
                Acks.ALL,
                timeout_ms=self.settings.offsets_commit_timeout_ms,
            )
        except BaseException:
            # Only this coordinator writes the partition, so an unchanged log
            # end means nothing was written (e.g. NOT_ENOUGH_REPLICAS) and the
            # state is still exact. Otherwise the batch may commit later.
            if part.log.closed or part.log.log_end_offset != end_before:
                self._reload()
            raise
        if self.phase is CoordinatorPhase.CLOSED:
            # Leadership went while the batch committed: the records are in
            # the log (the next coordinator reads them) and the response is
            # true; there is no state here to keep up to date.
            return
        try:
            for record in result.records:
                self._state.replay(record)
                if isinstance(record.key, TargetAssignmentMetadataKey) and record.value is not None:
                    self.counters.rebalances += 1
        except LograftError:
            log.exception("%s: replaying committed records failed; reloading", self.tp)
            self._reload()
            raise

    # -- expiry -------------------------------------------------------------------------

    def _due_groups(self, now: int) -> tuple[list[str], int | None]:
        """Groups with a member past a deadline, and the next deadline of the others."""
        due: list[str] = []
        nearest: int | None = None
        for group_id, sessions in self._sessions.items():
            deadline = sessions.next_deadline_ms()
            if deadline is None:
                continue
            if now > deadline:
                due.append(group_id)
            elif nearest is None or deadline < nearest:
                nearest = deadline
        return due, nearest

    def _member_expiry(self, group_id: str) -> Handler[tuple[str, ...]]:
        # Sessions and the clock are read when the handler runs, not before.
        return lambda state: expire_members(
            state, group_id, self.sessions_of(group_id), self.clock(), self.config
        )

    async def _expire_once(self) -> int | None:
        """Run every expiry that is due; returns the next member deadline."""
        now = self.clock()
        due, nearest = self._due_groups(now)
        for group_id in due:
            removed = await self._run_expiry(group_id, self._member_expiry(group_id))
            if removed:
                log.info("group %s: session expired for %s", group_id, ", ".join(removed))
        wall = self.wall_clock()
        if wall >= self._next_offsets_expiry_ms:
            self._next_offsets_expiry_ms = wall + self.settings.offsets_retention_check_interval_ms
            expired = await self._run_expiry(
                None, lambda state: expire_offsets(state, self.wall_clock(), self.config)
            )
            for group_id, tps in expired.items():
                log.info("group %s: %d committed offsets expired", group_id, len(tps))
        if due:
            # Sessions just changed: recompute from them.
            return self._due_groups(self.clock())[1]
        return nearest

    async def _expiry_loop(self) -> None:
        await self._loaded.wait()
        while self.phase is not CoordinatorPhase.CLOSED:
            self._wake.clear()
            try:
                nearest = (
                    await self._expire_once() if self.phase is CoordinatorPhase.ACTIVE else None
                )
            except (NotCoordinatorError, CoordinatorLoadInProgressError):
                nearest = None
            except LograftError as exc:
                log.warning("%s: expiry failed: %s", self.tp, exc)
                nearest = self.clock() + EXPIRY_RETRY_BACKOFF_MS
            except Exception:
                # A bug must not end the loop: members would never expire.
                log.exception("%s: expiry failed", self.tp)
                nearest = self.clock() + EXPIRY_RETRY_BACKOFF_MS
            waits_ms = [self.settings.offsets_retention_check_interval_ms]
            self._expiry_scheduled_ms = None
            if nearest is not None:
                # Expired means strictly past the deadline.
                self._expiry_scheduled_ms = nearest + 1
                waits_ms.append(max(nearest + 1 - self.clock(), 0))
            if self.phase is CoordinatorPhase.LOADING:
                await self._loaded.wait()
                continue
            # Woken early when a handler changes sessions (a new deadline).
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
            # cancel that lands as the wake does, and the loop would run on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(waits_ms) / 1000):
                    await self._wake.wait()

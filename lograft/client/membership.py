"""A consumer's membership of its group: the heartbeat loop in the background.

The loop joins (epoch 0), then heartbeats every `heartbeat_interval_ms` (the
coordinator's, from each answer) with the partitions the member holds, and
turns each answer into rebalance events that `poll` works through:

- partitions newly assigned are held from then on (listed as owned) and an
  ASSIGN event is queued: poll looks up their committed offsets, calls
  on_assign, and only then fetches them;
- partitions no longer assigned stop being returned at once (paused), and a
  REVOKE event is queued: poll commits their positions (auto-commit), calls
  on_revoke, and only then (`revoked_done`) stops listing them, which is the
  member's acknowledgement. So a partition is given up only after its
  callback ran and its offsets were committed;
- FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, or no answered heartbeat for the
  session timeout, mean the coordinator may already have handed the
  partitions on: they are dropped at once (`lose`), a LOST event is queued
  for on_lost, and the member joins again with its id at epoch 0;
- poll not called for `max_poll_interval_ms` (the application is stuck):
  the member drops its partitions the same way, leaves the group (nothing is
  committed: the application may be mid-processing) so the others can take
  them, and stays out until the next poll, which joins again (same id).

Invariants: `revoking <= owned`; an event carries the generation it was made
in, and a loss starts a new generation, so work begun for an old generation
changes nothing; every request carries a `sequence` above all earlier ones.

Loop-bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lograft.client.backoff import backoff_ms
from lograft.client.config import ConsumerConfig
from lograft.client.coordinator import CoordinatorClient
from lograft.client.group_protocol import (
    JOIN_EPOCH,
    NO_PARTITIONS,
    REJOIN_ERRORS,
    HeartbeatAnswer,
    Partitions,
    RebalanceEvent,
    RebalanceKind,
    group_path,
    member_path,
    parse_heartbeat,
    partitions_json,
    reconcile,
    session_deadline,
)
from lograft.client.poll_timer import PollTimer
from lograft.errors import LograftError, OutOfOrderHeartbeatError

log = logging.getLogger(__name__)

# Until the first answer tells the coordinator's interval, ms.
INITIAL_HEARTBEAT_INTERVAL_MS = 1_000


@dataclass(slots=True)
class MembershipHooks:
    """What the membership does to the consumer's fetch state."""

    pause: Callable[[Partitions], None]  # stop returning these (revocation began)
    drop_all: Callable[[], Partitions]  # lost: forget every partition; returns those poll had
    notify: Callable[[], None]  # an event is queued or an error is set: wake poll


class GroupMembership:
    def __init__(
        self,
        config: ConsumerConfig,
        coordinator: CoordinatorClient,
        topics: frozenset[str],
        hooks: MembershipHooks,
        poll_timer: PollTimer,
    ) -> None:
        self.config = config
        self.poll_timer = poll_timer
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self.topics = topics
        self.hooks = hooks
        self.member_id = ""
        self.member_epoch = JOIN_EPOCH
        self.sequence = 0
        self.owned: Partitions = NO_PARTITIONS
        self.revoking: Partitions = NO_PARTITIONS
        self.generation = 0
        self.events: deque[RebalanceEvent] = deque()
        self.error: LograftError | None = None  # a refusal to raise from poll, once
        self.heartbeat_interval_ms = INITIAL_HEARTBEAT_INTERVAL_MS
        self.session_timeout_ms: int | None = None  # the coordinator's, once known
        self.heartbeats = 0  # answered joins and heartbeats
        self.poll_timeouts = 0  # leaves because poll was not called in time
        self.left_for_poll = False  # out of the group until the next poll
        self._subscription_changed = False
        self._wake = asyncio.Event()
        self._answered = asyncio.Event()
        self._lost = asyncio.Event()  # set (and replaced) at each loss
        self._session_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def subscribe(self, topics: frozenset[str]) -> None:
        """Change the subscription; the next heartbeat carries it."""
        if topics != self.topics:
            self.topics = topics
            self._subscription_changed = True
            self._wake.set()

    async def stop(self) -> None:
        """Stop heartbeating (without leaving)."""
        if self._session_timer is not None:
            self._session_timer.cancel()
            self._session_timer = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def leave(self, deadline: float) -> None:
        """Stop heartbeating and leave the group, which releases every
        partition at once. Best effort until `deadline` (loop time): a member
        that cannot reach its coordinator is removed after its session."""
        await self.stop()
        joined = self.member_epoch != JOIN_EPOCH and self.member_id
        self.owned = self.revoking = NO_PARTITIONS
        self.member_epoch = JOIN_EPOCH
        self._new_generation()
        if joined:
            await self._send_leave(deadline)

    async def _send_leave(self, deadline: float) -> None:
        """The leave request (epoch -1 in Kafka's terms), best effort."""
        try:
            await self.coordinator.call(
                "DELETE",
                member_path(self.group_id, self.member_id),
                params={"sequence": str(self._next_sequence())},
                deadline=deadline,
            )
        except LograftError as exc:
            log.warning("group %s: leave failed (%s); its session will expire", self.group_id, exc)

    # -- what poll and commit use ------------------------------------------------------------

    def poll_seen(self) -> None:
        """poll was called (after `poll_timer.polled()`): a member that left
        for want of polls joins again now."""
        if self.left_for_poll:
            self._wake.set()

    def take_event(self) -> RebalanceEvent | None:
        return self.events.popleft() if self.events else None

    def put_back(self, event: RebalanceEvent) -> None:
        """An event whose work failed goes first again (if still current)."""
        if event.generation == self.generation:
            self.events.appendleft(event)

    def revoked_done(self, event: RebalanceEvent) -> None:
        """The revocation's callback ran and its offsets are committed: stop
        listing the partitions, and say so at once."""
        if event.generation != self.generation:
            return
        self.owned -= event.partitions
        self.revoking -= event.partitions
        self._wake.set()

    async def wait_lost(self, generation: int) -> None:
        """Return once the generation `generation` has ended (a loss or leave)."""
        while self.generation == generation:
            await self._lost.wait()

    def take_error(self) -> LograftError | None:
        err, self.error = self.error, None
        return err

    async def wait_answer(self, deadline: float) -> bool:
        """Wait for the next answered heartbeat (a commit with a stale epoch
        retries after it); False at the deadline."""
        waiter = self._answered
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await waiter.wait()
            return True
        return False

    # -- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._heartbeat_loop()
        except Exception as exc:
            # A bug, not a server answer: say so from poll rather than stop
            # heartbeating silently (the coordinator would drop the member).
            log.exception("group %s: the heartbeat loop failed", self.group_id)
            err = LograftError(f"the heartbeat loop of group {self.group_id} failed: {exc!r}")
            err.__cause__ = exc
            self.error = err
            self.hooks.notify()

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            if self.poll_timer.overdue():
                await self._leave_for_poll_timeout()
                await self._wait_for_poll()
                continue
            self._wake.clear()
            generation = self.generation
            sent_at = loop.time()
            try:
                answer = await self._exchange()
            except REJOIN_ERRORS as exc:
                log.info("group %s: %s; joining again", self.group_id, exc.code)
                self.lose(exc.code)
                failures += 1
                if failures > 1:  # a join refused right after a fence: do not spin
                    await self._sleep(self._backoff_s(failures))
                continue
            except OutOfOrderHeartbeatError:
                # A delayed copy of an earlier request was processed after ours:
                # nothing changed; the next heartbeat carries on.
                await self._sleep(self.heartbeat_interval_ms / 1000)
                continue
            except LograftError as exc:
                failures += 1
                if not exc.retriable:
                    log.warning("group %s: %s", self.group_id, exc)
                    self.error = exc
                    self.hooks.notify()
                await self._sleep(self._backoff_s(failures))
                continue
            failures = 0
            if generation == self.generation:
                self._apply(answer, sent_at)
            await self._sleep(self.heartbeat_interval_ms / 1000)

    def _backoff_s(self, failures: int) -> float:
        cfg = self.config
        return backoff_ms(failures, cfg.retry_backoff_ms, cfg.retry_backoff_max_ms) / 1000

    async def _sleep(self, seconds: float) -> None:
        """Sleep, unless woken (a revocation finished, the subscription changed)
        or poll became overdue: the sleep is cut into steps that end when it
        may have, so the leave is not late by a heartbeat interval or a backoff.
        (Waking at every poll instead would send a heartbeat at every poll.)"""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while not self.poll_timer.overdue():
            left = end - loop.time()
            if left <= 0:
                return
            step = min(left, self.poll_timer.check_in_s())
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
            # cancel that lands as the wake does, and stop() would wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(step):
                    await self._wake.wait()
                return

    async def _leave_for_poll_timeout(self) -> None:
        """The application stopped polling: give every partition up now
        (nothing committed, on_lost at the next poll) and leave, so the
        coordinator hands them to the other members at once instead of never."""
        self.poll_timeouts += 1
        self.left_for_poll = True
        log.warning(
            "group %s: poll() not called for %d ms, more than max_poll_interval_ms=%d: leaving "
            "group %s so its partitions can be consumed by others; process fewer records per "
            "poll (max_poll_records) or raise max_poll_interval_ms",
            self.group_id,
            self.poll_timer.since_poll_ms(),
            self.poll_timer.max_interval_ms,
            self.group_id,
        )
        if self._session_timer is not None:
            self._session_timer.cancel()
            self._session_timer = None
        # Dropped before the leave is sent, so no record of these partitions is
        # handed out once another member may own them.
        self.lose("POLL_TIMEOUT")
        if self.member_id:  # idempotent on the server: also for a join whose answer was lost
            await self._send_leave(self._leave_deadline())

    def _leave_deadline(self) -> float:
        """Past the session the coordinator has removed the member anyway."""
        limit_ms = self.session_timeout_ms or self.config.request_timeout_ms
        return asyncio.get_running_loop().time() + limit_ms / 1000

    async def _wait_for_poll(self) -> None:
        """Stay out of the group until the application polls again."""
        while self.poll_timer.overdue():
            self._wake.clear()
            if not self.poll_timer.overdue():
                break
            await self._wake.wait()
        self.left_for_poll = False

    def _next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    async def _exchange(self) -> HeartbeatAnswer:
        """One join or heartbeat. Bounded by the session: an answer later than
        that is worthless (the member would have dropped its partitions)."""
        timeout_ms = self.config.request_timeout_ms
        if self.session_timeout_ms is not None:
            timeout_ms = min(timeout_ms, self.session_timeout_ms)
        body: dict[str, Any] = {"sequence": self._next_sequence()}
        if self.member_epoch == JOIN_EPOCH:
            body["subscribed_topics"] = sorted(self.topics)
            body["client_id"] = self.config.client_id
            if self.member_id:
                body["member_id"] = self.member_id  # rejoining after a fence keeps its id
            if self.config.group_assignor is not None:
                body["assignor"] = self.config.group_assignor
            if self.config.rebalance_timeout_ms is not None:
                body["rebalance_timeout_ms"] = self.config.rebalance_timeout_ms
            self._subscription_changed = False
            doc = await self.coordinator.send(
                "POST", group_path(self.group_id, "/members"), body=body, timeout_ms=timeout_ms
            )
        else:
            body["member_epoch"] = self.member_epoch
            body["owned_partitions"] = partitions_json(self.owned)
            if self._subscription_changed:
                body["subscribed_topics"] = sorted(self.topics)
                self._subscription_changed = False
            doc = await self.coordinator.send(
                "POST",
                member_path(self.group_id, self.member_id, "/heartbeat"),
                body=body,
                timeout_ms=timeout_ms,
            )
        return parse_heartbeat(doc)

    def _apply(self, answer: HeartbeatAnswer, sent_at: float) -> None:
        self.heartbeats += 1
        self.member_id = answer.member_id
        self.member_epoch = answer.member_epoch
        self.heartbeat_interval_ms = answer.heartbeat_interval_ms
        self.session_timeout_ms = answer.session_timeout_ms
        self._renew_session(sent_at)
        plan = reconcile(self.owned, self.revoking, answer.assignment)
        if plan.revoked:
            self.revoking |= plan.revoked
            self.hooks.pause(plan.revoked)
            self.events.append(RebalanceEvent(RebalanceKind.REVOKE, plan.revoked, self.generation))
        if plan.added:
            self.owned |= plan.added
            self.events.append(RebalanceEvent(RebalanceKind.ASSIGN, plan.added, self.generation))
        if plan.revoked or plan.added:
            self.hooks.notify()
        self._answered.set()
        self._answered = asyncio.Event()

    def _new_generation(self) -> None:
        self.generation += 1
        self._lost.set()
        self._lost = asyncio.Event()

    def _renew_session(self, sent_at: float) -> None:
        assert self.session_timeout_ms is not None
        if self._session_timer is not None:
            self._session_timer.cancel()
        deadline = session_deadline(
            sent_at, self.session_timeout_ms, self.config.session_timeout_ms
        )
        self._session_timer = asyncio.get_running_loop().call_at(deadline, self._session_lost)

    def _session_lost(self) -> None:
        self._session_timer = None
        if self.member_epoch != JOIN_EPOCH:
            log.warning(
                "group %s: no heartbeat answered within the session; dropping %d partition(s)",
                self.group_id,
                len(self.owned),
            )
            self.lose("SESSION_TIMEOUT")

    def lose(self, reason: str) -> None:
        """Drop every partition now (another member may own them already) and
        join again at epoch 0 with the same member id."""
        self._new_generation()
        self.member_epoch = JOIN_EPOCH
        self.owned = self.revoking = NO_PARTITIONS
        self.events.clear()
        had = self.hooks.drop_all()
        if had:
            log.info("group %s: lost %d partition(s) (%s)", self.group_id, len(had), reason)
            self.events.append(RebalanceEvent(RebalanceKind.LOST, had, self.generation))
            self.hooks.notify()
        self._wake.set()

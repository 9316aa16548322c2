"""A consumer's membership of its group: the heartbeat loop in the background.

The member's rules (what to send, what an answer or a refusal means, when a
partition may be given up) are the sans-IO `GroupMemberCore` of
`lograft/protocol/group_member.py`, which the SSE group stream drives too;
this module is its driver for the client: it sends the core's requests through
the `CoordinatorClient`, keeps its timers (heartbeat interval, session,
`max_poll_interval_ms`), and turns each answer into rebalance events that
`poll` works through:

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

Invariants: `revoking <= owned` (asserted by the core); an event carries the
generation it was made in, and a loss starts a new generation, so work begun
for an old generation changes nothing; every request carries a `sequence`
above all earlier ones.

Loop-bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from lograft.client.backoff import backoff_ms
from lograft.client.config import ConsumerConfig
from lograft.client.coordinator import CoordinatorClient
from lograft.client.errors import UnexpectedResponseError
from lograft.client.poll_timer import PollTimer
from lograft.errors import LograftError
from lograft.protocol.group_member import ErrorAction, GroupMemberCore, MemberRequest
from lograft.protocol.group_wire import HeartbeatAnswer, Partitions, parse_heartbeat

log = logging.getLogger(__name__)


class RebalanceKind(enum.Enum):
    ASSIGN = "assign"  # partitions added: look up committed offsets, then on_assign
    REVOKE = "revoke"  # partitions to give up: commit, on_revoke, then acknowledge
    LOST = "lost"  # partitions already gone (fenced or session lost): on_lost


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    kind: RebalanceKind
    partitions: Partitions
    # The membership generation it belongs to; a loss ends a generation and
    # makes its pending events void.
    generation: int


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
        self.hooks = hooks
        self.core = GroupMemberCore(
            self.group_id,
            topics,
            client_id=config.client_id,
            assignor=config.group_assignor,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            session_timeout_ms=config.session_timeout_ms,
        )
        self.events: deque[RebalanceEvent] = deque()
        self.error: LograftError | None = None  # a refusal to raise from poll, once
        self.poll_timeouts = 0  # leaves because poll was not called in time
        self.left_for_poll = False  # out of the group until the next poll
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
        if self.core.subscribe(topics):
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
        joined = self.core.joined and self.core.member_id
        request = self.core.leave()
        self.core.dropped()  # the consumer is closing: it uses none of them again
        self._generation_ended()
        if joined and request is not None:
            await self._send_leave(request, deadline)

    async def _send_leave(self, request: MemberRequest, deadline: float) -> None:
        """The leave request (epoch -1 in Kafka's terms), best effort."""
        try:
            await self.coordinator.call(
                request.method, request.path, params=request.params, deadline=deadline
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
        if event.generation == self.core.generation:
            self.events.appendleft(event)

    def revoked_done(self, event: RebalanceEvent) -> None:
        """The revocation's callback ran and its offsets are committed: stop
        listing the partitions, and say so at once."""
        if event.generation != self.core.generation:
            return
        self.core.revoked(event.partitions, event.generation)
        self._wake.set()

    async def wait_lost(self, generation: int) -> None:
        """Return once the generation `generation` has ended (a loss or leave)."""
        while self.core.generation == generation:
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
            request = self.core.next_request()
            # The client drops lost partitions at once (`lose`): it always may join.
            assert request is not None, "a lost partition is still held"
            sent_at = loop.time()
            try:
                answer = await self._exchange(request)
            except LograftError as exc:
                action = self.core.on_error(exc)
                if action is ErrorAction.REJOIN:
                    log.info("group %s: %s; joining again", self.group_id, exc.code)
                    self._after_loss(exc.code)
                    failures += 1
                    if failures > 1:  # a join refused right after a fence: do not spin
                        await self._sleep(self._backoff_s(failures))
                elif action is ErrorAction.SKIP:
                    # A delayed copy of an earlier request was processed after
                    # ours: nothing changed; the next heartbeat carries on.
                    await self._sleep(self.core.heartbeat_interval_ms / 1000)
                else:
                    failures += 1
                    if action is ErrorAction.FATAL:
                        log.warning("group %s: %s", self.group_id, exc)
                        self.error = exc
                        self.hooks.notify()
                    await self._sleep(self._backoff_s(failures))
                continue
            failures = 0
            self._apply(request, answer, sent_at)
            await self._sleep(self.core.heartbeat_interval_ms / 1000)

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
        # Idempotent on the server: also for a join whose answer was lost.
        request = self.core.leave()
        if request is not None:
            await self._send_leave(request, self._leave_deadline())

    def _leave_deadline(self) -> float:
        """Past the session the coordinator has removed the member anyway."""
        limit_ms = self.core.session_timeout_ms or self.config.request_timeout_ms
        return asyncio.get_running_loop().time() + limit_ms / 1000

    async def _wait_for_poll(self) -> None:
        """Stay out of the group until the application polls again."""
        while self.poll_timer.overdue():
            self._wake.clear()
            if not self.poll_timer.overdue():
                break
            await self._wake.wait()
        self.left_for_poll = False

    async def _exchange(self, request: MemberRequest) -> HeartbeatAnswer:
        """One join or heartbeat. Bounded by the session: an answer later than
        that is worthless (the member would have dropped its partitions)."""
        timeout_ms = self.config.request_timeout_ms
        if self.core.session_timeout_ms is not None:
            timeout_ms = min(timeout_ms, self.core.session_timeout_ms)
        doc = await self.coordinator.send(
            request.method, request.path, body=request.body, timeout_ms=timeout_ms
        )
        return parse_heartbeat(doc, UnexpectedResponseError)

    def _apply(self, request: MemberRequest, answer: HeartbeatAnswer, sent_at: float) -> None:
        plan = self.core.on_answer(request, answer, sent_at)
        if plan is None:
            return  # sent before a loss: the answer is void
        self._renew_session()
        generation = self.core.generation
        if plan.revoked:
            self.hooks.pause(plan.revoked)
            self.events.append(RebalanceEvent(RebalanceKind.REVOKE, plan.revoked, generation))
        if plan.added:
            self.events.append(RebalanceEvent(RebalanceKind.ASSIGN, plan.added, generation))
        if plan:
            self.hooks.notify()
        self._answered.set()
        self._answered = asyncio.Event()

    def _generation_ended(self) -> None:
        self._lost.set()
        self._lost = asyncio.Event()

    def _renew_session(self) -> None:
        deadline = self.core.session_deadline
        assert deadline is not None
        if self._session_timer is not None:
            self._session_timer.cancel()
        self._session_timer = asyncio.get_running_loop().call_at(deadline, self._session_lost)

    def _session_lost(self) -> None:
        self._session_timer = None
        if self.core.joined:
            log.warning(
                "group %s: no heartbeat answered within the session; dropping %d partition(s)",
                self.group_id,
                len(self.core.owned),
            )
            self.lose("SESSION_TIMEOUT")

    def lose(self, reason: str) -> None:
        """Drop every partition now (another member may own them already) and
        join again at epoch 0 with the same member id."""
        self.core.lose()
        self._after_loss(reason)

    def _after_loss(self, reason: str) -> None:
        """The core lost every partition: drop them from the fetcher at once
        (so the member may join again), void pending events, tell on_lost."""
        self._generation_ended()
        self.events.clear()
        had = self.hooks.drop_all()
        self.core.dropped()
        if had:
            log.info("group %s: lost %d partition(s) (%s)", self.group_id, len(had), reason)
            self.events.append(RebalanceEvent(RebalanceKind.LOST, had, self.core.generation))
            self.hooks.notify()
        self._wake.set()

"""Replicate opaque byte batches through a pysyncobj Raft log, from asyncio.

`RaftAdapter` is generic: it knows nothing of metadata records. The owner
passes a `StateMachine` (apply / snapshot / restore); every node applies the
committed batches in log order. pysyncobj runs on its own thread (see
raft_core); this module is the asyncio side and never blocks the event loop:
results come back through `loop.call_soon_threadsafe`.

Invariants:

- `append(batch)` is accepted only on the leader (elsewhere it raises
  `NotControllerError` at once) and resolves with the batch's offset only
  after the entry is committed *and* applied to the local state machine. (If
  leadership moves while the entry is still queued, pysyncobj forwards it to
  the new leader; the result keeps the same meaning.) Every failure is a typed
  `LograftError`: `NotControllerError` (details.leader_id names the leader
  when known) means the entry was not appended; `RequestTimedOutError`,
  `RaftCommitOutcomeUnknownError` and a `RaftStoppedError` raised while
  in flight mean it may or may not commit.
- `append` may be awaited from another thread's event loop than the one the
  adapter started on (the active controller's own loop,
  lograft/node/controller_thread.py): its answer is settled on the caller's
  loop, and the applied offset still moves on the adapter's loop only. The
  appends in flight are shared by both loops, so they are guarded by a lock.
- `last_applied` seen on the loop only grows; `wait_for_offset(n)` resolves
  once it is >= n. Offsets are Raft indexes: increasing, with gaps.
- Everything is bounded: in-flight appends (`max_pending_appends`), batch size
  (`max_batch_bytes`), offset waiters (`max_offset_waiters`), subscribers
  (`max_subscribers`), and each subscription holds one pending value at most.
- The adapter's lifecycle is an explicit state machine (`AdapterState`);
  illegal transitions raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import itertools
import logging
import threading
from dataclasses import dataclass
from typing import Any

from pysyncobj import FAIL_REASON

from lograft.errors import (
    InvalidRequestError,
    LograftError,
    NotControllerError,
    RaftCommitOutcomeUnknownError,
    RaftQueueFullError,
    RaftStoppedError,
    RecordTooLargeError,
    RequestTimedOutError,
)
from lograft.quorum.raft.config import RaftConfig
from lograft.quorum.raft.core import RaftCore, RaftCounters, StateMachine
from lograft.quorum.raft.status import RaftStatus, stopped_status

__all__ = [
    "AdapterState",
    "AppliedOffset",
    "AppliedSubscription",
    "RaftAdapter",
    "RaftConfig",
    "RaftCounters",
    "RaftStatus",
    "StateMachine",
]

log = logging.getLogger(__name__)

_STATUS_TIMEOUT_S = 5.0


class AdapterState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


_TRANSITIONS: dict[AdapterState, frozenset[AdapterState]] = {
    AdapterState.NEW: frozenset({AdapterState.STARTING}),
    AdapterState.STARTING: frozenset({AdapterState.RUNNING, AdapterState.FAILED}),
    AdapterState.RUNNING: frozenset({AdapterState.STOPPING, AdapterState.FAILED}),
    AdapterState.STOPPING: frozenset({AdapterState.STOPPED, AdapterState.FAILED}),
    AdapterState.STOPPED: frozenset(),
    AdapterState.FAILED: frozenset({AdapterState.STOPPED}),
}


@dataclass(frozen=True)
class AppliedOffset:
    """The local state machine reflects every entry up to `offset`.

    `restored` is True when a snapshot replaced the state since the previous
    value this subscriber received (readers should reload everything).
    """

    offset: int
    restored: bool


class AppliedSubscription:
    """Latest-value subscription to applied offsets; never buffers more than one.

    A slow reader skips intermediate offsets (each value subsumes the earlier
    ones) but never misses that a restore happened.
    """

    def __init__(self, adapter: RaftAdapter, initial: int) -> None:
        self._adapter = adapter
        self._pending: AppliedOffset | None = None
        self._seen = initial
        self._wakeup = asyncio.Event()
        self._closed = False

    def _push(self, offset: int, restored: bool) -> None:
        if self._closed or (offset <= self._seen and not restored):
            return
        prior_restore = self._pending is not None and self._pending.restored
        self._pending = AppliedOffset(offset, restored or prior_restore)
        self._wakeup.set()

    def _end(self) -> None:
        self._closed = True
        self._wakeup.set()

    async def get(self) -> AppliedOffset:
        """The next applied offset; raises RaftStoppedError once the adapter stops."""
        while self._pending is None:
            if self._closed:
                raise RaftStoppedError("subscription closed")
            self._wakeup.clear()
            await self._wakeup.wait()
        value, self._pending = self._pending, None
        self._seen = value.offset
        return value

    def close(self) -> None:
        self._end()
        self._adapter._drop_subscription(self)

    def __aiter__(self) -> AppliedSubscription:
        return self

    async def __anext__(self) -> AppliedOffset:
        try:
            return await self.get()
        except RaftStoppedError:
            raise StopAsyncIteration from None


class RaftAdapter:
    """Append opaque batches to a Raft log and follow what has been applied."""

    def __init__(self, config: RaftConfig, state_machine: StateMachine) -> None:
        self._config = config
        self._core = RaftCore(config, state_machine, self)
        self._state = AdapterState.NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._applied = 0
        # Appends in flight, from any loop (guarded by _pending_lock).
        self._pending: set[asyncio.Future[int]] = set()
        self._pending_lock = threading.Lock()
        self._waiters: list[tuple[int, int, asyncio.Future[int]]] = []
        self._waiter_seq = itertools.count()
        self._subscriptions: set[AppliedSubscription] = set()
        self._failure: BaseException | None = None
        # Set on the loop when the Raft thread halts while running (a journal
        # write failed, the state machine failed): the node stops on it.
        self._halted = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------

    @property
    def config(self) -> RaftConfig:
        return self._config

    @property
    def node_id(self) -> str:
        return self._config.node_id

    @property
    def state(self) -> AdapterState:
        return self._state

    def _transition(self, new: AdapterState) -> None:
        if new not in _TRANSITIONS[self._state]:
            raise RuntimeError(f"illegal Raft adapter transition {self._state} -> {new}")
        self._state = new

    async def start(self) -> None:
        """Bind, load the snapshot and journal, and start ticking."""
        self._transition(AdapterState.STARTING)
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._core.start)
        except BaseException as exc:
            self._failure = self._failure or exc
            if self._state is not AdapterState.FAILED:
                self._transition(AdapterState.FAILED)
            raise
        if self._state is not AdapterState.STARTING:
            # The Raft thread failed right after its first tick.
            raise RaftStoppedError(
                f"Raft node failed while starting: {self._failure!r}", node_id=self.node_id
            )
        self._transition(AdapterState.RUNNING)
        self._applied = max(self._applied, self._core.applied_offset)

    async def wait_halted(self) -> BaseException:
        """Wait until the Raft thread halts on a failure; that failure.

        A halted voter or observer can neither follow nor change the metadata
        again in this process (its journal may be unwritable), so the node
        stops on it rather than serving on with stale metadata."""
        await self._halted.wait()
        # _on_core_failed sets the failure before the event, on this loop.
        return self._failure or RaftStoppedError("Raft node halted", node_id=self.node_id)

    async def stop(self) -> None:
        """Stop ticking, close sockets and files; fail everything still pending. Idempotent."""
        if self._state is AdapterState.NEW:
            self._state = AdapterState.STOPPED  # never started: nothing to release
            return
        if self._state in (AdapterState.STOPPED, AdapterState.STOPPING, AdapterState.STARTING):
            return
        if self._state is AdapterState.RUNNING:
            self._transition(AdapterState.STOPPING)
        await asyncio.to_thread(self._core.stop)
        self._transition(AdapterState.STOPPED)
        self._fail_everything(RaftStoppedError("Raft adapter stopped", node_id=self.node_id))

    destroy = stop

    # -- appends ---------------------------------------------------------------

    async def append(self, batch: bytes, *, timeout_ms: int | None = None) -> int:
        """Replicate `batch`; return its offset once committed and applied here."""
        self._check_running()
        self._check_batch(batch)
        if not self._core.is_leader():
            raise self._not_controller("this node is not the Raft leader")
        fut = self._submit(batch)
        timeout_ms = self._config.append_timeout_ms if timeout_ms is None else timeout_ms
        try:
            # asyncio.timeout, not wait_for, which on Python 3.11 swallows a
            # cancel that lands as the append commits. `fut` is this call's
            # own: the finally below drops it however the wait ends.
            async with asyncio.timeout(timeout_ms / 1000):
                return await fut
        except TimeoutError:
            raise RequestTimedOutError(
                f"append not committed within {timeout_ms} ms; it may still commit",
                timeout_ms=timeout_ms,
                outcome="unknown",
            ) from None
        finally:
            with self._pending_lock:
                self._pending.discard(fut)
            if not fut.done():
                fut.cancel()  # abandoned: a late pysyncobj answer is dropped

    def _submit(self, batch: bytes) -> asyncio.Future[int]:
        # The caller's loop: the adapter's own, or the active controller's.
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        with self._pending_lock:
            if len(self._pending) >= self._config.max_pending_appends:
                raise RaftQueueFullError(
                    f"{len(self._pending)} appends in flight (max_pending_appends)",
                    max_pending_appends=self._config.max_pending_appends,
                )
            self._pending.add(fut)
        own_loop = loop is self._loop

        def on_result(result: Any, error: int) -> None:  # Raft thread
            if own_loop:
                # One callback: applied offset first, then the answer.
                self._call_soon(self._settle_append, fut, result, error)
                return
            if error == FAIL_REASON.SUCCESS:
                self._call_soon(self._applied_at_least, int(result))
            _call_soon_on(loop, self._settle_future, fut, result, error)

        try:
            self._core.submit(bytes(batch), on_result)
        except BaseException:
            with self._pending_lock:
                self._pending.discard(fut)
            raise
        return fut

    def _settle_append(self, fut: asyncio.Future[int], result: Any, error: int) -> None:
        if error == FAIL_REASON.SUCCESS:
            self._applied_at_least(int(result))
        self._settle_future(fut, result, error)

    def _applied_at_least(self, offset: int) -> None:  # the adapter's loop
        self._on_applied(max(self._applied, offset), False)

    def _settle_future(self, fut: asyncio.Future[int], result: Any, error: int) -> None:
        """On `fut`'s own loop."""
        if fut.done():
            return
        if error == FAIL_REASON.SUCCESS:
            fut.set_result(int(result))
        else:
            fut.set_exception(self._append_error(error))

    def _append_error(self, error: int) -> LograftError:
        if error in (FAIL_REASON.MISSING_LEADER, FAIL_REASON.NOT_LEADER, FAIL_REASON.DISCARDED):
            # Definitely not committed: no leader, or another entry took the slot.
            return self._not_controller(f"append rejected (pysyncobj reason {error})")
        if error == FAIL_REASON.QUEUE_FULL:
            return RaftQueueFullError("pysyncobj command queue is full")
        return RaftCommitOutcomeUnknownError(
            f"leader changed while the append was in flight (pysyncobj reason {error})",
            reason=error,
        )

    def _not_controller(self, message: str) -> NotControllerError:
        leader = self._core.leader_id()
        if leader is not None and leader == self.node_id:
            leader = None  # we lost leadership between the check and the answer
        return NotControllerError(message, leader_id=leader, node_id=self.node_id)

    def _check_batch(self, batch: bytes) -> None:
        if not isinstance(batch, bytes | bytearray | memoryview):
            raise InvalidRequestError(f"batch must be bytes, got {type(batch).__name__}")
        if len(batch) > self._config.max_batch_bytes:
            raise RecordTooLargeError(
                f"batch of {len(batch)} bytes exceeds max_batch_bytes",
                max_batch_bytes=self._config.max_batch_bytes,
            )

    # -- following the applied offset -----------------------------------------

    @property
    def last_applied(self) -> int:
        return self._applied

    async def wait_for_offset(self, offset: int, timeout_ms: int) -> int:
        """Wait until the local state machine has applied up to `offset`; return last_applied."""
        if offset <= self._applied:
            return self._applied
        self._check_running()
        if len(self._waiters) >= self._config.max_offset_waiters:
            self._waiters = [w for w in self._waiters if not w[2].done()]
            heapq.heapify(self._waiters)
            if len(self._waiters) >= self._config.max_offset_waiters:
                raise RaftQueueFullError(
                    "too many offset waiters (max_offset_waiters)",
                    max_offset_waiters=self._config.max_offset_waiters,
                )
        fut: asyncio.Future[int] = self._running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._waiter_seq), fut))
        try:
            # asyncio.timeout, not wait_for (a cancel landing as the offset is
            # applied is not swallowed). A timeout or cancel cancels `fut`,
            # which _on_applied and the bound above then drop.
            async with asyncio.timeout(timeout_ms / 1000):
                return await fut
        except TimeoutError:
            raise RequestTimedOutError(
                f"offset {offset} not applied within {timeout_ms} ms (at {self._applied})",
                offset=offset,
                last_applied=self._applied,
                timeout_ms=timeout_ms,
            ) from None

    def subscribe(self) -> AppliedSubscription:
        """Follow applied offsets: `async for applied in adapter.subscribe(): ...`."""
        self._check_running()
        if len(self._subscriptions) >= self._config.max_subscribers:
            raise RaftQueueFullError(
                "too many subscribers (max_subscribers)",
                max_subscribers=self._config.max_subscribers,
            )
        sub = AppliedSubscription(self, self._applied)
        self._subscriptions.add(sub)
        return sub

    def _drop_subscription(self, sub: AppliedSubscription) -> None:
        self._subscriptions.discard(sub)

    def _on_applied(self, offset: int, restored: bool) -> None:  # loop thread
        if offset < self._applied:
            return
        self._applied = offset
        while self._waiters and (self._waiters[0][0] <= offset or self._waiters[0][2].done()):
            _off, _seq, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(offset)
        for sub in self._subscriptions:
            sub._push(offset, restored)

    # -- status ----------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._state is AdapterState.RUNNING and self._core.is_leader()

    @property
    def leader_id(self) -> str | None:
        return self._core.leader_id() if self._state is AdapterState.RUNNING else None

    def last_heard_ms(self, peer_id: str) -> int | None:
        """Monotonic ms (`time.monotonic_ns() // 1_000_000`) of the last Raft
        message this node received from voter `peer_id`; None if none since
        this process started (peer_contact.py)."""
        return self._core.peer_contact.last_heard_ms(peer_id)

    def refused_peers(self) -> dict[str, int]:
        """{voter id: monotonic ms} of the voters whose Raft port refused a
        connection after their last message here: their process is gone
        (peer_contact.py, peer_loss.py)."""
        return self._core.peer_contact.refusals()

    async def status(self) -> RaftStatus:
        """Self id, role, leader, term, commit index, last applied, voters' connections."""
        if self._state is AdapterState.RUNNING:
            try:
                fut = self._core.call(self._core.status_now)
                # asyncio.timeout, not wait_for, which swallows a cancel that
                # lands as the answer does.
                async with asyncio.timeout(_STATUS_TIMEOUT_S):
                    return await asyncio.wrap_future(fut)
            except (RaftStoppedError, TimeoutError):
                pass
        failure = None if self._failure is None else repr(self._failure)
        return stopped_status(
            node_id=self.node_id,
            voter_ids=self._config.voter_ids,
            last_applied=self._applied,
            failure=failure,
        )

    def counters(self) -> RaftCounters:
        """Term, commit index, elections, snapshot, as of the Raft thread's last
        tick; no call to the Raft thread (for metrics scraped on the loop)."""
        return self._core.counters

    def health(self) -> dict[str, object]:
        """For /healthz, without a call to the Raft thread: how late it ticks
        (`raft_tick_lag_ms`, tick_lag.py), its term and the elections it has
        seen since this process started (as of its last tick)."""
        counters = self._core.counters
        return {
            "raft_tick_lag_ms": self._core.tick_lag.snapshot(),
            "raft_term": counters.term,
            "raft_elections": counters.elections,
        }

    def request_log_compaction(self) -> None:
        """Ask pysyncobj to write a snapshot and truncate its journal on the next tick."""
        self._check_running()
        self._core.request_log_compaction()

    # -- CoreListener: called on the Raft thread ------------------------------

    def on_applied(self, offset: int, restored: bool) -> None:
        self._call_soon(self._on_applied, offset, restored)

    def on_failed(self, error: BaseException) -> None:
        self._call_soon(self._on_core_failed, error)

    def _on_core_failed(self, error: BaseException) -> None:
        self._failure = error
        self._halted.set()
        if self._state in (AdapterState.STARTING, AdapterState.RUNNING, AdapterState.STOPPING):
            self._transition(AdapterState.FAILED)
        self._fail_everything(
            RaftStoppedError(f"Raft node halted: {error!r}", node_id=self.node_id)
        )

    # -- helpers ---------------------------------------------------------------

    def _call_soon(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        # The loop may close between the check and the call.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fn, *args)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "adapter not started"
        return self._loop

    def _check_running(self) -> None:
        if self._state is not AdapterState.RUNNING:
            raise RaftStoppedError(
                f"Raft adapter is {self._state.value}",
                node_id=self.node_id,
                failure=None if self._failure is None else repr(self._failure),
            )

    def _fail_everything(self, error: LograftError) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, set()
        here = _running_loop_or_none()
        for fut in pending:
            if fut.get_loop() is here:
                _fail_future(fut, error)
            else:
                _call_soon_on(fut.get_loop(), _fail_future, fut, error)
        for _off, _seq, fut in self._waiters:
            if not fut.done():
                fut.set_exception(error)
        self._waiters.clear()
        for sub in list(self._subscriptions):
            sub._end()
        self._subscriptions.clear()


def _call_soon_on(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Run `fn(*args)` on `loop`, from any thread; nothing if it closed."""
    if loop.is_closed():
        return
    # The loop may close between the check and the call.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _fail_future(fut: asyncio.Future[int], error: LograftError) -> None:
    if not fut.done():
        fut.set_exception(error)


def _running_loop_or_none() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None

"""The active controller: drives the pure handlers with the Raft log.

Only the Raft leader is the active controller. When this node becomes leader
it appends an empty *barrier* batch and waits for it to apply, so its image
holds everything committed before it took over (KRaft does the same), then
starts every registered broker on a fresh session (`sessions_after_failover`)
so a failover never fences a live broker; all but the broker on the node
that was the Raft leader before: its session is dated from the last Raft
message this node received from it (`RaftAdapter.last_heard_ms`), so a broker
that died with the former controller is fenced at the first fence check
instead of one session after the election (see sessions.py for why that is
safe); and every voter whose Raft port refused a connection after its last
message (`RaftAdapter.refused_peers`: its process is gone, which also
brought this election forward, raft/peer_loss.py) has its broker's session
dated no later than the refusal, so it is fenced once that date is older
than `ControllerConfig.refused_overdue_ms`.

Requests are served one at a time: handler on the current image, append its
records as one batch, wait until applied, answer. Two decisions taken against
the same image could contradict each other, and replay would then refuse the
batch on every node; the lock below is what makes every batch valid.

Periodic duties while active: fence brokers whose session expired and end
the waits for log end reports of unclean elections (both every
`fence_check_interval_ms`, and the fence at the duty tick, every 50 ms, that
finds an unfenced broker proven gone by a refusal copied into the sessions
and its overdue heartbeat: sessions.py), and move leadership back to preferred replicas
(`leader_imbalance_check_interval_ms`, and sooner after a metadata change,
at most once per `leader_balance_min_interval_ms`: leader_balance.py).

Threads: a node runs the runtime on the controller's own thread and event
loop (lograft/node/controller_thread.py), so that the node's busy main loop
delays neither the heartbeats it answers nor its fence check. Everything
below runs on that one loop; other threads read only `status`, an immutable
snapshot the runtime replaces whole (never its sessions or lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lograft.errors import LograftError, NotControllerError
from lograft.quorum.controller import (
    BrokerSessions,
    ControllerConfig,
    ControllerResult,
    balance_preferred_leaders,
    elect_after_report_wait,
    fence_expired_brokers,
    sessions_after_failover,
)
from lograft.quorum.image import MetadataImage
from lograft.quorum.leader_balance import BalanceSchedule
from lograft.quorum.metadata_store import MetadataStore
from lograft.quorum.raft.adapter import RaftAdapter
from lograft.quorum.records import encode_batch

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[MetadataImage, BrokerSessions, int], ControllerResult[T]]

# How often the runtime looks at Raft leadership, ms.
LEADERSHIP_CHECK_INTERVAL_MS = 50


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class ControllerStatus:
    """What other threads may read of the runtime: replaced whole, never changed."""

    # Activated (barrier applied, fresh sessions) since it last became leader.
    activated: bool = False
    # Times this runtime became the active controller.
    activations: int = 0


class ControllerRuntime:
    def __init__(
        self,
        raft: RaftAdapter,
        store: MetadataStore,
        config: ControllerConfig,
        *,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.raft = raft
        self.store = store
        self.config = config
        self.clock = clock
        self._lock = asyncio.Lock()
        self._sessions: BrokerSessions | None = None
        self._task: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        # Set while sessions exist (this node is the active controller): the
        # stall watch runs only then (see _watch_loop).
        self._activated = asyncio.Event()
        self._last_tick: int | None = None
        # The last other node seen as Raft leader while this one followed.
        self._former_leader: str | None = None
        self.status = ControllerStatus()

    @property
    def activations(self) -> int:
        return self.status.activations

    @property
    def active(self) -> bool:
        """From any thread: activated, and Raft leader still (the status is
        a snapshot; is_leader is read from the Raft thread's last tick)."""
        return self.status.activated and self.raft.is_leader

    def _set_sessions(self, sessions: BrokerSessions | None) -> None:
        """The one place sessions start or end: the status follows them."""
        self._sessions = sessions
        if sessions is None:
            self._activated.clear()
        else:
            self._activated.set()
        if (sessions is not None) != self.status.activated:
            self.status = ControllerStatus(sessions is not None, self.status.activations)

    def leader_id(self) -> int | None:
        raw = self.raft.leader_id
        try:
            return None if raw is None else int(raw)
        except ValueError:
            return None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller")
        self._watch = asyncio.create_task(self._watch_loop(), name="controller-loop-watch")

    async def stop(self) -> None:
        for task in (self._task, self._watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._watch = None
        self._set_sessions(None)

    # -- requests ------------------------------------------------------------------------

    async def run(self, handler: Handler[T]) -> T:
        """Decide on the current image, commit the records, then answer.

        Cancelling the caller (a local caller's timeout, stop()) is safe at
        every await:

        - waiting for the lock: nothing was decided; asyncio.Lock hands the
          turn to the next waiter;
        - waiting for the commit: the batch is already submitted to Raft and
          may commit whatever the caller does, so the commit is *not*
          cancelled and the lock stays held until it resolves (committed and
          applied, or failed, bounded by Raft's append_timeout_ms). Releasing
          the lock at the cancellation, as `async with` did, let the next
          handler decide against an image without that batch; records carry
          no expected epochs, so both batches applied and the later one
          silently undid the earlier one's ISR or state change (the
          compare-and-set of AlterPartition runs in the handler, on the
          image). Only the answer is lost: the caller's retry is decided
          against the image that includes the commit.
        """
        self._require_active()
        await self._lock.acquire()
        release = True
        try:
            self._require_active()
            assert self._sessions is not None
            result = handler(self.store.image, self._sessions, self.clock())
            if result.sessions is not None:
                self._sessions = result.sessions
            if result.records:
                commit = asyncio.ensure_future(self.raft.append(encode_batch(result.records)))
                try:
                    await asyncio.shield(commit)
                except asyncio.CancelledError:
                    if commit.done():
                        # Resolved as we were cancelled: mark its outcome seen.
                        self._consume(commit)
                    else:
                        # The commit task now owns the lock and releases it.
                        release = False
                        commit.add_done_callback(self._release_after_commit)
                    raise
            return result.response
        finally:
            if release:
                self._lock.release()

    def _release_after_commit(self, commit: asyncio.Future[int]) -> None:
        """Done-callback of a commit whose caller was cancelled: end its turn."""
        try:
            self._consume(commit)
        finally:
            self._lock.release()

    @staticmethod
    def _consume(commit: asyncio.Future[int]) -> None:
        """Log the outcome of a commit nobody awaits any more. Retrieving the
        exception also keeps asyncio from logging "exception never retrieved"."""
        if commit.cancelled():
            log.warning("abandoned controller commit was cancelled")
        elif (exc := commit.exception()) is not None:
            log.warning("abandoned controller commit failed: %r", exc)

    def touch(self, broker_id: int, broker_epoch: int) -> None:
        """Count a heartbeat as contact the moment it arrives, before it waits
        its turn behind other requests (Kafka's controller does the same on its
        RPC thread: BrokerHeartbeatTracker.updateContactTime).

        Requests are served one at a time, each waiting for its metadata
        commit; under load a heartbeat could queue behind seconds of commits
        and the fence check, and a live broker be fenced for the controller's
        own backlog. Only a registered broker's current epoch counts, and only
        session time moves: unfencing still goes through the heartbeat handler."""
        if self._sessions is None or not self.raft.is_leader:
            return
        broker = self.store.image.brokers.get(broker_id)
        if broker is not None and broker.broker_epoch == broker_epoch:
            self._sessions = self._sessions.heartbeat(broker_id, self.clock())

    def _require_active(self) -> None:
        if self._sessions is None or not self.raft.is_leader:
            leader = self.leader_id()
            raise NotControllerError(
                f"node {self.raft.node_id} is not the active controller"
                + (f"; node {leader} is" if leader is not None else "; no controller is elected"),
                leader_id=leader,
            )

    # -- leadership and periodic duties ----------------------------------------------------

    def absorb_stall(self, now: int) -> bool:
        """Forgive the time this controller's own event loop was stalled.

        While the loop is blocked (GC, CPU starvation, a long handler) brokers'
        heartbeats wait unread in its sockets; expiring sessions right after
        would fence every broker at once for the controller's own fault. A gap
        between duty ticks longer than a heartbeat interval therefore gives
        every broker a fresh session, as a failover does: a broker that is
        really dead is fenced one session timeout later instead. Returns True
        when a stall was absorbed.
        """
        last, self._last_tick = self._last_tick, now
        stalled = last is not None and now - last > self.config.broker_heartbeat_interval_ms
        if stalled and self._sessions is not None:
            log.warning(
                "controller loop stalled for %d ms; giving every broker a fresh session",
                now - (last or now),
            )
            # A broker proven gone stays gone: that proof is no stall of ours.
            # (A refused broker that heartbeated since is not proven gone and
            # gets its fresh session like any other.)
            old = self._sessions
            overdue = self.config.refused_overdue_ms
            gone = {b: t for b, t in old.refused_ms.items() if old.proven_gone(b, now, overdue)}
            self._sessions = sessions_after_failover(self.store.image, now, refused_ms=gone)
            return True
        return False

    async def _watch_loop(self) -> None:
        """Notice this loop's stalls as soon as it runs again.

        The duty loop cannot: while it waits for its turn to fence (behind
        other requests' commits) it does not tick, so a stall in that wait
        went unnoticed and the fence check expired every session the stall
        had starved (seen at 2,000 partitions: a broker fenced, then "stalled
        for 3337 ms" logged a moment later)."""
        while True:
            # A follower has no sessions a stall could expire: it waits for
            # activation instead of waking 20 times a second for nothing
            # (issue 14: the controller thread's idle CPU is its wake-ups).
            await self._activated.wait()
            await asyncio.sleep(LEADERSHIP_CHECK_INTERVAL_MS / 1000)  # periodic watch
            if self._sessions is not None:
                self.absorb_stall(self.clock())

    def _fence(
        self, image: MetadataImage, sessions: BrokerSessions, now: int
    ) -> ControllerResult[tuple[int, ...]]:
        """Fence expired brokers, unless the loop stalled just before this
        decision (then every session is refreshed instead, see absorb_stall)."""
        if self.absorb_stall(now):
            assert self._sessions is not None
            sessions = self._sessions
        return fence_expired_brokers(image, sessions, now, self.config)

    async def _run(self) -> None:
        next_fence = 0
        balance = BalanceSchedule()
        while True:
            await asyncio.sleep(LEADERSHIP_CHECK_INTERVAL_MS / 1000)  # periodic duty loop
            try:
                if not self.raft.is_leader:
                    if self._sessions is not None:
                        log.info("node %s is no longer the active controller", self.raft.node_id)
                    self._set_sessions(None)
                    self._note_leader()
                    continue
                if self._sessions is None:
                    await self._activate()
                now = self.clock()
                if self.absorb_stall(now):
                    next_fence = now + self.config.fence_check_interval_ms
                if self._note_refusals(now):
                    next_fence = now  # a broker proven gone: fence it at this tick
                if now >= next_fence:
                    next_fence = now + self.config.fence_check_interval_ms
                    await self._periodic(self._fence)
                    await self._periodic(
                        lambda img, s, t: elect_after_report_wait(img, s, t, self.config)
                    )
                offset = self.store.image.offset
                if balance.due(now, offset, self.config):
                    balance.checked(now, offset, self.config)
                    await self._periodic(
                        lambda img, _s, _t: balance_preferred_leaders(img, self.config)
                    )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller duty failed; retrying")

    def _note_leader(self) -> None:
        """Remember which other node leads while this one follows (every
        duty tick, 50 ms: a leader that dies is seen long before the
        election timeout lets this node replace it)."""
        leader = self.raft.leader_id
        if leader is not None and leader != self.raft.node_id:
            self._former_leader = leader

    def _refusals(self) -> dict[int, int]:
        """{broker id: monotonic ms} of the voters whose Raft port refused a
        connection after their last message here (their process is gone)."""
        return {int(p): t for p, t in self.raft.refused_peers().items() if p.isdigit()}

    def _note_refusals(self, now: int) -> bool:
        """Copy the refusals into the sessions; True when one proves an
        unfenced broker gone (its fence is due now, not at the next check)."""
        if self._sessions is None:
            return False
        sessions = self._sessions.with_refusals(self._refusals())
        if sessions is not self._sessions and sessions.refused_ms:
            log.info("Raft ports refused (broker id: monotonic ms): %s", dict(sessions.refused_ms))
        self._sessions = sessions
        overdue = self.config.refused_overdue_ms
        return any(
            sessions.proven_gone(b, now, overdue)
            for b in sessions.refused_ms
            if b in self.store.image.brokers and not self.store.image.brokers[b].fenced
        )

    def _former_leader_contact(self, now: int) -> dict[int, int]:
        """{broker id: last proven contact} for the broker on the node that
        led Raft before this one, when that node was heard from at all."""
        former = self._former_leader
        if former is None or not former.isdigit():
            return {}
        heard = self.raft.last_heard_ms(former)
        if heard is None:
            return {}
        if now - heard > self.config.broker_session_timeout_ms:
            log.info(
                "former controller %s last heard %d ms ago: its broker's session is dated "
                "from then",
                former,
                now - heard,
            )
        return {int(former): heard}

    async def _activate(self) -> None:
        """Barrier, then sessions: the new controller's soft state."""
        await self.raft.append(encode_batch(()))
        async with self._lock:
            self._last_tick = None
            self.status = ControllerStatus(self.status.activated, self.status.activations + 1)
            now = self.clock()
            contact = self._former_leader_contact(now)
            refused = self._refusals()
            if refused:
                log.info("voters %s refused on their Raft port: their brokers are gone", refused)
            self._set_sessions(sessions_after_failover(self.store.image, now, contact, refused))
            # Ticks stopped counting while another node was active: that gap
            # is not a stall of this loop.
        log.info(
            "node %s is the active controller (metadata offset %d)",
            self.raft.node_id,
            self.store.image.offset,
        )

    async def _periodic(self, handler: Handler[T]) -> None:
        try:
            result = await self.run(handler)
        except NotControllerError:
            return
        except LograftError as exc:
            log.warning("controller duty refused: %s", exc.message)
            return
        if result:
            log.info("controller duty: %s", result)

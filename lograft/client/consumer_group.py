"""A consumer's group side: subscription, rebalance events, commits.

`AsyncConsumer` (and through it `Consumer`) holds one `ConsumerGroup` when it
has a `group_id`. The membership's heartbeat loop runs in the background;
its rebalance events are worked through by `poll` (and `close`), in the
caller's task, in three steps so the sync consumer can run the user's
callback in the user's thread between them:

1. `begin`: ASSIGN reads the committed offsets and adds the partitions to
   the fetcher, paused, at the committed offset (else `auto_offset_reset`);
   REVOKE commits the consumed positions (auto-commit).
2. the callback: on_assign / on_revoke / on_lost (on_revoke if no on_lost).
3. `finish`: ASSIGN unpauses (fetching starts; a seek in on_assign wins);
   REVOKE removes the partitions and acknowledges them to the coordinator.

Without a subscription, partitions `assign()`ed with a `group_id` start at
the group's committed offset too, read by the next `poll` or `position`
(`resolve_committed`).

Auto-commit runs from `poll`, so what it commits are the positions after
the records earlier polls returned, which the program has handled by the time
it polls again (at-least-once, as Kafka's auto-commit).

Loop-bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from lograft.client.config import ConsumerConfig
from lograft.client.coordinator import CoordinatorClient
from lograft.client.fetcher import Fetcher, PartitionState
from lograft.client.membership import (
    GroupMembership,
    MembershipHooks,
    RebalanceEvent,
    RebalanceKind,
)
from lograft.client.metadata import ClusterMetadata
from lograft.client.offset_commits import OffsetCommitter
from lograft.client.poll_timer import PollTimer
from lograft.client.transport import Transport
from lograft.errors import LograftError
from lograft.protocol.group_wire import Partitions
from lograft.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

RebalanceCallback = Callable[[list[TopicPartition]], Any]


@dataclass(frozen=True, slots=True)
class RebalanceListener:
    on_assign: RebalanceCallback | None = None
    on_revoke: RebalanceCallback | None = None
    # None: on_revoke is called for lost partitions too (as Kafka's default
    # onPartitionsLost does).
    on_lost: RebalanceCallback | None = None

    def callback(self, kind: RebalanceKind) -> RebalanceCallback | None:
        if kind is RebalanceKind.ASSIGN:
            return self.on_assign
        if kind is RebalanceKind.REVOKE:
            return self.on_revoke
        return self.on_lost or self.on_revoke


class ConsumerGroup:
    def __init__(
        self,
        group_id: str,
        config: ConsumerConfig,
        metadata: ClusterMetadata,
        transport: Transport,
        fetcher: Fetcher,
        notify: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.fetcher = fetcher
        self.notify = notify
        self.poll_timer = PollTimer(config.max_poll_interval_ms, clock)
        self.coordinator = CoordinatorClient(group_id, config, metadata, transport)
        self.membership: GroupMembership | None = None
        self.committer = OffsetCommitter(self.coordinator, lambda: self.membership)
        self.listener = RebalanceListener()
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._next_auto_commit = 0.0
        # assign()ed partitions waiting for their committed offset: the
        # partition's seek epoch when assigned (a seek since then wins).
        self.pending_committed: dict[TopicPartition, int] = {}

    @property
    def subscribed(self) -> bool:
        return self.membership is not None

    def subscribe(self, topics: frozenset[str], listener: RebalanceListener) -> None:
        self.listener = listener
        if self.membership is None:
            hooks = MembershipHooks(
                pause=self.fetcher.pause, drop_all=self.fetcher.drop_all, notify=self.notify
            )
            # The application's time to its first poll counts from here, as
            # the membership joins now.
            self.poll_timer.polled()
            self.membership = GroupMembership(
                self.config, self.coordinator, topics, hooks, self.poll_timer
            )
        else:
            self.membership.subscribe(topics)

    def start(self) -> None:
        """Start heartbeating (on the loop; poll calls it)."""
        if self.membership is not None:
            self.membership.start()
        if not self._next_auto_commit:
            self._next_auto_commit = self._now() + self.config.auto_commit_interval_ms / 1000

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _deadline(self) -> float:
        return self._now() + self.config.default_api_timeout_ms / 1000

    def polled(self) -> None:
        """poll was called: restart the max_poll_interval_ms timer, and
        rejoin if the member left for want of polls."""
        self.poll_timer.polled()
        if self.membership is not None:
            self.membership.poll_seen()

    @contextlib.contextmanager
    def poll_waiting(self) -> Iterator[None]:
        """poll waits for records: that time is not time without a poll."""
        with self.poll_timer.waiting():
            yield

    def take_error(self) -> LograftError | None:
        return self.membership.take_error() if self.membership is not None else None

    def has_events(self) -> bool:
        return self.membership is not None and bool(self.membership.events)

    # -- rebalance events -------------------------------------------------------------------

    async def begin(self) -> RebalanceEvent | None:
        """The next event with its work before the callback done; None when
        there is none. If that work fails the event stays first in line."""
        m = self.membership
        while m is not None and (event := m.take_event()) is not None:
            if event.generation != m.core.generation:
                continue  # made void by a loss
            try:
                if event.kind is RebalanceKind.ASSIGN:
                    await self._unless_lost(self._begin_assign(event), event.generation)
                elif event.kind is RebalanceKind.REVOKE:
                    await self._unless_lost(
                        self._commit_positions(event.partitions, "revocation"), event.generation
                    )
            except BaseException:
                m.put_back(event)
                raise
            if event.generation != m.core.generation:
                continue  # lost meanwhile: the LOST event speaks for these partitions
            return event
        return None

    def callback(self, event: RebalanceEvent) -> RebalanceCallback | None:
        return self.listener.callback(event.kind)

    def finish(self, event: RebalanceEvent) -> None:
        m = self.membership
        assert m is not None
        if event.generation == m.core.generation:
            if event.kind is RebalanceKind.ASSIGN:
                for tp in event.partitions:
                    st = self.fetcher.partitions.get(tp)
                    if st is not None:
                        st.paused = tp in m.core.revoking
            elif event.kind is RebalanceKind.REVOKE:
                self.fetcher.remove(event.partitions)
                m.revoked_done(event)
        self.notify()

    async def _unless_lost(self, work: Coroutine[Any, Any, None], generation: int) -> None:
        """Run `work`, abandoning it if the partitions are lost meanwhile: a
        commit or offset lookup for them is moot then, and must not hold up
        poll (and on_lost) while it retries against an unreachable coordinator."""
        m = self.membership
        assert m is not None
        task = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(m.wait_lost(generation))
        try:
            await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (task, lost):
                if not t.done():
                    t.cancel()
            await asyncio.gather(lost, return_exceptions=True)
        if task.done() and not task.cancelled():
            task.result()  # the work's own error
        else:
            await asyncio.gather(task, return_exceptions=True)

    async def _begin_assign(self, event: RebalanceEvent) -> None:
        m = self.membership
        assert m is not None
        committed = await self.committer.fetch(event.partitions, self._deadline())
        if event.generation != m.core.generation:
            return
        reset = self.config.auto_offset_reset
        for tp in sorted(event.partitions):
            offset = committed.get(tp)
            self.fetcher.add(
                tp,
                PartitionState(
                    position=offset,
                    reset_to=None if offset is not None or reset == "none" else reset,
                    paused=True,
                ),
            )

    # -- manual assignment ----------------------------------------------------------------------

    def assigned_manually(self, new: list[TopicPartition]) -> None:
        """Partitions just assign()ed start at the group's committed offset
        (else auto_offset_reset), as in Kafka: not fetched until it is read."""
        for tp in new:
            st = self.fetcher.partitions[tp]
            st.paused = True
            st.reset_to = None
            self.pending_committed[tp] = st.epoch

    async def resolve_committed(self, deadline: float) -> None:
        """Read the committed offsets of assign()ed partitions still waiting
        for them (from poll and position)."""
        pending = {
            tp: epoch
            for tp, epoch in self.pending_committed.items()
            if tp in self.fetcher.partitions
        }
        self.pending_committed = dict(pending)
        if not pending:
            return
        committed = await self.committer.fetch(pending, deadline)
        reset = self.config.auto_offset_reset
        for tp, epoch in pending.items():
            if self.pending_committed.pop(tp, None) is None:
                continue  # a concurrent resolve applied it, or it was unassigned
            st = self.fetcher.partitions.get(tp)
            if st is None:
                continue
            if st.epoch == epoch and st.position is None:
                if tp in committed:
                    st.position = committed[tp]
                else:
                    st.reset_to = None if reset == "none" else reset
            st.paused = False
        self.notify()

    # -- commits ------------------------------------------------------------------------------

    def positions(self, partitions: Partitions | None = None) -> dict[TopicPartition, int]:
        """Consumed positions (the next offset poll returns) of these partitions
        (default: all held)."""
        out: dict[TopicPartition, int] = {}
        for tp, st in self.fetcher.partitions.items():
            if (partitions is None or tp in partitions) and st.position is not None:
                out[tp] = st.position
        return out

    async def _commit_positions(self, partitions: Partitions | None, why: str) -> None:
        """Auto-commit: commit changed positions, logging a failure (the
        partitions may be lost anyway; their new owner starts from the last
        commit that did land)."""
        if not self.config.auto_commit:
            return
        offsets = self.committer.changed(self.positions(partitions))
        try:
            await self.committer.commit(offsets, self._deadline())
        except LograftError as exc:
            log.warning("group %s: auto-commit on %s failed: %s", self.committer.group_id, why, exc)

    def maybe_auto_commit(self) -> None:
        """From poll: start an auto-commit if the interval passed and none runs."""
        if not self.config.auto_commit:
            return
        if self._auto_commit_task is not None and not self._auto_commit_task.done():
            return
        now = self._now()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
        if self.committer.changed(self.positions()):
            self._auto_commit_task = asyncio.get_running_loop().create_task(
                self._commit_positions(None, "interval")
            )

    # -- closing ------------------------------------------------------------------------------

    async def prepare_close(self, deadline: float) -> RebalanceEvent | None:
        """Before leaving: finish a running auto-commit, commit every consumed
        position (auto-commit), and return the revocation of every partition
        held, for on_revoke."""
        task, self._auto_commit_task = self._auto_commit_task, None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        if self.config.auto_commit:
            offsets = self.committer.changed(self.positions())
            try:
                await self.committer.commit(offsets, deadline)
            except LograftError as exc:
                log.warning("group %s: commit on close failed: %s", self.committer.group_id, exc)
        m = self.membership
        held = frozenset(self.fetcher.partitions)
        if m is None or not held:
            return None
        return RebalanceEvent(RebalanceKind.REVOKE, held, m.core.generation)

    async def close(self, deadline: float) -> None:
        """Leave the group (releasing every partition at once) and stop."""
        task, self._auto_commit_task = self._auto_commit_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.membership is not None:
            await self.membership.leave(deadline)

    async def unsubscribe(self, deadline: float) -> None:
        """Leave, and forget the subscription and every partition: a later
        subscribe() joins as a new member."""
        await self.close(deadline)
        self.membership = None
        self.listener = RebalanceListener()
        self.fetcher.drop_all()

"""The follower side of replication: Kafka's ReplicaFetcherManager and
ReplicaFetcherThread, as tasks on the broker's event loop.

- One fetch session per leader broker carries every partition this broker
  follows from that leader (one long-poll per broker pair, however many
  partitions). `sync` starts and stops sessions to match the replicas'
  roles; the replica manager calls it after an apply that changed a role or
  a leader.
- A session sends `ReplicaFetchRequest`s through the injected transport
  (the node's HTTP client: this package knows nothing of HTTP) and applies
  each answer to its partitions (`Partition.apply_fetch_response`: truncate
  on a diverging epoch, else append what the leader sent and take its high
  watermark): on the event loop when the answer is small, else in one job
  in a storage thread (`log_work.py` says when).
- Each session is incremental (Kafka's KIP-227, leader side in
  fetch_session_cache.py): the first fetch names every partition and asks
  for a session; later ones carry its id and next epoch and name only the
  partitions whose fetch state changed, joined or left (`_FollowerSession`).
  A session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH)
  or a failed request starts over with a full fetch.
- A failed request backs the whole session off `backoff_ms`; a partition
  whose answer carries an error, or whose data cannot be applied, sits out
  of its session for `backoff_ms` (its error makes the leader answer at
  once, so keeping it in would turn the session's long-poll into a busy
  loop).
- Except a "not the leader yet" answer (NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_LEADER_EPOCH): after a failover this follower often applies the
  new leadership before the new leader does, and its first fetch of a moved
  partition reaches a broker that does not lead it yet. The metadata already
  names that leader, so such a partition sits out `not_leader_backoff_ms`,
  doubling with each such answer in a row up to `backoff_ms` (a leader that
  never takes over costs a few retries, not a busy loop), and when its time
  is up it interrupts the poll in flight as a newcomer does (below). Before
  this the moved partition waited out `backoff_ms` and then the poll in
  flight (up to `wait_max_ms`), and the new leader's acks=all writes with
  it: 0.45-0.55 s from the kill to the first ack (docs/benchmarks.md).
- A partition that joins a session while its long-poll is in flight (a
  leader change: the new leader is one this broker already follows, or a
  "not the leader yet" back-off ended) does not wait for that poll to end
  (up to `wait_max_ms`): `sync` (or the back-off's timer) interrupts it
  and the session starts over with a full fetch naming the newcomer.
  After a failover the new leader's acks=all writes wait for this follower
  to fetch, and its old poll, which names none of the moved partitions,
  would otherwise hold them for up to 500 ms (measured: 0.2-0.5 s from the
  fence to the first ack, docs/benchmarks.md).
- Nothing here ends a session but `stop` or its last partition leaving: a
  bug or disk fault applying one answer is logged and the session goes on,
  since nothing would restart it before the next metadata change.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lograft.brokers.broker_stats import BrokerStats
from lograft.brokers.log_work import INLINE_BYTES_MAX, LogWork, append_in_thread
from lograft.brokers.partition import Partition, Role
from lograft.errors import (
    FetchSessionIdNotFoundError,
    LograftError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from lograft.protocol.fetch_wire import (
    INITIAL_SESSION_EPOCH,
    NO_SESSION_ID,
    SESSIONLESS_EPOCH,
    FetchPartitionRequest,
    FetchPartitionResponse,
    PartitionFetch,
    ReplicaFetchRequest,
    decode_answer,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import Clock

log = logging.getLogger(__name__)

# A follower refused a fetch session waits `session_rescan_ms` before asking
# again, doubled with each refusal in a row at most this many times (10 s up
# to 320 s at the default), doublings.
SESSIONLESS_DOUBLINGS_MAX = 5

# Sends one replica fetch (leader broker id, JSON request, timeout in s) and
# returns the leader's encoded answer (`fetch_wire`).
FetchTransport = Callable[[int, bytes, float], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    # Long-poll the leader may hold a fetch, ms.
    wait_max_ms: int = 500
    # Bytes one answer may carry, in all and per partition.
    max_bytes: int = 8 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    # Partitions one fetch names and forgets at most, partitions. A session
    # following more from one leader names the rest over its next fetches,
    # each answered at once (`_FollowerSession.build`), so no fetch passes
    # the leader's request bound ([http] request_bytes_max: at most 423
    # bytes a partition, `fetch_wire.partitions_within`) and no answer's
    # header passes `fetch_wire.HEADER_BYTES_MAX`.
    request_partitions_max: int = 20_000
    # Pause after a failed fetch (and a failing partition's time out), ms.
    backoff_ms: int = 200
    # A partition's first time out after a "not the leader yet" answer, ms;
    # doubled with each such answer in a row, up to `backoff_ms`.
    not_leader_backoff_ms: int = 10
    # An incremental fetch session compares every partition's fetch state
    # with what the leader holds at least this often, ms (in between, only
    # partitions an answer or a leader change touched, and all of them when
    # the set of partitions followed from that leader changed): the safety
    # net for a state that moved otherwise (a background flush's durable
    # offset, which only a group-commit leader's HW reads, and its own
    # group commits move with an answer).
    session_rescan_ms: int = 10_000


class _FollowerSession:
    """The follower's half of one incremental fetch session (Kafka's
    FetchSessionHandler): the session id, the next epoch, and the fetch
    state the leader holds for each partition of it."""

    __slots__ = (
        "changed",
        "cursor",
        "drop",
        "growing",
        "leaving",
        "membership",
        "next_epoch",
        "pending",
        "poll",
        "polling",
        "refusals",
        "rescan_ms",
        "scanned_ms",
        "sent",
        "session_id",
        "sessionless_until_ms",
        "stale",
        "wants_session",
    )

    def __init__(self) -> None:
        self.session_id = NO_SESSION_ID
        self.next_epoch = INITIAL_SESSION_EPOCH
        self.sent: dict[TopicPartition, PartitionFetch] = {}
        # Partitions to name again or forget on the next fetch although
        # their state looks unchanged (an error or a diverging answer).
        self.drop: set[TopicPartition] = set()
        # Partitions whose fetch state may have moved since the last fetch
        # (an answer was applied to them): the only ones a fetch between
        # two full scans compares.
        self.changed: set[TopicPartition] = set()
        self.scanned_ms = -(2**62)
        # Which partitions the fetch was built from when all of them were
        # last compared (`build`'s `membership`).
        self.membership: object = None
        # The partitions the fetch in flight was built from, and the fetch
        # itself, which an interrupt cancels (None between fetches).
        self.polling: Mapping[TopicPartition, Partition] | None = None
        self.poll: asyncio.Future[bytes] | None = None
        # Partitions to name, oldest first, and to forget, that a fetch over
        # the limit (`request_partitions_max`) left for the next ones.
        self.pending: dict[TopicPartition, None] = {}
        self.leaving: set[TopicPartition] = set()
        # Partitions of the session whose state moved but were left to
        # name later: the leader holds (and may serve) an older state, so
        # their answers are not applied (`takes_answer`), and the fetch that
        # names one also forgets it, so the leader starts it afresh and
        # answers its high watermark again.
        self.stale: set[TopicPartition] = set()
        # The fetch in flight names partitions joining the session.
        self.growing = False
        # Where the next full fetch's slice of the followed partitions starts
        # when they are more than one fetch names: without a session every
        # fetch is full, and the slices take turns.
        self.cursor = 0
        # Refusals in a row (the leader gave no session, or dropped it as
        # it grew: more partitions than its session cache holds), and until
        # when (ms) full fetches ask for none: `rescan_ms` (the last
        # `build`'s), doubled with each refusal in a row up to
        # SESSIONLESS_DOUBLINGS_MAX times.
        # Asking at once would create, grow and drop the session in a loop,
        # each time evicting other followers' sessions from the leader's
        # cache to make room.
        self.refusals = 0
        self.rescan_ms = 0
        self.sessionless_until_ms = -(2**62)
        # Whether the next full fetch asks the leader for a session.
        self.wants_session = True

    def reset(self) -> None:
        """Start over with a full fetch (a failed request or a session error)."""
        self.session_id = NO_SESSION_ID
        self.next_epoch = INITIAL_SESSION_EPOCH
        self.sent = {}
        self.drop = set()
        self.changed = set()
        self.pending = {}
        self.leaving = set()
        self.stale = set()
        self.growing = False

    def refused(self, now_ms: int) -> None:
        """The leader gave no session, or dropped it as partitions joined
        (its session cache holds fewer): fetch without one for a while."""
        doublings = min(self.refusals, SESSIONLESS_DOUBLINGS_MAX)
        self.sessionless_until_ms = now_ms + (self.rescan_ms << doublings)
        self.refusals += 1

    def takes_answer(self, tp: TopicPartition) -> bool:
        """Whether an answer for `tp` within the session is applied: it is
        in the session at the state the leader serves (not left for a later
        fetch to name, nor to forget)."""
        return tp in self.sent and tp not in self.stale and tp not in self.leaving

    def wait_ms(self, wait_max_ms: int, followed: int, limit: int) -> int:
        """How long the next fetch lets the leader hold it: not at all while
        a session still has partitions to name or forget (a long-poll would
        hold them back), a share of `wait_max_ms` per slice when slices take
        turns without a session (every partition fetched once per
        `wait_max_ms` while idle), else `wait_max_ms`."""
        if not self.pending and not self.leaving:
            return wait_max_ms
        if self.session_id == NO_SESSION_ID and not self.wants_session:
            return max(1, wait_max_ms * limit // max(followed, 1))
        return 0

    def build(
        self,
        by_tp: Mapping[TopicPartition, Partition],
        membership: object,
        now_ms: int,
        rescan_ms: int,
        limit: int,
    ) -> tuple[dict[TopicPartition, PartitionFetch], tuple[TopicPartition, ...]]:
        """What the next fetch names and forgets: everything (full), or the
        partitions whose state differs from what the leader holds; at most
        `limit` of them in all, the rest left for the next fetches.

        `by_tp` is what this fetch carries; `membership` names that set (the
        same object while it is unchanged). Every partition is compared when it changed and
        every `rescan_ms` (the safety net); in between, only partitions that
        had an answer applied, a leader change, an error to clear, or that
        a fetch over `limit` left to name, so an idle or busy session's
        fetch costs in proportion to those, not to the partitions it
        follows."""
        self.rescan_ms = rescan_ms
        if self.session_id == NO_SESSION_ID:
            # A set no larger than one fetch asks every time, as before the
            # split (a leader too small for it refuses before evicting any).
            self.wants_session = now_ms >= self.sessionless_until_ms or len(by_tp) <= limit
            self.scanned_ms = now_ms
            self.membership = membership
            self.changed = set()
            self.leaving = set()
            self.growing = False
            return {tp: by_tp[tp].follower_fetch_request() for tp in self._slice(by_tp, limit)}, ()
        sent = self.sent
        look: Iterable[TopicPartition]
        # One left to forget that is followed again before it was: the
        # leader still holds it, and served it while its answers were not
        # taken, so it is stale (forgotten and named at once).
        back = {tp for tp in self.leaving if tp in by_tp}
        if back:
            self.leaving -= back
            self.stale |= back
        # A stale partition (the leader holds it) that left is forgotten too.
        if membership is not self.membership or now_ms - self.scanned_ms >= rescan_ms:
            self.scanned_ms = now_ms
            self.membership = membership
            look = by_tp
            forgotten = (sent.keys() | self.drop | self.leaving | self.stale) - by_tp.keys()
            self.stale &= by_tp.keys()
        else:
            # Since the last full comparison every partition of `by_tp` was
            # named (so it is in `sent`) unless `refetch` put it in `drop` or
            # a fetch over the limit left it in `pending`.
            look = (self.changed | self.drop | self.pending.keys() | self.stale) & by_tp.keys()
            # Not `self.drop - by_tp.keys()`: a set minus a keys view walks
            # the whole view (every partition followed), this walks `drop`.
            forgotten = {tp for tp in self.drop | self.leaving | self.stale if tp not in by_tp}
            self.stale = {tp for tp in self.stale if tp in by_tp}
        self.changed = set()
        named: dict[TopicPartition, PartitionFetch] = {}
        for tp in look:
            fetch = by_tp[tp].follower_fetch_request()
            if sent.get(tp) != fetch or tp in self.drop or tp in self.stale:
                named[tp] = fetch
        named, gone = self._within(named, forgotten, limit)
        self.growing = any(tp not in sent for tp in named)
        return named, gone

    def _slice(self, by_tp: Mapping[TopicPartition, Partition], limit: int) -> list[TopicPartition]:
        """A full fetch's partitions: all of them, or the `limit` from
        `cursor` on (the others `pending`, named by the session's next
        fetches, or by the next full fetch's slice when there is none)."""
        order = list(by_tp)
        if len(order) <= limit:
            self.pending = {}
            return order
        start = self.cursor % len(order)
        chunk = order[start : start + limit]
        chunk += order[: limit - len(chunk)]
        self.cursor = start + limit
        chosen = set(chunk)
        self.pending = dict.fromkeys(tp for tp in order if tp not in chosen)
        return chunk

    def _within(
        self,
        named: dict[TopicPartition, PartitionFetch],
        forgotten: Iterable[TopicPartition],
        limit: int,
    ) -> tuple[dict[TopicPartition, PartitionFetch], tuple[TopicPartition, ...]]:
        """`named` and `forgotten` cut to `limit` partitions in all, the rest
        kept in `pending` and `leaving` for the next fetch: forgotten ones
        first (they free the leader's session cache), then those left over
        by earlier fetches, oldest first (so none waits behind partitions
        that move with every answer), then the others. A `stale` one named
        is forgotten too (two of the `limit`)."""
        gone = tuple(forgotten)
        self.leaving = set(gone[limit:])
        gone = gone[:limit]
        room = limit - len(gone)
        stale = self.stale
        if len(named) + len(stale) <= room:
            self.pending = {}
            self.stale = set()
            return named, (*gone, *(tp for tp in named if tp in stale))
        waiting = [tp for tp in self.pending if tp in named]
        order = waiting + [tp for tp in named if tp not in self.pending]
        take = 0
        for tp in order:
            cost = 2 if tp in stale else 1
            # A stale one takes two: with room for one only, it goes alone
            # rather than never.
            if cost > room and (take or gone):
                break
            room -= cost
            take += 1
        chosen = order[:take]
        renewed = tuple(tp for tp in chosen if tp in stale)
        self.pending = dict.fromkeys(order[take:])
        # Left out though the leader holds it (in the session, or to name
        # again whatever its state: `refetch`), at an older state.
        held = self.sent.keys() | self.drop
        self.stale = (stale - set(renewed)) | {tp for tp in order[take:] if tp in held}
        return {tp: named[tp] for tp in chosen}, (*gone, *renewed)

    def answered(
        self,
        session_id: int,
        named: dict[TopicPartition, PartitionFetch],
        forgotten: tuple[TopicPartition, ...],
    ) -> None:
        """The leader answered the fetch built from `named` and `forgotten`."""
        if self.session_id == NO_SESSION_ID:
            if session_id == NO_SESSION_ID and self.wants_session:
                self.refused(self.scanned_ms)
            self.sent = dict(named) if session_id != NO_SESSION_ID else {}
            self.session_id = session_id
            # Without a session the next fetch is full again: epoch 0 when
            # it asks for one.
            self.next_epoch = 1 if session_id != NO_SESSION_ID else INITIAL_SESSION_EPOCH
        else:
            for tp in forgotten:
                self.sent.pop(tp, None)
            self.sent.update(named)
            self.next_epoch = 1 if self.next_epoch >= 2**31 - 1 else self.next_epoch + 1
            if not self.pending and not self.stale:
                self.refusals = 0  # grown whole: the leader holds the session
        self.drop = set()

    def refetch(self, tp: TopicPartition) -> None:
        """Name (or forget) `tp` on the next fetch whatever its state."""
        if self.session_id != NO_SESSION_ID:
            self.sent.pop(tp, None)
            self.drop.add(tp)


class ReplicaFetcher:
    """The fetch sessions of one broker, one per leader it follows."""

    def __init__(
        self,
        broker_id: int,
        settings: FetcherSettings,
        partitions: Mapping[TopicPartition, Partition],
        transport: FetchTransport | None,
        *,
        work: LogWork,
        on_applied: Callable[[TopicPartition], None],
        lag_clock: Clock,
        stats: BrokerStats | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        # The replica manager's replicas (read only): who follows whom.
        self._partitions = partitions
        # None: this broker never fetches (tests of one broker).
        self._transport = transport
        self._work = work
        # Called after fetched data or a new high watermark was applied to a
        # partition (the replica manager wakes its long-polls).
        self._on_applied = on_applied
        self._lag_clock = lag_clock
        self._sessions: dict[int, asyncio.Task[None]] = {}
        # Partitions whose last fetch failed, left out of their session until
        # this lag_clock time (ms).
        self._retry_at: dict[TopicPartition, int] = {}
        # "Not the leader yet" answers in a row, by partition (the exponent
        # of its next back-off), and the timer ending its current back-off.
        self._not_leader_streak: dict[TopicPartition, int] = {}
        self._retry_timers: dict[TopicPartition, asyncio.TimerHandle] = {}
        self._running = False
        self._stats = stats
        # The leader's log end offset in its last answer for each partition
        # followed here: with the replica's own, Kafka's replica fetcher lag
        # (`lag`). Read and written on the event loop.
        self._leader_leo: dict[TopicPartition, int] = {}
        # Each running session's follower-side state, by leader broker.
        self._fetch_sessions: dict[int, _FollowerSession] = {}
        # The partitions followed from each leader as of the last `sync`,
        # `touch` or `forget` (each bumps `_generation`; every role or leader
        # change passes through `touch`), so a fetch walks neither every
        # replica of the broker nor every partition of its session.
        self._generation = 0
        self._followed: dict[int, tuple[int, dict[TopicPartition, Partition]]] = {}
        # By leader: the followed set, the partitions of it backing off, and
        # the set without them (`_fetchable`).
        self._fetchable_memo: dict[
            int,
            tuple[
                dict[TopicPartition, Partition],
                frozenset[TopicPartition],
                dict[TopicPartition, Partition],
            ],
        ] = {}

    @property
    def leaders(self) -> frozenset[int]:
        """Leader brokers with a session (running or ended)."""
        return frozenset(self._sessions)

    @property
    def needs_sync(self) -> bool:
        """A session ended on its own (its last partition left, or it
        crashed): `sync` starts it again if it is still wanted."""
        return any(task.done() for task in self._sessions.values())

    def start(self) -> None:
        self._running = True

    async def stop(self) -> None:
        self._running = False
        for timer in self._retry_timers.values():
            timer.cancel()
        self._retry_timers.clear()
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for task in sessions:
            task.cancel()
        for task in sessions:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def sync(self) -> None:
        """One session per leader of a partition this broker follows: end the
        others, start the missing ones (only once started, with a transport)."""
        self._generation += 1
        leaders = {
            p.leader_id
            for p in self._partitions.values()
            if p.role is Role.FOLLOWER and p.leader_id >= 0
        }
        for leader_id in list(self._sessions):
            if leader_id not in leaders:
                self._sessions.pop(leader_id).cancel()
        if not self._running or self._transport is None:
            return
        for leader_id in leaders:
            task = self._sessions.get(leader_id)
            if task is None or task.done():
                self._sessions[leader_id] = asyncio.create_task(
                    self._session(leader_id), name=f"replica-fetcher-{leader_id}"
                )
            else:
                self._interrupt_for_newcomers(leader_id)

    def _interrupt_for_newcomers(self, leader_id: int) -> None:
        """Cancel the long-poll in flight to `leader_id` when a partition now
        fetchable from it is not in that poll: the newcomer's first fetch is
        sent at once (the loop catches the fetch's cancel, `_fetch_loop`). One still
        backing off would not be fetched yet: it interrupts nothing."""
        session = self._fetch_sessions.get(leader_id)
        poll = session.poll if session is not None else None
        if session is None or session.polling is None or poll is None or poll.done():
            return
        fetchable = self._fetchable(leader_id, self._following(leader_id))
        if fetchable is session.polling or fetchable.keys() <= session.polling.keys():
            return
        # The fetch alone, never the session's task: a cancel of the task
        # could land at its next await instead (the fetch's answer already
        # in), inside the apply of that answer, leaving a storage job
        # running on with nobody waiting for it.
        poll.cancel()

    def touch(self, tp: TopicPartition) -> None:
        """`tp`'s fetch state moved outside an answer (a new leader epoch):
        its session names it on the next fetch, and a "not the leader yet"
        answer from its new leader starts at the short back-off again."""
        self._generation += 1
        self._not_leader_streak.pop(tp, None)
        for session in self._fetch_sessions.values():
            session.changed.add(tp)

    def forget(self, tp: TopicPartition) -> None:
        """A replica left this broker: drop what the sessions kept of it."""
        self._generation += 1
        self._retry_at.pop(tp, None)
        self._not_leader_streak.pop(tp, None)
        timer = self._retry_timers.pop(tp, None)
        if timer is not None:
            timer.cancel()
        self._leader_leo.pop(tp, None)

    def lag(self, part: Partition) -> int | None:
        """How many offsets `part`, followed here, was behind its leader's log
        end as of the leader's last answer (None: no answer yet, or not a
        follower). Kafka's FetcherLagMetrics ConsumerLag."""
        if part.role is not Role.FOLLOWER:
            return None
        leader_leo = self._leader_leo.get(part.tp)
        if leader_leo is None:
            return None
        return max(0, leader_leo - part.log.log_end_offset)

    # -- one session ----------------------------------------------------------------------

    def _following(self, leader_id: int) -> dict[TopicPartition, Partition]:
        """The partitions followed from `leader_id`, by partition; the same
        object while no role, leader or replica changed."""
        followed = self._followed.get(leader_id)
        if followed is None or followed[0] != self._generation:
            followed = (
                self._generation,
                {
                    tp: p
                    for tp, p in self._partitions.items()
                    if p.role is Role.FOLLOWER and p.leader_id == leader_id
                },
            )
            self._followed[leader_id] = followed
        return followed[1]

    def _fetchable(
        self, leader_id: int, parts: dict[TopicPartition, Partition]
    ) -> dict[TopicPartition, Partition]:
        """`parts` (followed from `leader_id`) without those backing off
        after a failed fetch: `parts` itself when none of them is, and the
        same object while the same ones are (a session compares all its
        partitions when this set changes, `_FollowerSession.build`)."""
        if not self._retry_at:
            return parts
        now = self._lag_clock()
        for tp in [tp for tp, at in self._retry_at.items() if at <= now]:
            del self._retry_at[tp]
        out = frozenset(tp for tp in self._retry_at if tp in parts)
        if not out:
            return parts
        memo = self._fetchable_memo.get(leader_id)
        if memo is not None and memo[0] is parts and memo[1] == out:
            return memo[2]
        kept = {tp: p for tp, p in parts.items() if tp not in out}
        self._fetchable_memo[leader_id] = (parts, out, kept)
        return kept

    def _backoff_left_s(self, parts: Iterable[TopicPartition]) -> float:
        """Seconds until the first of `parts` backing off may be fetched
        again (at least 1 ms, at most `backoff_ms`)."""
        ends = [self._retry_at[tp] for tp in parts if tp in self._retry_at]
        left = min(ends, default=self._lag_clock() + self.settings.backoff_ms) - self._lag_clock()
        return min(max(left, 1), self.settings.backoff_ms) / 1000

    def _sit_out(self, tp: TopicPartition, error: LograftError | None) -> None:
        """Leave `tp` out of its session after a failed fetch or apply: for
        `backoff_ms`, or after a "not the leader yet" answer for the short,
        doubling `not_leader_backoff_ms`, whose end wakes the session."""
        s = self.settings
        now = self._lag_clock()
        old = self._retry_timers.pop(tp, None)
        if old is not None:
            old.cancel()
        if not isinstance(error, NotLeaderOrFollowerError | UnknownLeaderEpochError):
            self._not_leader_streak.pop(tp, None)
            self._retry_at[tp] = now + s.backoff_ms
            return
        streak = self._not_leader_streak.get(tp, 0)
        self._not_leader_streak[tp] = streak + 1
        pause_ms = min(s.not_leader_backoff_ms << min(streak, 30), s.backoff_ms)
        at = self._retry_at[tp] = now + pause_ms
        self._retry_timers[tp] = asyncio.get_running_loop().call_later(
            pause_ms / 1000, self._backoff_over, tp, at
        )

    def _backoff_over(self, tp: TopicPartition, at: int) -> None:
        """`tp`'s short back-off ended (its timer): fetch it at once, not
        after the poll in flight to its leader."""
        self._retry_timers.pop(tp, None)
        if self._retry_at.get(tp) == at:
            # The timer may fire a hair before the lag clock reads `at`.
            del self._retry_at[tp]
        part = self._partitions.get(tp)
        if part is None or part.role is not Role.FOLLOWER or not self._running:
            return
        self._interrupt_for_newcomers(part.leader_id)

    def _request(
        self,
        named: dict[TopicPartition, PartitionFetch],
        forgotten: tuple[TopicPartition, ...],
        session: _FollowerSession,
        wait_ms: int,
    ) -> ReplicaFetchRequest:
        s = self.settings
        incremental = session.session_id != NO_SESSION_ID
        return ReplicaFetchRequest(
            replica_id=self.broker_id,
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=s.max_bytes,
            partition_max_bytes=s.partition_max_bytes,
            partitions=[
                FetchPartitionRequest(tp.topic, tp.partition, f) for tp, f in named.items()
            ],
            session_id=session.session_id,
            session_epoch=(
                session.next_epoch if incremental or session.wants_session else SESSIONLESS_EPOCH
            ),
            forgotten=tuple((tp.topic, tp.partition) for tp in forgotten),
        )

    async def _session(self, leader_id: int) -> None:
        """Every partition this broker follows from `leader_id`, until none is left."""
        session = self._fetch_sessions[leader_id] = _FollowerSession()
        try:
            await self._fetch_loop(leader_id, session)
        finally:
            if self._fetch_sessions.get(leader_id) is session:
                del self._fetch_sessions[leader_id]

    async def _fetch_loop(self, leader_id: int, session: _FollowerSession) -> None:
        assert self._transport is not None
        backoff = self.settings.backoff_ms / 1000
        failing = False  # logged once per streak of failed fetches, not per retry
        while self._running:
            following = self._following(leader_id)
            if not following:
                return
            parts = self._fetchable(leader_id, following)
            if not parts:
                # Every partition is backing off after an error: wait for
                # the first to be done (a back-off, not a sync point).
                await asyncio.sleep(self._backoff_left_s(following))
                continue
            limit = self.settings.request_partitions_max
            named, forgotten = session.build(
                parts, parts, self._lag_clock(), self.settings.session_rescan_ms, limit
            )
            wait_ms = session.wait_ms(self.settings.wait_max_ms, len(parts), limit)
            req = self._request(named, forgotten, session, wait_ms)
            timeout = wait_ms / 1000 + 5
            session.polling = parts
            poll = session.poll = asyncio.ensure_future(
                self._transport(leader_id, req.to_json(), timeout)
            )
            try:
                body = await poll
                answer = decode_answer(body)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not poll.cancelled() or (task is not None and task.cancelling()):
                    raise  # this task was cancelled (stop, or the leader unfollowed)
                # An interrupt (`_interrupt_for_newcomers`) cancelled the
                # fetch alone; the leader may or may not have seen it: start over.
                session.reset()
                continue
            except Exception as exc:
                if not failing:
                    log.warning("fetch from broker %d failed (retrying): %r", leader_id, exc)
                failing = True
                # The leader may have moved the session's epoch on without
                # this side seeing the answer: start over in full.
                session.reset()
                await asyncio.sleep(backoff)  # back-off between retries, not a sync point
                continue
            finally:
                session.polling = session.poll = None
            if failing:
                log.info("fetch from broker %d works again", leader_id)
                failing = False
            if answer.error is not None:
                # The session is gone or out of step: fetch in full now.
                log.debug("fetch session with broker %d: %s", leader_id, answer.error.message)
                if (
                    session.growing
                    and len(parts) > limit
                    and isinstance(answer.error, FetchSessionIdNotFoundError)
                ):
                    # Dropped as partitions joined it: without a session the
                    # next full fetches take the partitions in turns,
                    # where asking again would grow and lose it in a loop.
                    log.info(
                        "fetch session with broker %d dropped as it grew (%s): "
                        "fetching its %d partitions without a session, %d at a time",
                        leader_id,
                        answer.error.message,
                        len(parts),
                        limit,
                    )
                    session.refused(self._lag_clock())
                session.reset()
                continue
            session.answered(answer.session_id, named, forgotten)
            responses = answer.partitions
            if session.session_id != NO_SESSION_ID:
                # Only partitions of the session in the state the leader holds.
                # (Not one left for a later fetch to name or forget.)
                responses = [
                    r
                    for r in responses
                    if session.takes_answer(TopicPartition(r.topic, r.partition))
                ]
                for r in responses:
                    if r.error is not None or r.diverging is not None:
                        session.refetch(TopicPartition(r.topic, r.partition))
            if not responses:
                continue  # an idle long-poll's empty answer: nothing to apply
            session.changed.update(TopicPartition(r.topic, r.partition) for r in responses)
            try:
                await self._apply_responses(responses, leader_id)
            except Exception:
                # A bug or disk fault applying one response must not end the
                # session: nothing restarts it until the next metadata change,
                # so every partition it carries would silently fall out of ISR.
                log.exception("applying a fetch response from broker %d failed", leader_id)
                # No partition was set aside: pause the session instead.
                await asyncio.sleep(backoff)
            # Otherwise no pause, even when every partition failed: each sits
            # out (`_sit_out`), so the next fetch leaves it out (or waits
            # for its back-off when it was the last one) and cannot spin.

    async def _apply_responses(
        self, responses: list[FetchPartitionResponse], leader_id: int
    ) -> bool:
        """Apply `leader_id`'s answers; True when some partition's answer
        was applied. A partition that failed sits out of the session for a
        while (`_sit_out`); one that has another leader now is skipped (the
        old leader may not know yet)."""
        progressed = False
        todo: list[tuple[Partition, FetchPartitionResponse]] = []
        for r in responses:
            tp = TopicPartition(r.topic, r.partition)
            part = self._partitions.get(tp)
            if part is not None and part.role is Role.FOLLOWER and part.leader_id != leader_id:
                continue
            if part is None or part.role is not Role.FOLLOWER:
                # Its role changed without a `touch` (an apply that failed
                # midway): work out the followed sets again before the next
                # fetch, or the session would keep naming it.
                self._generation += 1
                continue
            if r.error is not None:
                log.debug("fetch of %s failed: %s", tp, r.error.message)
                self._sit_out(tp, r.error)
                continue
            self._leader_leo[tp] = r.log_end_offset
            todo.append((part, r))
        if not todo:
            return False
        outcomes = await self._apply_all(todo)
        # flush_policy = group_commit: the next fetch reports what is
        # fsynced, so it goes once what was just appended is (all of this
        # answer's partitions' commits at once).
        commits = [
            part.committer.sync()
            for (part, _r), exc in zip(todo, outcomes, strict=True)
            if exc is None and part.group_commit and part.committer is not None
        ]
        if commits:
            await asyncio.gather(*commits)
        for (part, r), exc in zip(todo, outcomes, strict=True):
            if exc is None:
                progressed = True
                if self._not_leader_streak:
                    self._not_leader_streak.pop(part.tp, None)
                if self._stats is not None and r.data:
                    self._stats.topic(part.tp.topic).replication_bytes_in += len(r.data)
                self._on_applied(part.tp)
                continue
            if part.role is not Role.FOLLOWER:
                continue  # it changed role while this answer was applied in a thread
            if isinstance(exc, LograftError):
                log.warning("could not apply fetched data of %s: %s", part.tp, exc.message)
            else:
                # A bug meeting this partition's data: the session's other
                # partitions in this response were still applied.
                log.warning("could not apply fetched data of %s: %r", part.tp, exc, exc_info=exc)
            self._sit_out(part.tp, None)
        return progressed

    async def _apply_all(
        self, todo: list[tuple[Partition, FetchPartitionResponse]]
    ) -> list[Exception | None]:
        """Apply each answer (`_apply_each`); per partition, what it raised or None.

        A partition whose apply is slow on its own (`_slow`: fsyncs or a walk
        of its log) gets a storage job of its own when there are several, so
        they run side by side on the `storage_threads_max` threads; the
        others go together in one job, inline while small. One job for all
        (as before) fsynced one partition after another while the session
        waited: each follower's first batch of a new leader epoch writes
        that partition's epoch checkpoint (two fsyncs, 15-20 ms on the
        shared VM), so after a leadership change, or while fresh partitions
        take their first records (`scripts/bench_scale.py`'s first 10 s),
        the answers, and the acks=all produces waiting on the next fetch,
        queued behind their sum."""
        slow = [i for i, (part, r) in enumerate(todo) if _slow(part, r)]
        if len(slow) < 2:
            inline = not slow and _inline_bytes(todo)
            return await self._work.run(functools.partial(_apply_each, todo), inline=inline)
        slow_set = set(slow)
        rest = [i for i in range(len(todo)) if i not in slow_set]
        groups = [[i] for i in slow]
        if rest:
            groups.append(rest)
        results = await asyncio.gather(
            *(
                self._work.run(
                    functools.partial(_apply_each, [todo[i] for i in group]),
                    # The last group (the others) holds no slow partition.
                    inline=group is rest and _inline_bytes([todo[i] for i in group]),
                )
                for group in groups
            )
        )
        outcomes: list[Exception | None] = [None] * len(todo)
        for group, result in zip(groups, results, strict=True):
            for i, outcome in zip(group, result, strict=True):
                outcomes[i] = outcome
        return outcomes


def _slow(part: Partition, r: FetchPartitionResponse) -> bool:
    """Whether applying `r` to `part` belongs in a storage thread on its own
    account: a truncation or a restart of the log (both rewrite checkpoints
    and walk the log's batch headers), an append `append_in_thread` sends
    there, or one that writes the leader-epoch checkpoint first (two fsyncs:
    each partition's first batch of a new leader epoch, which after a
    leadership change is every partition of the answer)."""
    if r.diverging is not None or r.log_start_offset > part.log.log_end_offset:
        return True
    return bool(r.data) and (
        append_in_thread(part.log.config, len(r.data)) or part.fetched_data_writes_epochs(r.data)
    )


def _inline_bytes(todo: Sequence[tuple[Partition, FetchPartitionResponse]]) -> bool:
    """Whether these answers bring at most INLINE_BYTES_MAX bytes in all (so
    appending them, none `_slow`, costs the loop less than a thread hop)."""
    return sum(len(r.data) for _part, r in todo) <= INLINE_BYTES_MAX


def _apply_each(
    todo: Sequence[tuple[Partition, FetchPartitionResponse]],
) -> list[Exception | None]:
    """Apply each answer to its partition (blocking; safe in a worker thread);
    per partition, what it raised or None. One partition's failure is its own."""
    out: list[Exception | None] = []
    for part, r in todo:
        try:
            part.apply_fetch_response(
                r.data,
                leader_high_watermark=r.high_watermark,
                leader_log_start_offset=r.log_start_offset,
                diverging=r.diverging,
            )
        except Exception as exc:
            out.append(exc)
        else:
            out.append(None)
    return out


__all__ = ["FetchTransport", "FetcherSettings", "ReplicaFetcher"]

"""The leader's replica fetch sessions (Kafka's KIP-227 FetchSessionCache).

A follower's full fetch with `session_epoch` 0 creates a session: an id, the
next epoch the follower must send (1, 2, ...), and each partition's cached
fetch state (`CachedPartition`: the follower's last `PartitionFetch` and what
it was last answered). Later fetches name only partitions whose fetch state
changed or that join, plus forgotten ones; the rest keep their cached state,
so the leader treats an omitted partition as a fetch at the same position.

Which partitions a fetch looks at: those it names, and those marked dirty
since (`mark`: the replica manager marks a partition whenever its data, high
watermark, leadership or ISR moves, the events that wake long-polls). A
long-poll waits on its own session's wake-up, not on every partition; a
high watermark move alone marks without waking it (`mark(wake=False)`: only
data ends a follower's long-poll), and what was marked so is looked at with
the next wake-up or at the long-poll's deadline. As a
safety net the replica manager's ISR check compares every clean partition's
cached leader state with the live one and marks any that moved unnoticed
(`ReplicaManager._sweep_sessions`, every `replica_fetch_session_sweep_ms`).

Every session id comes from the network, so the cache is bounded: at most
`sessions_max` sessions (least recently used evicted first) and
`partitions_max` cached partitions over all of them; a full fetch naming
more partitions than that is served without a session, and a session that
grows past it (with the other sessions' partitions) is dropped, evicting
only sessions not fetched for a minute (`IDLE_EVICT_MS`: a replica that
stopped following this leader leaves one behind); the fetch gets
FETCH_SESSION_ID_NOT_FOUND and the follower fetches in full. A follower
holds one session per leader, so a new session of a replica replaces that
replica's older one.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from lograft.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from lograft.protocol.fetch_wire import NO_SESSION_ID, PartitionFetch
from lograft.protocol.topic_partition import TopicPartition

# Kafka's session epochs wrap from the largest int32 back to 1.
_EPOCH_MAX = 2**31 - 1
# A session not fetched for this long makes room for one that grows, ms: a
# live follower fetches at least every long-poll (at most
# replica_fetch_serve_wait_max_ms, 5 s); Kafka's
# min.incremental.fetch.session.eviction.ms is 120 s.
IDLE_EVICT_MS = 60_000


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the follower's last fetch state and what
    the leader last answered for it (-1: not answered yet)."""

    fetch: PartitionFetch
    high_watermark: int = -1
    log_start_offset: int = -1
    # The leader's log end offset and epoch when this partition was last
    # evaluated (the safety net compares them with the live ones).
    log_end_offset: int = -1
    leader_epoch: int = -1
    # At that evaluation the follower was at the leader's log end with no
    # error, and it has not sent another fetch state since: while nothing
    # moves, each later fetch of the session finds it caught up again (the
    # ISR refresh records that without a fetch pass, and a high watermark
    # move is answered without a full serve).
    caught_up: bool = False


class FetchSession:
    """One follower's incremental fetch session with this leader."""

    __slots__ = (
        "_wake",
        "dirty",
        "id",
        "last_fetch_ms",
        "next_epoch",
        "partitions",
        "replica_id",
        "woken",
    )

    def __init__(self, session_id: int, replica_id: int, now_ms: int) -> None:
        self.id = session_id
        self.replica_id = replica_id
        self.next_epoch = 1
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        # Partitions that may have news for the follower since they were last
        # evaluated (only members of `partitions` count).
        self.dirty: set[TopicPartition] = set()
        self.last_fetch_ms = now_ms
        self._wake: asyncio.Future[None] | None = None
        # A mark since the last `take_dirty` asked to end the long-poll.
        self.woken = False

    def mark(self, tp: TopicPartition, *, wake: bool = True) -> None:
        """`tp` may have news. `wake=False`: news that cannot end a long-poll
        by itself (a high watermark move: only data does, min_bytes >= 1),
        looked at with the next partition that wakes it or at its deadline."""
        self.dirty.add(tp)
        if not wake:
            return
        self.woken = True
        fut = self._wake
        if fut is not None and not fut.done():
            fut.set_result(None)

    def take_dirty(self) -> list[TopicPartition]:
        out = [tp for tp in self.dirty if tp in self.partitions]
        self.dirty = set()
        self.woken = False
        return out

    async def wait_news(self, timeout_s: float) -> bool:
        """Wait until a partition of the session is marked with `wake`;
        False on timeout."""
        if self.woken:
            return True
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wake = fut
        try:
            # asyncio.timeout, not wait_for (see _Changes.wait_any).
            async with asyncio.timeout(timeout_s):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            if self._wake is fut:
                self._wake = None


class FetchSessionCache:
    """Sessions by id, bounded (see module doc)."""

    def __init__(
        self,
        sessions_max: int,
        partitions_max: int,
        on_remove: Callable[[FetchSession], None] | None = None,
        idle_evict_ms: int = IDLE_EVICT_MS,
    ) -> None:
        if sessions_max < 1 or partitions_max < 1:
            raise ValueError("fetch session limits must be positive")
        self.sessions_max = sessions_max
        self.partitions_max = partitions_max
        # A session not fetched for this long (ms) makes room for a growing
        # one (`update`).
        self.idle_evict_ms = idle_evict_ms
        # Told of a session just before it is dropped (evicted, replaced, out
        # of step or too large), while it still holds its partitions.
        self._on_remove = on_remove
        # Least recently used first.
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._by_replica: dict[int, FetchSession] = {}
        # Which sessions hold a partition, for `mark`.
        self._by_tp: dict[TopicPartition, set[FetchSession]] = {}
        self._size = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions_cached(self) -> int:
        return self._size

    def sessions(self) -> Iterator[FetchSession]:
        return iter(list(self._sessions.values()))

    def create(
        self, replica_id: int, fetches: Mapping[TopicPartition, PartitionFetch], now_ms: int
    ) -> FetchSession | None:
        """A new session for a full fetch (None: too large to cache)."""
        old = self._by_replica.get(replica_id)
        if old is not None:
            self._remove(old)
        if len(fetches) > self.partitions_max:
            return None
        while self._sessions and (
            len(self._sessions) >= self.sessions_max
            or self._size + len(fetches) > self.partitions_max
        ):
            self._evict_oldest()
        session = FetchSession(self._new_id(), replica_id, now_ms)
        for tp, fetch in fetches.items():
            session.partitions[tp] = CachedPartition(fetch)
            self._by_tp.setdefault(tp, set()).add(session)
        self._size += len(session.partitions)
        self._sessions[session.id] = session
        self._by_replica[replica_id] = session
        return session

    def lookup(self, session_id: int, epoch: int, replica_id: int, now_ms: int) -> FetchSession:
        """The session an incremental fetch names, moved to its next epoch.
        A wrong epoch drops the session (the follower starts a new one)."""
        session = self._sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            raise FetchSessionIdNotFoundError(
                f"no fetch session {session_id} for replica {replica_id}", session_id=session_id
            )
        if epoch != session.next_epoch:
            self._remove(session)
            raise InvalidFetchSessionEpochError(
                f"fetch session {session_id} expected epoch {session.next_epoch}, got {epoch}",
                session_id=session_id,
            )
        session.next_epoch = 1 if epoch >= _EPOCH_MAX else epoch + 1
        session.last_fetch_ms = max(session.last_fetch_ms, now_ms)
        self._sessions.move_to_end(session_id)
        return session

    def update(
        self,
        session: FetchSession,
        changed: Mapping[TopicPartition, PartitionFetch],
        forgotten: Iterable[TopicPartition],
    ) -> None:
        """Apply an incremental fetch's forgotten, then changed or added partitions."""
        for tp in forgotten:
            if session.partitions.pop(tp, None) is not None:
                self._size -= 1
                self._unindex(tp, session)
            session.dirty.discard(tp)
        for tp, fetch in changed.items():
            cached = session.partitions.get(tp)
            if cached is None:
                session.partitions[tp] = CachedPartition(fetch)
                self._by_tp.setdefault(tp, set()).add(session)
                self._size += 1
            else:
                cached.fetch = fetch
                # Decided for the fetch state it replaces: re-decided when
                # this one is served.
                cached.caught_up = False
        if self._size > self.partitions_max:
            self._evict_idle(session)
        if self._size > self.partitions_max:
            # Dropped itself rather than evicting other followers' sessions:
            # a follower of more partitions than one fetch names grows its
            # session over several fetches, and one the cache cannot hold
            # would otherwise evict every other session on its way to the
            # bound (replica_fetcher.py: it then fetches without a session).
            self._remove(session)
            raise FetchSessionIdNotFoundError(
                f"fetch session {session.id} grew past the {self.partitions_max} partitions "
                "the session cache holds over all sessions",
                session_id=session.id,
            )

    def holders(self, tp: TopicPartition) -> list[FetchSession]:
        """The sessions holding `tp`."""
        return list(self._by_tp.get(tp, ()))

    def mark(
        self, tp: TopicPartition, skip: FetchSession | None = None, *, wake: bool = True
    ) -> None:
        """`tp` may have news: every session holding it (but `skip`) looks at
        it next (`FetchSession.mark`)."""
        for session in self._by_tp.get(tp, ()):
            if session is not skip:
                session.mark(tp, wake=wake)

    def _evict_idle(self, growing: FetchSession) -> None:
        """Evict sessions not fetched for `idle_evict_ms` (a replica that
        stopped following this leader leaves its session behind), least
        recently used first, until `growing` fits."""
        for other in list(self._sessions.values()):
            if self._size <= self.partitions_max:
                return
            if other is not growing and growing.last_fetch_ms - other.last_fetch_ms >= (
                self.idle_evict_ms
            ):
                self._remove(other)
                self.evictions += 1

    def _evict_oldest(self) -> None:
        _, session = next(iter(self._sessions.items()))
        self._remove(session)
        self.evictions += 1

    def _remove(self, session: FetchSession) -> None:
        if session.id not in self._sessions:
            return
        if self._on_remove is not None:
            self._on_remove(session)
        del self._sessions[session.id]
        if self._by_replica.get(session.replica_id) is session:
            del self._by_replica[session.replica_id]
        for tp in session.partitions:
            self._unindex(tp, session)
        self._size -= len(session.partitions)

    def _unindex(self, tp: TopicPartition, session: FetchSession) -> None:
        holders = self._by_tp.get(tp)
        if holders is not None:
            holders.discard(session)
            if not holders:
                del self._by_tp[tp]

    def _new_id(self) -> int:
        while True:
            session_id = secrets.randbits(31)
            if session_id != NO_SESSION_ID and session_id not in self._sessions:
                return session_id


__all__ = ["CachedPartition", "FetchSession", "FetchSessionCache"]

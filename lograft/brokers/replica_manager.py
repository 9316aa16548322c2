"""The replicas this broker hosts, and everything that moves data between them.

- `apply_metadata` makes the local replicas match what the metadata assigns:
  creates logs, becomes leader or follower on a new leader epoch, stops and
  deletes replicas that moved away. `open_logs` first opens the logs it will
  add in a worker thread: creating or recovering a log costs fsyncs and index
  work (tens of ms each), and hundreds of them on the event loop (a wide
  topic, a restart after a crash) stall heartbeats until the broker is fenced.
- Produce appends on the leader and, for acks=all, waits until the high
  watermark passes the batch or `produce_timeout_ms` runs out.
- Consumer and replica fetches long-poll: they answer as soon as there is
  data (or `min_bytes` of it) or after `max_wait_ms`, never holding a buffer
  of their own: data is read from the log when they wake.
- Appends and reads run on the event loop while small, else in the storage
  threads (`log_work.py`: sizes, fsync, and the measurements behind them).
  A partition's appends keep their arrival order across the hop
  (`Partition.append_lane`), and its role changes wait for a write under way
  (`Partition` docstring), so the HW, the ISR and the producer state see the
  same sequence of appends as when all ran on the loop.
- Followers copy from their leaders through the `ReplicaFetcher`
  (replica_fetcher.py: one fetch session per leader broker), which this
  manager owns and re-syncs after an apply that changed a role or a leader.
  The transport that sends a fetch is injected, so this package knows
  nothing of HTTP.
- Leaders check their ISR every `isr_check_interval_ms`, looking only at
  partitions whose ISR inputs moved since they were last found settled
  (`check_isr`); every partition's change found in one check goes to the
  controller in one batched AlterPartition (at most
  `ALTER_PARTITION_BATCH_MAX` partitions per request, one change in flight
  per partition), through an injected callable.
- High watermarks are checkpointed to `replication-offset-checkpoint` every
  `hw_checkpoint_interval_ms` when one moved.

Costs that grow with the partition count stay off the event loop or in
proportion to what changed: `apply_metadata` reconciles only partitions
whose metadata changed since the last apply; the leader-epoch entries of new
leaderships are written by one worker thread per apply (`_flush_epochs`); a
broker returning after a restart sends its hundreds of ISR expansions as a
few requests, one metadata commit each.
- Role listeners (`add_role_listener`) hear of every replica that became
  leader, became follower or was removed, right after the change: the group
  coordinator loads and drops `__consumer_offsets` partitions this way.
- One replica's failure is that replica's alone: an exception while opening,
  creating or reconciling a replica (a log that does not open, a bug meeting
  one batch's content) marks that partition failed (`failed_replicas`, which
  the node's /readyz reports), is logged once, and the apply goes on with
  every other partition. A failed replica is tried again when its metadata
  changes (or the node restarts); one no longer wanted here is forgotten and
  its directory deleted, as any removed replica's.

Everything here runs on one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lograft import power_loss
from lograft.brokers.broker_stats import BrokerStats
from lograft.brokers.fetch_session_cache import CachedPartition, FetchSession, FetchSessionCache
from lograft.brokers.future_wait import wait_future
from lograft.brokers.group_commit import GroupCommitter
from lograft.brokers.log_work import LogWork, append_in_thread, read_in_thread
from lograft.brokers.partition import (
    Assignment,
    FollowerFetchResult,
    IsrProposal,
    Partition,
    PartitionSettings,
    Role,
    RoleMovedError,
    check_batch_count,
)
from lograft.brokers.remote_wait import remote_wait
from lograft.brokers.replica_fetch_bounds import within_bounds
from lograft.brokers.replica_fetcher import FetcherSettings, FetchTransport, ReplicaFetcher
from lograft.errors import (
    InvalidRequestError,
    LogClosedError,
    LograftError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.batch import max_producer_id
from lograft.protocol.fetch_wire import (
    INITIAL_SESSION_EPOCH,
    FetchPartitionResponse,
    PartitionFetch,
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
)
from lograft.protocol.produce_wire import Acks, AppendResult
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage import checkpoint
from lograft.storage.config import LogConfig, config_keys
from lograft.storage.handles import FilePool
from lograft.storage.log import CheckedAppend, Clock, Log, wall_clock_ms
from lograft.storage.maintenance import LogMaintainer
from lograft.typed import FieldError, Positive, Record

log = logging.getLogger(__name__)

HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
TOPIC_ID_FILE = "partition.metadata"

AlterPartitionFn = Callable[[TopicPartition, IsrProposal], Awaitable[Assignment | None]]
# The first producer id the cluster has not allocated (None: unknown).
ProducerIdEndFn = Callable[[], int | None]
# Returns once the metadata has moved on (a later image was applied).
MetadataChangedFn = Callable[[], Awaitable[object]]
# Many partitions' ISR changes in one request: per partition, the partition as
# the controller left it, or why it refused (missing: no answer, as refused).
AlterPartitionsFn = Callable[
    [Sequence[tuple[TopicPartition, IsrProposal]]],
    Awaitable[Mapping[TopicPartition, Assignment | LograftError]],
]

# Partitions per batched AlterPartition request; more changes go as several
# requests (the controller refuses above its ALTER_PARTITION_ITEMS_MAX).
ALTER_PARTITION_BATCH_MAX = 500
# Threads that flush and close the logs when the broker stops. Closing a
# written log fsyncs about seven files (the active segment's log and two
# indexes, two checkpoints and their directory); one after another, a
# broker's 2,000 logs after a load took longer than the 30 s a supervisor
# (scripts/bench_scale.py, local_cluster.py) waits after SIGTERM, and were
# killed before the clean-shutdown file was written. Concurrent fsyncs
# share the filesystem's journal commits.
LOG_CLOSE_THREADS = 16
# A follower fetch's partitions decided between two yields to the event loop
# (about 10-25 ms of loop time at ~10-25 us a partition).
SERVE_YIELD_EVERY = 1000
# Called with a replica right after it became leader or follower, or was
# stopped for removal (role STOPPED); must not block.
RoleListener = Callable[[Partition], None]


class BrokerSettings(Record):
    """`[broker]` in the node config; every value but one a positive integer."""

    # acks=all needs this many in-sync replicas (topic config may override).
    min_insync_replicas: Positive = 2
    # A follower not caught up for this long leaves the ISR, ms.
    replica_lag_time_max_ms: Positive = 10_000
    isr_check_interval_ms: Positive = 500
    # Follower fetch long-poll, ms, and sizes, bytes.
    replica_fetch_wait_max_ms: Positive = 500
    # Longest long-poll a leader grants a follower's fetch (whatever it asks), ms.
    replica_fetch_serve_wait_max_ms: Positive = 5_000
    # Also the most a leader answers a follower's fetch with, whatever the
    # fetch asks (a larger ask is served at these sizes).
    replica_fetch_max_bytes: Positive = 8 * 1024 * 1024
    replica_fetch_partition_max_bytes: Positive = 1024 * 1024
    # Partitions one follower fetch may name (and forget), partitions; a
    # leader refuses a fetch naming more (400), or one partition twice.
    replica_fetch_partitions_max: Positive = 200_000
    # Partitions a follower's fetch names (and forgets) at most, partitions:
    # one that follows more from a leader names the rest over its next
    # fetches (replica_fetcher.py). Keep it at most the leaders'
    # replica_fetch_partitions_max, and within [http] request_bytes_max
    # (at most 423 bytes a partition: 20,000 take at most 8.5 MB of the
    # default 16 MiB; a node whose bound holds fewer names as many as it
    # holds, node/config.py `fetches_within_requests`).
    replica_fetch_request_partitions_max: Positive = 20_000
    # Pause after a failed follower fetch, ms.
    replica_fetch_backoff_ms: Positive = 200
    # A follower partition's first pause after a "not the leader yet" fetch
    # answer (a failover's new leader that has not applied it), ms; doubles
    # with each such answer in a row up to replica_fetch_backoff_ms.
    replica_fetch_not_leader_backoff_ms: Positive = 10
    # How a follower sends its fetches to a leader: "websocket", one kept
    # WebSocket per leader (api/replica_stream.py; a leader that refuses it
    # is sent POSTs), or "http", a POST per fetch on a kept connection.
    replica_fetch_transport: Literal["websocket", "http"] = "websocket"
    # Incremental replica fetch sessions a leader caches (KIP-227), sessions;
    # the least recently used is evicted beyond this.
    replica_fetch_sessions_max: Positive = 64
    # Partitions cached over all those sessions, partitions (a follower's
    # full fetch naming more is served without a session).
    replica_fetch_session_partitions_max: Positive = 50_000
    # How often an ISR check also compares every clean partition of every
    # fetch session with the live leader state (the safety net for a change
    # that marked nothing), ms.
    replica_fetch_session_sweep_ms: Positive = 10_000
    # How long an acks=all produce waits for the ISR, ms.
    produce_timeout_ms: Positive = 30_000
    # Longest consumer fetch long-poll a client may ask for, ms.
    fetch_wait_max_ms: Positive = 30_000
    hw_checkpoint_interval_ms: Positive = 2_000
    # acks=all produce requests waiting on one partition at once.
    ack_waiters_max: Positive = 10_000
    # Record batches one produce request may carry for one partition.
    produce_batches_max: Positive = 1_000
    # Sealed-segment descriptors held open at once across all logs.
    max_open_files: Positive = 1024
    # A produce naming a producer id this broker's metadata does not show
    # allocated waits this long for the metadata to catch up before it is
    # refused (an id handed out by another broker a moment ago), ms.
    producer_id_wait_max_ms: Positive = 5_000
    # Threads for appends and reads too costly for the event loop (log_work.py).
    storage_threads_max: Positive = 4

    def __post_init__(self) -> None:
        if self.replica_fetch_request_partitions_max > self.replica_fetch_partitions_max:
            # Nodes share one config: peers would refuse every large fetch.
            raise FieldError(
                "replica_fetch_request_partitions_max",
                f"{self.replica_fetch_request_partitions_max} is above "
                f"broker.replica_fetch_partitions_max={self.replica_fetch_partitions_max}: "
                "leaders would refuse this node's fetches naming that many partitions",
            )


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """What the metadata says about one partition this broker hosts."""

    topic_id: str
    assignment: Assignment
    topic_config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConsumerRead:
    """One partition of a multi-partition consumer fetch (`consumer_fetch`)."""

    tp: TopicPartition
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ReplicaFailure:
    """Why a replica this broker should host is not working, and the metadata
    it failed with (it is tried again once that changes)."""

    meta: PartitionMeta
    reason: str


@dataclass(frozen=True, slots=True)
class FetchResult:
    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class _Changes:
    """Wakes long-polls when a partition's data or high watermark moves, and
    marks it dirty in the replica fetch sessions that hold it.

    Two kinds of waiter: replica long-polls (sessionless follower fetches),
    which want every append, and readers (consumer fetches), which can read
    only below the high watermark. An acks=all append leaves the HW where it
    was until the followers have fetched, so it wakes no reader (`appended`):
    waking them read nothing and parked them again, a wasted read and a
    task step on the leader's loop per append per parked consumer fetch,
    taken in the same loop turn as the followers' wake-ups that the produce
    waits for."""

    def __init__(self, sessions: FetchSessionCache) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._readers: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._sessions = sessions

    def notify(
        self,
        tp: TopicPartition,
        skip: FetchSession | None = None,
        *,
        hw_only: bool = False,
        appended: bool = False,
    ) -> None:
        """`hw_only`: only the high watermark moved, which wakes consumers'
        long-polls (it makes records readable) but not a replica session's
        (a follower's answer waits for data or its deadline either way).
        `appended`: only the log end moved (the HW did not): nothing new
        for readers."""
        self._sessions.mark(tp, skip, wake=not hw_only)
        _wake(self._waiters.pop(tp, ()))
        if not appended:
            _wake(self._readers.pop(tp, ()))

    async def wait_any(
        self, tps: Iterable[TopicPartition], timeout_s: float, *, reader: bool = False
    ) -> bool:
        """Wait until one of `tps` changes; False when `timeout_s` passed without
        one. `reader`: a consumer's long-poll, which an append below an unmoved
        high watermark does not wake."""
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(tps)
        table = self._readers if reader else self._waiters
        for tp in keys:
            table.setdefault(tp, set()).add(fut)
        try:
            # `fut` is this call's own, so the deadline may complete it
            # (notify skips done futures); future_wait.py says why not wait_for.
            return await wait_future(fut, timeout_s)
        finally:
            for tp in keys:
                s = table.get(tp)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del table[tp]


def _wake(futures: Iterable[asyncio.Future[None]]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        settings: BrokerSettings,
        *,
        log_defaults: LogConfig | None = None,
        alter_partition: AlterPartitionFn | None = None,
        alter_partitions: AlterPartitionsFn | None = None,
        fetch_transport: FetchTransport | None = None,
        ineligible_replicas: Callable[[], frozenset[int]] | None = None,
        producer_id_end: ProducerIdEndFn | None = None,
        metadata_changed: MetadataChangedFn | None = None,
        gc_freeze: bool = False,
        clock: Clock = wall_clock_ms,
        lag_clock: Clock = monotonic_ms,
        stats: BrokerStats | None = None,
    ) -> None:
        self.broker_id = broker_id
        # What the hot paths count for GET /metrics (None: metrics off).
        self.stats = stats
        self.data_dir = Path(data_dir)
        self.logs_dir = self.data_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        # Topic configs override these (the node's [log_defaults]).
        self.log_defaults = log_defaults or LogConfig()
        self.alter_partition = alter_partition
        # The batched form; without one, each change goes through `alter_partition`.
        self.alter_partitions = alter_partitions or (
            _one_by_one(alter_partition) if alter_partition is not None else None
        )
        # Brokers the metadata says are fenced or shutting down: never proposed
        # for an ISR (the controller would refuse every such proposal, and the
        # leader would send it again on every ISR check).
        self.ineligible_replicas = ineligible_replicas or frozenset
        # Producers' batches naming an id at or past this are refused (the
        # metadata's next unallocated producer id; None: not checked).
        self.producer_id_end: ProducerIdEndFn = producer_id_end or (lambda: None)
        # Without it, an id past the end is refused at once.
        self.metadata_changed = metadata_changed
        # Move every live object out of the cyclic GC's reach after an apply
        # that created replicas (a node process sets this; see _freeze_heap).
        self.gc_freeze = gc_freeze
        # `clock` stamps records and drives retention (wall time, as Kafka);
        # `lag_clock` measures durations (follower lag, fetch deadlines) and
        # must not jump when the wall clock is stepped, or a step forward
        # would drop every follower from the ISR at once.
        self.clock = clock
        self.lag_clock = lag_clock
        self.pool = FilePool(settings.max_open_files)
        self.maintainer = LogMaintainer(clock=clock, compactor=_compactor)
        self.partitions: dict[TopicPartition, Partition] = {}
        # The metadata each replica was last reconciled with: an apply skips
        # partitions whose metadata is this same (or an equal) object.
        self._applied: dict[TopicPartition, PartitionMeta] = {}
        # Replicas whose leader-epoch entry awaits its write by `_flush_epochs`.
        self._epochs_to_flush: set[Partition] = set()
        # Leaders an ISR check must look at: those whose ISR inputs moved
        # since they were last found settled (`Partition.isr_settled`).
        self._isr_watch: set[Partition] = set()
        # The high watermarks last written to the checkpoint file.
        self._hw_written: list[tuple[int | str, ...]] | None = None
        # lag_clock time of the last sweep of every fetch session.
        self._sessions_swept_ms = -(2**62)
        self._epoch_flush: asyncio.Task[None] | None = None
        # Set by `stop`: the epoch flush thread leaves the caches it has not
        # written yet to `close_logs`, which writes many at a time.
        self._epoch_flush_stop = threading.Event()
        # A role or leader changed since the fetcher was last synced (kept
        # across applies: one that raised midway must not lose the change).
        self._fetchers_stale = False
        # The topic configs each replica runs with, to notice changes.
        self._topic_configs: dict[TopicPartition, dict[str, Any]] = {}
        # Logs opened off the loop by `open_logs`, waiting for `apply_metadata`.
        self._opened: dict[TopicPartition, Log] = {}
        # Replicas wanted here that failed to open, create or reconcile.
        self._failed: dict[TopicPartition, ReplicaFailure] = {}
        # The leader's side of incremental replica fetches (KIP-227).
        self.fetch_sessions = FetchSessionCache(
            settings.replica_fetch_sessions_max,
            settings.replica_fetch_session_partitions_max,
            on_remove=self._session_ending,
        )
        self._changes = _Changes(self.fetch_sessions)
        self.work = LogWork(settings.storage_threads_max)
        # The follower side: one fetch session per leader this broker follows.
        self.fetcher = ReplicaFetcher(
            broker_id,
            FetcherSettings(
                wait_max_ms=settings.replica_fetch_wait_max_ms,
                max_bytes=settings.replica_fetch_max_bytes,
                partition_max_bytes=settings.replica_fetch_partition_max_bytes,
                request_partitions_max=settings.replica_fetch_request_partitions_max,
                backoff_ms=settings.replica_fetch_backoff_ms,
                not_leader_backoff_ms=settings.replica_fetch_not_leader_backoff_ms,
            ),
            self.partitions,
            fetch_transport,
            work=self.work,
            on_applied=self._changes.notify,
            lag_clock=lag_clock,
            stats=stats,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._hw_checkpoint = _read_hw_checkpoint(self.data_dir / HW_CHECKPOINT_FILE)
        self._running = False
        # From stop() on, metadata is no longer applied: a replica created
        # meanwhile would open its log (which clears the crash leftovers of
        # the logs being closed, their checkpoint .tmp files among them) and
        # never be closed.
        self._stopping = False
        self._role_listeners: list[RoleListener] = []

    def add_role_listener(self, listener: RoleListener) -> None:
        self._role_listeners.append(listener)

    def _role_changed(self, part: Partition) -> None:
        for listener in self._role_listeners:
            try:
                listener(part)
            except Exception:
                # A listener's bug must not leave the other replicas unapplied.
                log.exception("role listener failed for %s", part.tp)

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        self._running = True
        self._stopping = False
        self._epoch_flush_stop.clear()
        self.fetcher.start()
        self.maintainer.start()
        self._tasks = [
            asyncio.create_task(self._isr_loop(), name="isr-check"),
            asyncio.create_task(self._hw_checkpoint_loop(), name="hw-checkpoint"),
        ]

    async def stop(self) -> None:
        self._running = False
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await self.fetcher.stop()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        # A broker that took over hundreds of leaderships (its peers' controlled
        # shutdowns) may have as many epoch entries left to write, two fsyncs
        # each, one after another: `close_logs` writes them instead.
        self._epochs_to_flush.clear()
        self._epoch_flush_stop.set()
        if self._epoch_flush is not None:
            with contextlib.suppress(Exception):
                await self._epoch_flush
        self.maintainer.stop()
        for p in self.partitions.values():
            if p.committer is not None:
                await p.committer.close()
        # Writes under way finish first: stopping a replica takes its role
        # lock, and storage jobs still running (a follower's apply whose
        # session was cancelled: a truncation rewriting the recovery-point
        # checkpoint) end before the logs close, which write it too.
        await self.work.drain()
        self.write_hw_checkpoint()
        for p in self.partitions.values():
            if p.role is not Role.STOPPED:
                p.stop()
        logs = [p.log for p in self.partitions.values()]
        logs.extend(self._opened.values())
        self.partitions.clear()
        self._opened.clear()
        started = time.monotonic()
        await asyncio.to_thread(close_logs, logs, LOG_CLOSE_THREADS)
        log.info("closed %d logs in %.1f s", len(logs), time.monotonic() - started)
        self._applied.clear()
        self._epochs_to_flush.clear()
        self._isr_watch.clear()
        self.pool.close_all()

    # -- metadata -------------------------------------------------------------------

    async def open_logs(self, wanted: Mapping[TopicPartition, PartitionMeta]) -> None:
        """Open, in a worker thread, the logs of the replicas `wanted` would add.

        Call before `apply_metadata(wanted)`, which then takes them instead of
        opening them on the event loop. A log that fails to open here is left to
        `apply_metadata`, which tries again and marks the replica failed.
        Ignored once `stop` has begun."""
        if self._stopping:
            return
        new = {
            tp: meta
            for tp, meta in wanted.items()
            if tp not in self.partitions
            and tp not in self._opened
            and self.broker_id in meta.assignment.replicas
            and not self._failed_with(tp, meta)
        }
        if new:
            opened = await asyncio.to_thread(self._open_logs, new)
            if self._stopping:  # stop began meanwhile: it will not close these
                for target in opened.values():
                    target.close()
                return
            self._opened.update(opened)

    def _open_logs(self, new: Mapping[TopicPartition, PartitionMeta]) -> dict[TopicPartition, Log]:
        opened: dict[TopicPartition, Log] = {}
        for tp, meta in new.items():
            try:
                opened[tp] = self._open_log(tp, meta)
            except Exception as exc:
                # apply_metadata tries again and reports the replica failed
                # (logged once there, with the traceback).
                log.debug("opening the log of %s failed: %s", tp, exc)
        return opened

    def _open_log(self, tp: TopicPartition, meta: PartitionMeta) -> Log:
        """Blocking file work only (no replica state): safe in a worker thread."""
        directory = self.logs_dir / f"{tp.topic}-{tp.partition}"
        _claim_directory(directory, meta.topic_id)
        log_cfg, _ = self._configs(meta.topic_config, len(meta.assignment.replicas))
        return Log(directory, log_cfg, pool=self.pool, clock=self.clock)

    def apply_metadata(self, wanted: Mapping[TopicPartition, PartitionMeta]) -> None:
        """Make local replicas match the assignments that name this broker.

        Only partitions whose metadata differs from the last apply are
        reconciled (a replica's state changes only through reconciling or its
        own data path, so an unchanged assignment has nothing to redo): a
        metadata commit that moved one partition costs O(changed), not
        O(hosted), beyond one identity check per partition.

        A partition that raises is marked failed and the others go on (see
        the module docstring); this never raises for one partition's sake.
        Ignored once `stop` has begun."""
        if self._stopping:
            return
        now = self.lag_clock()
        for tp in [tp for tp in self.partitions if tp not in wanted]:
            self._remove_contained(tp)
            self._fetchers_stale = True
        for tp in [tp for tp in self._failed if tp not in wanted]:
            self._forget_failed(tp)
        created = 0
        for tp, meta in wanted.items():
            before = self._applied.get(tp)
            if before is meta or (before is not None and before == meta and tp in self.partitions):
                continue
            if self._failed_with(tp, meta):
                continue  # tried with this metadata already; again when it changes
            try:
                created += self._apply_one(tp, meta, now)
            except Exception as exc:
                self._mark_failed(tp, meta, exc)
            else:
                if tp in self._failed:
                    del self._failed[tp]
                    log.info("replica %s works again", tp)
        # Opened for an earlier view whose apply failed, and no longer wanted.
        for tp in [tp for tp in self._opened if tp not in self.partitions]:
            self._opened.pop(tp).close()
        if self._fetchers_stale or self.fetcher.needs_sync:
            self.fetcher.sync()
            self._fetchers_stale = False
        self._start_epoch_flush()
        if created and self.gc_freeze:
            _freeze_heap()

    def _apply_one(self, tp: TopicPartition, meta: PartitionMeta, now: int) -> int:
        """Reconcile one partition with its metadata; returns 1 if its replica
        was created here."""
        if self.broker_id not in meta.assignment.replicas:
            if tp in self.partitions:
                self._remove(tp)
                self._fetchers_stale = True
            if tp in self._failed:
                self._forget_failed(tp)
            return 0
        created = 0
        part = self.partitions.get(tp)
        if part is None:
            part = self._create(tp, meta)
            created = 1
        role, leader = part.role, part.leader_id
        self._update_configs(part, meta)
        self._reconcile(part, meta, now)
        self._applied[tp] = meta
        if role is not part.role or leader != part.leader_id:
            self._fetchers_stale = True
        if part.log.epochs.dirty:
            self._epochs_to_flush.add(part)
        return created

    def _failed_with(self, tp: TopicPartition, meta: PartitionMeta) -> bool:
        failure = self._failed.get(tp)
        return failure is not None and (failure.meta is meta or failure.meta == meta)

    def _mark_failed(self, tp: TopicPartition, meta: PartitionMeta, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        before = self._failed.get(tp)
        self._failed[tp] = ReplicaFailure(meta, reason)
        self._applied.pop(tp, None)
        if before is None or before.reason != reason:
            # Once per failure, with the traceback: retries with the same
            # outcome (a later metadata change) do not repeat it.
            log.error(
                "replica %s failed and is out of service until its metadata changes or the "
                "node restarts (every other replica goes on): %s",
                tp,
                reason,
                exc_info=exc,
            )

    def _forget_failed(self, tp: TopicPartition) -> None:
        """A failed replica no longer wanted here: drop it and its directory."""
        self._failed.pop(tp, None)
        if tp in self.partitions:
            return  # a reconcile failed; removing the replica deletes its log
        opened = self._opened.pop(tp, None)
        if opened is not None:
            opened.close()
        directory = self.logs_dir / f"{tp.topic}-{tp.partition}"
        try:
            if directory.is_dir():
                shutil.rmtree(directory)
            else:
                directory.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not delete %s of the failed replica %s: %s", directory, tp, exc)
        else:
            log.info("forgot the failed replica %s", tp)

    def failed_replicas(self) -> dict[str, str]:
        """Replicas wanted here that are out of service, with the reason."""
        return {str(tp): f.reason for tp, f in self._failed.items()}

    def _start_epoch_flush(self) -> None:
        """Write new leaderships' epoch entries in a worker thread, one at a time."""
        if not self._epochs_to_flush or not self._running:
            return
        if self._epoch_flush is not None and not self._epoch_flush.done():
            return  # the running flush takes the rest when it finishes
        self._epoch_flush = asyncio.create_task(self._flush_epochs(), name="epoch-flush")

    async def _flush_epochs(self) -> None:
        while self._epochs_to_flush:
            batch, self._epochs_to_flush = self._epochs_to_flush, set()
            await asyncio.to_thread(
                _flush_epoch_caches, [p.log for p in batch], self._epoch_flush_stop
            )

    def _create(self, tp: TopicPartition, meta: PartitionMeta) -> Partition:
        opened = self._opened.pop(tp, None)
        _, part_settings = self._configs(meta.topic_config, len(meta.assignment.replicas))
        target = opened if opened is not None else self._open_log(tp, meta)
        try:
            part = Partition(
                tp,
                target,
                self.broker_id,
                part_settings,
                high_watermark=self._hw_checkpoint.get(tp, 0),
            )
        except BaseException:
            target.close()  # its descriptors are this replica's, which failed
            raise
        # By name, not by the replica: a replica holding its committer
        # holding it would be cyclic garbage when removed.
        part.committer = GroupCommitter(
            part.log, self.work, functools.partial(self._became_durable, tp)
        )
        part.on_isr_input = self._isr_watch.add
        self.partitions[tp] = part
        if self.stats is not None:
            part.log.on_flush = self.stats.flush_seconds.observe
        self.maintainer.add(part.log, lambda: part.high_watermark)
        log.info("created replica %s: %s", tp, part.log.recovery.summary())
        return part

    def _became_durable(self, tp: TopicPartition, _durable_offset: int) -> None:
        """A group commit of `tp`'s log ended: as leader, the HW may move
        (which releases acks=all waiters); wake the long-polls it concerns."""
        part = self.partitions.get(tp)
        if part is not None and part.maybe_advance_high_watermark():
            self._changes.notify(tp)

    def _configs(
        self, topic_config: Mapping[str, Any], replication_factor: int
    ) -> tuple[LogConfig, PartitionSettings]:
        log_keys = set(config_keys())
        log_cfg = self.log_defaults.with_overrides(
            {k: v for k, v in topic_config.items() if k in log_keys}
        )
        if "min_insync_replicas" in topic_config:
            min_isr = int(topic_config["min_insync_replicas"])
        else:
            # The broker default never exceeds the topic's replication factor:
            # an RF-1 topic would otherwise refuse every acks=all produce and,
            # since the HW waits for min_insync_replicas holders, never show
            # acks=1 records to consumers either.
            min_isr = min(self.settings.min_insync_replicas, max(replication_factor, 1))
        return log_cfg, PartitionSettings(
            min_insync_replicas=min_isr,
            replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
            ack_waiters_max=self.settings.ack_waiters_max,
            produce_batches_max=self.settings.produce_batches_max,
        )

    def _update_configs(self, part: Partition, meta: PartitionMeta) -> None:
        """A topic config changed (PATCH .../configs): apply it to the live replica."""
        current = dict(meta.topic_config)
        if self._topic_configs.get(part.tp) == current:
            return
        first = part.tp not in self._topic_configs
        self._topic_configs[part.tp] = current
        if first:
            return  # just created with these configs
        log_cfg, settings = self._configs(current, len(meta.assignment.replicas))
        part.log.update_config(log_cfg)
        part.settings = settings
        log.info("%s: topic configs updated to %s", part.tp, current)

    def _reconcile(self, part: Partition, meta: PartitionMeta, now: int) -> None:
        a = meta.assignment
        if a.leader_epoch < part.leader_epoch:
            return  # a stale view; the newer one already applied
        same_term = a.leader_epoch == part.leader_epoch
        if a.leader == self.broker_id:
            if not (same_term and part.is_leader and a.partition_epoch <= part.partition_epoch):
                led, before = part.is_leader, part.isr
                part.become_leader(a, now)
                if led:
                    # The controller changed the ISR of a partition led here
                    # (it drops a fenced broker itself): a shrink or expand too.
                    self._count_isr_change(before, part.isr)
                self._role_changed(part)
            if part.group_commit and part.committer is not None:
                part.committer.kick()  # what it holds but has not fsynced (a restart)
        elif (
            not (same_term and part.role is Role.FOLLOWER)
            or a.partition_epoch > part.partition_epoch
        ):
            part.become_follower(a)
            self._role_changed(part)
        self._changes.notify(part.tp)
        self.fetcher.touch(part.tp)

    def _remove_contained(self, tp: TopicPartition) -> None:
        try:
            self._remove(tp)
        except Exception:
            log.exception("removing the replica %s failed; its files may remain", tp)

    def _remove(self, tp: TopicPartition) -> None:
        part = self.partitions.pop(tp)
        self._applied.pop(tp, None)
        self.fetcher.forget(tp)
        self._epochs_to_flush.discard(part)
        self._isr_watch.discard(part)
        self._topic_configs.pop(tp, None)
        self.maintainer.remove(part.log)
        if part.role is not Role.STOPPED:
            part.stop()
        self._role_changed(part)
        part.log.delete()
        self._hw_checkpoint.pop(tp, None)
        self._changes.notify(tp)
        log.info("deleted replica %s", tp)

    def raise_if_failed(self, tp: TopicPartition) -> None:
        """KAFKA_STORAGE_ERROR for a replica wanted here that is out of service
        (as Kafka answers for a partition of an offline log directory)."""
        failure = self._failed.get(tp)
        if failure is not None:
            raise StorageError(
                f"broker {self.broker_id} cannot serve its replica of {tp}: {failure.reason}",
                topic=tp.topic,
                partition=tp.partition,
            )

    def partition(self, tp: TopicPartition) -> Partition:
        part = self.partitions.get(tp)
        if part is None or part.role is Role.STOPPED:
            self.raise_if_failed(tp)
            raise UnknownTopicOrPartitionError(
                f"broker {self.broker_id} hosts no replica of {tp}",
                topic=tp.topic,
                partition=tp.partition,
            )
        return part

    # -- produce --------------------------------------------------------------------

    async def produce(
        self,
        tp: TopicPartition,
        data: bytes,
        acks: Acks,
        *,
        timeout_ms: int | None = None,
        checked: CheckedAppend | None = None,
    ) -> AppendResult:
        """Append as leader; acks=all waits for the ISR. `checked`: what the
        caller's record checks of `data` returned (`Partition.check_records`,
        off the event loop); only the batch headers' producer rules and the
        batches' sizes are checked again here."""
        if self.stats is None:
            return await self._produce(tp, data, acks, timeout_ms, checked)
        topic = self.stats.topic(tp.topic)
        topic.produce_requests += 1
        try:
            result = await self._produce(tp, data, acks, timeout_ms, checked)
        except BaseException:
            topic.produce_failed += 1
            raise
        return result

    async def _produce(
        self,
        tp: TopicPartition,
        data: bytes,
        acks: Acks,
        timeout_ms: int | None,
        checked: CheckedAppend | None,
    ) -> AppendResult:
        # Refuse at once what no wait below could help (and walk no more than
        # produce_batches_max headers looking for producer ids).
        self.partition(tp)
        check_batch_count(data, self.settings.produce_batches_max)
        id_end = await self._producer_id_end_for(data)
        part, result, hw_before = await self._append_as_leader(tp, data, acks, id_end, checked)
        if self.stats is not None and not result.duplicate:
            topic = self.stats.topic(tp.topic)
            topic.bytes_in += len(data)
            topic.records_in += result.last_offset - result.first_offset + 1
        if part.group_commit and part.committer is not None:
            part.committer.kick()
        self._changes.notify(tp, appended=part.high_watermark == hw_before)
        if acks is not Acks.ALL:
            return result
        waiter = part.wait_for_high_watermark(result.last_offset + 1)
        if waiter.done():
            return result  # the HW is there already (an ISR of one): no timer to arm
        timeout = (timeout_ms or self.settings.produce_timeout_ms) / 1000
        # A timeout or cancel completes the waiter (future_wait.py), which the
        # partition then skips, and drops from its heap.
        with remote_wait():
            confirmed = await wait_future(waiter, timeout)
        if not confirmed:
            raise RequestTimedOutError(
                f"{tp}: the in-sync replicas did not confirm offsets {result.first_offset}.."
                f"{result.last_offset} within {int(timeout * 1000)} ms; the records may or may "
                "not be committed",
                first_offset=result.first_offset,
                last_offset=result.last_offset,
            )
        return result

    async def _append_as_leader(
        self,
        tp: TopicPartition,
        data: bytes,
        acks: Acks,
        id_end: int | None,
        checked: CheckedAppend | None,
    ) -> tuple[Partition, AppendResult, int]:
        """`Partition.append_records` with its write in a storage thread when
        `append_in_thread` says so, in the partition's append lane; with the
        high watermark from before the append (whether it moved the HW)."""
        while True:
            part = self.partition(tp)
            # Free (the usual case), the lane is taken without yielding.
            async with part.append_lane:
                if self.partitions.get(tp) is not part:
                    continue  # replaced while this append waited its turn
                plan = part.prepare_append(data, acks, producer_id_end=id_end, checked=checked)
                # Before the log end moves: idle followers caught up at it are
                # recorded as of their sessions' last fetch.
                self._refresh_follower_states(part)
                hw_before = part.high_watermark
                inline = not plan.payload or not append_in_thread(
                    part.log.config, len(plan.payload)
                )
                try:
                    info = await self.work.run(
                        functools.partial(part.write_append, plan), inline=inline
                    )
                except RoleMovedError:
                    # The leadership changed while the write waited for its
                    # thread; nothing was written. Decide again: refused as
                    # a follower would refuse it, or written in the new epoch.
                    continue
                return part, part.finish_append(plan, info), hw_before

    async def _producer_id_end_for(self, data: bytes) -> int | None:
        """The producer id end to check `data` against. When a batch names an
        id at or past it, first wait (up to `producer_id_wait_max_ms`) for
        metadata that allocates it: another broker may have handed it out a
        moment ago, and its block reaches this broker's metadata a little
        later."""
        end = self.producer_id_end()
        if end is None or self.metadata_changed is None:
            return end
        # An unvalidated walk (bounds-checked); the append validates properly.
        top = max_producer_id(data)
        if top < end:
            return end
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.producer_id_wait_max_ms / 1000):
                while (end := self.producer_id_end()) is not None and top >= end:
                    await self.metadata_changed()
        return self.producer_id_end()

    # -- consumer fetch ----------------------------------------------------------------

    async def fetch(
        self,
        tp: TopicPartition,
        offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int = 1,
    ) -> FetchResult:
        """Long-poll: answer once `min_bytes` below the HW are there, or at the deadline.

        A read that may return more than INLINE_BYTES_MAX runs in a storage
        thread: reading 50 MiB of small batches walks ~500,000 batch headers,
        ~400 ms of event loop otherwise."""
        if self.stats is None:
            return await self._fetch(tp, offset, max_bytes, max_wait_ms, min_bytes)
        topic = self.stats.topic(tp.topic)
        topic.fetch_requests += 1
        try:
            got = await self._fetch(tp, offset, max_bytes, max_wait_ms, min_bytes)
        except BaseException:
            topic.fetch_failed += 1
            raise
        topic.bytes_out += len(got.data)
        return got

    async def _fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> FetchResult:
        wait_ms = min(max(max_wait_ms, 0), self.settings.fetch_wait_max_ms)
        deadline = self.lag_clock() + wait_ms
        while True:
            part = self.partition(tp)
            inline = not read_in_thread(_consumer_readable(part, offset, max_bytes))
            try:
                data = await self.work.run(
                    functools.partial(part.read_for_consumer, offset, max_bytes), inline=inline
                )
            except LogClosedError:
                if self.partitions.get(tp) is part:
                    raise
                continue  # removed while the read waited for its thread: look again
            remaining = deadline - self.lag_clock()
            if len(data) >= min_bytes or remaining <= 0:
                return FetchResult(
                    data, part.high_watermark, part.log.log_start_offset, part.log.log_end_offset
                )
            with remote_wait():
                await self._changes.wait_any([tp], remaining / 1000, reader=True)

    async def consumer_fetch(
        self, reads: Sequence[ConsumerRead], *, max_wait_ms: int, max_bytes: int
    ) -> list[FetchPartitionResponse]:
        """`fetch` for many partitions in one long-poll: answer once one of them has
        data below its high watermark or an error, or at the deadline.

        At most `max_bytes` in all, in the order of `reads` (the first partition
        with data may exceed it by one batch, as in KIP-74); the ones after the
        budget ran out answer without data. An error is per partition.
        """
        wait_ms = min(max(max_wait_ms, 0), self.settings.fetch_wait_max_ms)
        deadline = self.lag_clock() + wait_ms
        tps = {r.tp for r in reads}
        while True:
            out = await self._serve_consumer_reads(reads, max_bytes)
            remaining = deadline - self.lag_clock()
            if remaining <= 0 or any(p.data or p.error is not None for p in out):
                return self._count_consumer_reads(out)
            with remote_wait():
                changed = await self._changes.wait_any(tps, remaining / 1000, reader=True)
            if not changed:
                return self._count_consumer_reads(out)

    def _count_consumer_reads(
        self, out: list[FetchPartitionResponse]
    ) -> list[FetchPartitionResponse]:
        if self.stats is not None:
            for p in out:
                topic = self.stats.topic(p.topic)
                topic.fetch_requests += 1
                if p.error is not None:
                    topic.fetch_failed += 1
                topic.bytes_out += len(p.data)
        return out

    async def _serve_consumer_reads(
        self, reads: Sequence[ConsumerRead], max_bytes: int
    ) -> list[FetchPartitionResponse]:
        """Every read's answer; the reads run inline or, when they may bring
        more than INLINE_BYTES_MAX bytes, in one storage-thread job."""
        hosted: list[Partition | LograftError] = []
        readable = 0
        for r in reads:
            try:
                part = self.partition(r.tp)
            except LograftError as exc:
                hosted.append(exc)
                continue
            hosted.append(part)
            if readable <= max_bytes:
                readable += _consumer_readable(part, r.offset, r.max_bytes)
        got = await self.work.run(
            functools.partial(_read_for_consumers, reads, hosted, max_bytes),
            inline=not read_in_thread(min(readable, max_bytes)),
        )
        return [
            self._consumer_answer(r.tp, part, data)
            for r, part, data in zip(reads, hosted, got, strict=True)
        ]

    def _consumer_answer(
        self, tp: TopicPartition, part: Partition | LograftError, data: bytes | LograftError
    ) -> FetchPartitionResponse:
        if isinstance(part, LograftError):
            return _error_answer(tp, part)
        if isinstance(data, LograftError):
            return _error_answer(tp, self._error_now(tp, data))
        log = part.log
        return FetchPartitionResponse(
            tp.topic,
            tp.partition,
            part.high_watermark,
            log.log_start_offset,
            log.log_end_offset,
            data,
        )

    def _error_now(self, tp: TopicPartition, error: LograftError) -> LograftError:
        """A read's error, or, when it found its log closed because the
        replica was removed while the read waited for its thread, the error a
        read arriving now gets (as when every read ran on the loop)."""
        if isinstance(error, LogClosedError):
            try:
                self.partition(tp)
            except LograftError as now:
                return now
        return error

    # -- replica fetch (leader side) ------------------------------------------------------

    async def replica_fetch(self, req: ReplicaFetchRequest) -> ReplicaFetchAnswer:
        """A follower's fetch: sessionless, a full one creating a session, or
        an incremental one (fetch_session_cache.py)."""
        req = within_bounds(
            req,
            max_bytes=self.settings.replica_fetch_max_bytes,
            partition_max_bytes=self.settings.replica_fetch_partition_max_bytes,
            partitions_max=self.settings.replica_fetch_partitions_max,
        )
        wait_ms = min(max(req.max_wait_ms, 0), self.settings.replica_fetch_serve_wait_max_ms)
        now = self.lag_clock()
        deadline = now + wait_ms
        if req.incremental:
            try:
                session = self.fetch_sessions.lookup(
                    req.session_id, req.session_epoch, req.replica_id, now
                )
                self.fetch_sessions.update(
                    session,
                    {TopicPartition(p.topic, p.partition): p.fetch for p in req.partitions},
                    [TopicPartition(t, n) for t, n in req.forgotten],
                )
            except LograftError as exc:
                return ReplicaFetchAnswer([], error=exc)
            named = [TopicPartition(p.topic, p.partition) for p in req.partitions]
            return await self._session_fetch(req, session, named, deadline)
        if req.session_epoch == INITIAL_SESSION_EPOCH:
            fetches = {TopicPartition(p.topic, p.partition): p.fetch for p in req.partitions}
            created = self.fetch_sessions.create(req.replica_id, fetches, now)
            if created is not None:
                return await self._session_fetch(req, created, list(fetches), deadline)
        return ReplicaFetchAnswer(await self._sessionless_fetch(req, deadline))

    async def _sessionless_fetch(
        self, req: ReplicaFetchRequest, deadline: int
    ) -> list[FetchPartitionResponse]:
        while True:
            out = await self._serve_replica_fetch(req)
            total = sum(len(p.data) for p in out)
            remaining = deadline - self.lag_clock()
            urgent = any(p.error is not None or p.diverging is not None for p in out)
            if total >= req.min_bytes or urgent or remaining <= 0:
                self._count_replication_out(out)
                return out
            tps = [TopicPartition(p.topic, p.partition) for p in req.partitions]
            with remote_wait():
                changed = await self._changes.wait_any(tps, remaining / 1000)
            if not changed:
                # Nothing these partitions' data, HW or leadership depend on
                # changed (each such change notifies): the answer served on
                # arrival still holds, so do not walk every partition again.
                return out

    async def _session_fetch(
        self,
        req: ReplicaFetchRequest,
        session: FetchSession,
        named: list[TopicPartition],
        deadline: int,
    ) -> ReplicaFetchAnswer:
        """Serve a session's named and dirty partitions, answer those with
        news; long-poll on the session's own wake-up while there is none."""
        news: dict[TopicPartition, FetchPartitionResponse] = {}
        look = list(dict.fromkeys([*named, *session.take_dirty()]))
        while True:
            if look:
                for tp, answer in await self._session_round(req, session, look):
                    news[tp] = answer
            total = sum(len(p.data) for p in news.values())
            urgent = any(p.error is not None or p.diverging is not None for p in news.values())
            remaining = deadline - self.lag_clock()
            if total >= req.min_bytes or urgent or remaining <= 0:
                break
            with remote_wait():
                woken = await session.wait_news(remaining / 1000)
            look = session.take_dirty()
            if not woken:
                # The deadline: answer the news marked without a wake-up
                # (high watermark moves) too.
                if look:
                    for tp, answer in await self._session_round(req, session, look):
                        news[tp] = answer
                break
        out = list(news.values())
        self._count_replication_out(out)
        return ReplicaFetchAnswer(out, session.id)

    async def _session_round(
        self, req: ReplicaFetchRequest, session: FetchSession, tps: list[TopicPartition]
    ) -> list[tuple[TopicPartition, FetchPartitionResponse]]:
        """Serve `tps` at their cached fetch states; those with news for the
        follower, and the cache updated to what they are answered."""
        out: list[tuple[TopicPartition, FetchPartitionResponse]] = []
        cached: list[tuple[TopicPartition, CachedPartition]] = []
        now = self.lag_clock()
        for tp in tps:
            c = session.partitions.get(tp)
            if c is None:
                continue
            unmoved = self._unmoved_answer(session, tp, c, now) if c.caught_up else None
            if unmoved is None:
                cached.append((tp, c))
            elif unmoved.high_watermark != c.high_watermark:
                out.append((tp, unmoved))
                c.high_watermark = unmoved.high_watermark
        if not cached:
            return out
        answers = await self._serve_fetches(
            req.replica_id,
            [(tp, c.fetch) for tp, c in cached],
            req.max_bytes,
            req.partition_max_bytes,
            session,
        )
        # Only then did the byte budget leave data unread (marked below for
        # the next fetch; a read that found nothing must not spin the poll).
        read_some = any(r.data for r in answers)
        for (tp, c), r in zip(cached, answers, strict=True):
            ok = r.error is None and r.diverging is None
            if (
                r.data
                or not ok
                or r.high_watermark != c.high_watermark
                or r.log_start_offset != c.log_start_offset
            ):
                out.append((tp, r))
            c.high_watermark = r.high_watermark
            c.log_start_offset = r.log_start_offset
            c.log_end_offset = r.log_end_offset
            part = self.partitions.get(tp)
            c.leader_epoch = part.leader_epoch if part is not None else -1
            c.caught_up = ok and c.fetch.fetch_offset >= r.log_end_offset
            if read_some and ok and not r.data and c.fetch.fetch_offset < r.log_end_offset:
                session.mark(tp)  # data the byte budget left for the next fetch
        return out

    def _unmoved_answer(
        self, session: FetchSession, tp: TopicPartition, c: CachedPartition, now: int
    ) -> FetchPartitionResponse | None:
        """What a full serve would answer `tp`, worked out without one, when
        nothing that serve decides from moved since the session last looked:
        the follower was then at the log end with no error and has not
        fetched anew (`caught_up`), it is in the ISR, and the leader's epoch,
        log end and log start are those it was answered with. Then the fetch
        decision is OK, there is nothing to read, and only the high watermark
        can differ (moved by another follower's fetch): the HW-only news that
        make up about half of what a loaded leader answers its followers.
        The follower's state is still recorded as the full serve records it.
        None: serve `tp` in full."""
        part = self.partitions.get(tp)
        if part is None or part.role is not Role.LEADER or part.leader_epoch != c.leader_epoch:
            return None
        leo = part.log.log_end_offset
        start = part.log.log_start_offset
        if leo != c.log_end_offset or start != c.log_start_offset:
            return None
        if session.replica_id not in part.isr:
            return None  # a full serve reports it to the ISR check
        try:
            part.tracker.on_fetch(
                session.replica_id, c.fetch.fetch_offset, leo, now, c.fetch.durable_offset
            )
        except (LograftError, ValueError):
            return None
        if part.maybe_advance_high_watermark():
            self._changes.notify(tp, skip=session, hw_only=True)
        return FetchPartitionResponse(tp.topic, tp.partition, part.high_watermark, start, leo)

    def _refresh_follower_states(self, part: Partition) -> None:
        """An omitted partition is a fetch at its cached position: for each
        session holding `part` clean, whose follower was at the leader's log
        end when last looked at, record it caught up as of the session's
        last fetch. Called before an append moves the log end (only from
        then on does a follower's last caught-up time matter: one at the log
        end is in sync however long ago it fetched), so idle partitions cost
        nothing between appends."""
        if part.role is not Role.LEADER:
            return
        for session in self.fetch_sessions.holders(part.tp):
            c = session.partitions.get(part.tp)
            if c is not None and part.tp not in session.dirty:
                self._refresh_one(session, part.tp, c, part)

    def _session_ending(self, session: FetchSession) -> None:
        """A session is dropped: what it alone knew (its idle followers were
        caught up as of its last fetch) goes into the follower states, as a
        fetch would have put it, before the follower's next full fetch."""
        for tp, c in session.partitions.items():
            if tp not in session.dirty:
                self._refresh_one(session, tp, c, self.partitions.get(tp))

    def _sweep_sessions(self, now: int) -> None:
        """The safety net, every `replica_fetch_session_sweep_ms`: mark any
        clean session partition whose leader state moved without a
        notification, and refresh the follower states of the others."""
        if now - self._sessions_swept_ms < self.settings.replica_fetch_session_sweep_ms:
            return
        self._sessions_swept_ms = now
        for session in self.fetch_sessions.sessions():
            for tp, c in session.partitions.items():
                if tp not in session.dirty:
                    self._refresh_one(session, tp, c, self.partitions.get(tp))

    def _refresh_one(
        self, session: FetchSession, tp: TopicPartition, c: CachedPartition, part: Partition | None
    ) -> None:
        if c.log_end_offset < 0:
            return
        if (
            part is None
            or part.role is not Role.LEADER
            or part.leader_epoch != c.leader_epoch
            or part.log.log_end_offset != c.log_end_offset
            or part.high_watermark != c.high_watermark
            or part.log.log_start_offset != c.log_start_offset
        ):
            session.mark(tp)
            return
        if not c.caught_up:
            return
        try:
            part.tracker.on_fetch(
                session.replica_id,
                c.fetch.fetch_offset,
                c.log_end_offset,
                session.last_fetch_ms,
                c.fetch.durable_offset,
            )
        except (LograftError, ValueError):
            session.mark(tp)

    def _count_replication_out(self, out: list[FetchPartitionResponse]) -> None:
        if self.stats is None:
            return
        for p in out:
            if p.data:
                self.stats.topic(p.topic).replication_bytes_out += len(p.data)

    async def _serve_replica_fetch(self, req: ReplicaFetchRequest) -> list[FetchPartitionResponse]:
        return await self._serve_fetches(
            req.replica_id,
            [(TopicPartition(p.topic, p.partition), p.fetch) for p in req.partitions],
            req.max_bytes,
            req.partition_max_bytes,
            None,
        )

    async def _serve_fetches(
        self,
        replica_id: int,
        fetches: list[tuple[TopicPartition, PartitionFetch]],
        max_bytes: int,
        partition_max_bytes: int,
        session: FetchSession | None,
    ) -> list[FetchPartitionResponse]:
        """Each partition's answer is decided on the loop (fencing,
        divergence, the follower's progress and the HW it moves); the reads
        then run inline or, when they may bring more than INLINE_BYTES_MAX
        bytes, in one storage-thread job."""
        now = self.lag_clock()
        decided: list[tuple[Partition, FollowerFetchResult] | LograftError] = []
        readable = 0
        yielded = False
        for i, (tp, fetch) in enumerate(fetches):
            if i and not i % SERVE_YIELD_EVERY:
                # A full fetch may name tens of thousands of partitions: let
                # the loop serve others between slices (each partition is
                # decided on its own; a change meanwhile marks it again, and
                # the answers are checked against leadership moves below).
                await asyncio.sleep(0)
                yielded = True
                now = self.lag_clock()
            try:
                part = self.partition(tp)
                hw_before = part.high_watermark
                res = part.serve_follower_fetch(replica_id, fetch, now)
            except LograftError as exc:
                decided.append(exc)
                continue
            decided.append((part, res))
            if res.read_from >= 0 and readable <= max_bytes:
                readable += part.log.readable_bytes(res.read_from, partition_max_bytes)
            # Wake long-polls only when this fetch moved the HW (acks=all waiters
            # are released by the partition itself). Waking on every fetch made
            # two followers' idle long-polls on one leader wake each other in a
            # loop: each re-served fetch woke the other's (busy CPU when idle).
            # This fetch's own session answers the new HW now.
            if part.high_watermark != hw_before:
                self._changes.notify(tp, skip=session, hw_only=True)
        inline = not read_in_thread(min(readable, max_bytes))
        got = await self.work.run(
            functools.partial(_read_for_followers, decided, max_bytes, partition_max_bytes),
            inline=inline,
        )
        # Decided and read in one step of the loop (inline, no yield): no
        # leadership can have moved between; otherwise each answer is checked.
        one_step = inline and not yielded
        return [
            self._follower_answer(tp, answer, data, one_step)
            for (tp, _fetch), answer, data in zip(fetches, decided, got, strict=True)
        ]

    def _follower_answer(
        self,
        tp: TopicPartition,
        answer: tuple[Partition, FollowerFetchResult] | LograftError,
        data: bytes | LograftError,
        one_step: bool,
    ) -> FetchPartitionResponse:
        if isinstance(answer, LograftError):
            return _error_answer(tp, answer)
        part, res = answer
        if not one_step:
            try:
                # The leadership may have moved while the read ran in its
                # thread or the loop served others: then answer as a fetch
                # arriving now would be, not with bytes of a log that is no
                # longer this leader's.
                self.partition(tp)
                part.require_leader_in(res.leader_epoch)
            except LograftError as exc:
                return _error_answer(tp, exc)
        if isinstance(data, LograftError):
            return _error_answer(tp, self._error_now(tp, data))
        return FetchPartitionResponse(
            tp.topic,
            tp.partition,
            res.high_watermark,
            res.log_start_offset,
            res.log_end_offset,
            data,
            res.diverging,
            res.error,
        )

    # -- ISR maintenance ---------------------------------------------------------------------

    async def _isr_loop(self) -> None:
        interval = self.settings.isr_check_interval_ms / 1000
        while self._running:
            await asyncio.sleep(interval)  # periodic check, as Kafka's isr-expiration task
            self.check_isr(self.ineligible_replicas())

    def check_isr(self, ineligible: frozenset[int] = frozenset()) -> list[asyncio.Task[None]]:
        """Propose ISR changes for leaders that need one; returns the send tasks
        (one per batch of at most `ALTER_PARTITION_BATCH_MAX` partitions).

        Only watched leaders are looked at (`_isr_watch`: those whose ISR
        inputs moved since they were last found settled), so a check costs
        in proportion to the partitions with a lagging, joining or changing
        replica, not to the partitions led here."""
        now = self.lag_clock()
        self._sweep_sessions(now)
        if self.alter_partitions is None:
            return []
        changes: list[tuple[Partition, IsrProposal]] = []
        # In partition order, so one check's batches are the same whatever
        # order the events came in. Emptied in place: every replica holds
        # this set's `add` (`Partition.on_isr_input`).
        watched = sorted(self._isr_watch, key=_by_tp)
        self._isr_watch.clear()
        for part in watched:
            if self.partitions.get(part.tp) is not part:
                continue  # removed or replaced since it was watched
            before = part.isr
            proposal = part.isr_change(now, ineligible)
            if proposal is not None:
                # Kafka logs every ISR shrink and expand: a shrink is the first
                # sign of a slow follower, and tests read it to explain one.
                log.info("ISR of %s: proposing %s -> %s", part.tp, list(before), list(proposal.isr))
                changes.append((part, proposal))
            elif not part.isr_settled():
                self._isr_watch.add(part)  # a follower behind, or one outside the ISR
        return [
            asyncio.create_task(self._send_isr(changes[i : i + ALTER_PARTITION_BATCH_MAX]))
            for i in range(0, len(changes), ALTER_PARTITION_BATCH_MAX)
        ]

    async def _send_isr(self, changes: list[tuple[Partition, IsrProposal]]) -> None:
        """One batched AlterPartition; every partition's in-flight change ends
        with the answer, whatever happens to the request."""
        assert self.alter_partitions is not None
        answers: Mapping[TopicPartition, Assignment | LograftError] = {}
        try:
            answers = await self.alter_partitions([(part.tp, prop) for part, prop in changes])
        except LograftError as exc:
            log.info("AlterPartition of %d partitions refused: %s", len(changes), exc.message)
        except Exception:
            log.exception("AlterPartition of %d partitions failed", len(changes))
        finally:
            for part, _proposal in changes:
                answer = answers.get(part.tp)
                if isinstance(answer, LograftError):
                    log.info("AlterPartition of %s refused: %s", part.tp, answer.message)
                before = part.isr
                part.isr_change_done(answer if isinstance(answer, Assignment) else None)
                self._count_isr_change(before, part.isr)
                self._changes.notify(part.tp)

    def _count_isr_change(self, before: tuple[int, ...], after: tuple[int, ...]) -> None:
        """Kafka's IsrShrinksPerSec and IsrExpandsPerSec, for a partition led
        here: the ISR changed by an AlterPartition the controller accepted,
        or by the controller itself (a fenced broker dropped). One change may
        do both (one replica out, another in)."""
        if self.stats is None or before == after:
            return
        if set(before) - set(after):
            self.stats.isr_shrinks += 1
        if set(after) - set(before):
            self.stats.isr_expands += 1

    # -- checkpoints ---------------------------------------------------------------------------

    async def _hw_checkpoint_loop(self) -> None:
        interval = self.settings.hw_checkpoint_interval_ms / 1000
        while self._running:
            await asyncio.sleep(interval)  # periodic, as Kafka's replica.high.watermark.checkpoint
            try:
                await self.checkpoint_moved_hws()
            except OSError:
                log.exception("could not write the high-watermark checkpoint")

    async def checkpoint_moved_hws(self) -> bool:
        """Write the high-watermark checkpoint in a worker thread if a high
        watermark moved (or a replica came or went) since the last write;
        True if written. The entries are read on the loop, where the
        replicas change; an idle broker's checkpoint is already on disk, so
        it costs no file write and no fsync each interval."""
        entries = self._hw_entries()
        if entries == self._hw_written:
            return False
        await asyncio.to_thread(self._write_hw_entries, entries)
        return True

    def _hw_entries(self) -> list[tuple[int | str, ...]]:
        return [(tp.topic, tp.partition, p.high_watermark) for tp, p in self.partitions.items()]

    def _write_hw_entries(self, entries: list[tuple[int | str, ...]]) -> None:
        checkpoint.write_entries(self.data_dir / HW_CHECKPOINT_FILE, entries)
        self._hw_written = entries

    def write_hw_checkpoint(self) -> None:
        self._write_hw_entries(self._hw_entries())

    # -- views ---------------------------------------------------------------------------------

    def leader_for(self, tp: TopicPartition) -> int:
        part = self.partitions.get(tp)
        return -1 if part is None else part.leader_id


def _by_tp(part: Partition) -> TopicPartition:
    return part.tp


def _error_answer(tp: TopicPartition, error: LograftError) -> FetchPartitionResponse:
    return FetchPartitionResponse(tp.topic, tp.partition, -1, -1, -1, error=error)


def _consumer_readable(part: Partition, offset: int, max_bytes: int) -> int:
    """At most how many bytes a consumer read of `part` from `offset` brings
    (nothing at or past the HW, which it never reads past)."""
    if offset >= part.high_watermark:
        return 0
    return part.log.readable_bytes(offset, max_bytes)


def _read_for_consumers(
    reads: Sequence[ConsumerRead], hosted: Sequence[Partition | LograftError], max_bytes: int
) -> list[bytes | LograftError]:
    """Each read's bytes, at most `max_bytes` in all in the order of `reads`
    (the first with data may exceed it by one batch, as in KIP-74), or why it
    failed. Blocking; safe in a storage thread."""
    budget = max_bytes
    out: list[bytes | LograftError] = []
    for r, part in zip(reads, hosted, strict=True):
        if isinstance(part, LograftError) or budget <= 0:
            out.append(b"")
            continue
        try:
            data = part.read_for_consumer(r.offset, min(r.max_bytes, budget))
        except LograftError as exc:
            out.append(exc)
            continue
        budget -= len(data)
        out.append(data)
    return out


def _read_for_followers(
    decided: Sequence[tuple[Partition, FollowerFetchResult] | LograftError],
    max_bytes: int,
    partition_max_bytes: int,
) -> list[bytes | LograftError]:
    """The bytes of each decided follower fetch that may read, in order, each
    at most `partition_max_bytes` and the budget of `max_bytes` left, until
    the budget is spent. A partition read gets its first batch whole even
    past those (KIP-74's rule for the first partition, kept for each: this
    leader does not rotate a session's partitions as Kafka's does, so a batch
    larger than what the partitions before it leave would otherwise never be
    served); the answer passes `max_bytes` by at most that one batch.
    Blocking; safe in a storage thread."""
    budget = max_bytes
    out: list[bytes | LograftError] = []
    for answer in decided:
        if isinstance(answer, LograftError) or answer[1].read_from < 0 or budget <= 0:
            out.append(b"")
            continue
        part, res = answer
        try:
            data = part.read_for_follower(res.read_from, min(partition_max_bytes, budget))
        except LograftError as exc:
            out.append(exc)
            continue
        budget -= len(data)
        out.append(data)
    return out


def _freeze_heap() -> None:
    """Put every object alive now in the GC's permanent generation (gc.freeze).

    Replicas are long-lived object graphs (logs, segments, indexes, producer
    and follower state): ~100 objects each, ~200,000 in a node with 2,000.
    CPython's full (generation 2) collection walks all of them whenever enough
    objects have survived into generation 2 since the last one, which idle
    long-polls keep doing: measured every 2-5 s on such a node, 450-1,070 ms
    each on the shared 2-core machine, holding the GIL, so the event loop and
    the Raft thread stopped together (brokers fenced, controllers re-elected).
    Frozen objects are never scanned again; anything created later is
    collected as usual. The cost: cyclic garbage among objects frozen here is
    never reclaimed (reference counting still frees everything else), so a
    deleted replica whose objects formed a cycle would keep its memory; removing
    replicas leaves no cyclic garbage (a unit test checks it)."""
    gc.freeze()


def _one_by_one(single: AlterPartitionFn) -> AlterPartitionsFn:
    """A batched AlterPartition over a per-partition one (for callers without a
    batch call): the changes go concurrently, each answered on its own."""

    async def send(
        changes: Sequence[tuple[TopicPartition, IsrProposal]],
    ) -> Mapping[TopicPartition, Assignment | LograftError]:
        results = await asyncio.gather(
            *(single(tp, proposal) for tp, proposal in changes), return_exceptions=True
        )
        answers: dict[TopicPartition, Assignment | LograftError] = {}
        for (tp, _proposal), result in zip(changes, results, strict=True):
            if isinstance(result, Assignment | LograftError):
                answers[tp] = result
            elif isinstance(result, BaseException):
                log.error("AlterPartition of %s failed", tp, exc_info=result)
        return answers

    return send


def close_logs(logs: Sequence[Log], threads: int) -> None:
    """Flush each log's leader-epoch cache and close the log, `threads` logs
    at a time (blocking: call it off the event loop). Every log is closed
    even if one fails; the first failure is raised after, so the caller does
    not call the shutdown clean."""
    if not logs:
        return
    with ThreadPoolExecutor(
        max_workers=max(1, min(threads, len(logs))), thread_name_prefix="log-close"
    ) as pool:
        done = list(pool.map(_close_one, logs))
    failed = [exc for exc in done if exc is not None]
    if failed:
        raise failed[0]


def _close_one(target: Log) -> BaseException | None:
    try:
        # Only a deferred entry can be unwritten here, and it describes no
        # batch (epoch_cache.py): losing it is safe, so the log still closes.
        with contextlib.suppress(OSError):
            target.epochs.flush()
        target.close()
    except Exception as exc:
        log.error("closing %s failed: %r", target.directory, exc)
        return exc
    return None


def _flush_epoch_caches(logs: list[Log], stop: threading.Event) -> None:
    """Write dirty leader-epoch caches (a worker thread: two fsyncs each),
    until `stop` is set (the broker is stopping and closing every log).

    A failure leaves that cache dirty: the log's next append writes it before
    its batch, so nothing is acknowledged on an entry that is not on disk."""
    for target in logs:
        if stop.is_set():
            return
        try:
            target.epochs.flush()
        except OSError as exc:
            if not target.closed:
                log.warning(
                    "writing the leader epoch checkpoint of %s failed: %s", target.directory, exc
                )


def _compactor(target: Log, now_ms: int, high_watermark: int | None) -> object:
    from lograft.storage.cleaner import clean_log

    return clean_log(target, now_ms, max_offset=high_watermark)


def _read_hw_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        entries = checkpoint.read_entries(path, 3) or []
    except checkpoint.CorruptCheckpointError:
        log.warning("ignoring a corrupt %s; high watermarks restart at 0", path)
        return {}
    out: dict[TopicPartition, int] = {}
    for topic, partition, hw in entries:
        with contextlib.suppress(ValueError):
            out[TopicPartition(topic, int(partition))] = int(hw)
    return out


def _claim_directory(directory: Path, topic_id: str) -> None:
    """A partition directory belongs to one topic id: a topic deleted and
    created again under the same name must not inherit the old data."""
    marker = directory / TOPIC_ID_FILE
    if directory.exists():
        try:
            owner = marker.read_text().strip()
        except FileNotFoundError:
            owner = ""
        if owner == topic_id:
            return
        shutil.rmtree(directory)
        power_loss.forget(directory)
    directory.mkdir(parents=True)
    # Its name must survive a power cut with the files it will hold.
    checkpoint.fsync_dir(directory.parent)
    checkpoint.write_atomic(marker, topic_id.encode())


def check_fetch_args(offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int) -> None:
    if offset < 0:
        raise InvalidRequestError(f"offset must be >= 0, got {offset}")
    if max_bytes < 1:
        raise InvalidRequestError(f"max_bytes must be >= 1, got {max_bytes}")
    if max_wait_ms < 0 or min_bytes < 0:
        raise InvalidRequestError("max_wait_ms and min_bytes must be >= 0")


__all__ = [
    "BrokerSettings",
    "FetchResult",
    "NotLeaderOrFollowerError",
    "PartitionMeta",
    "ReplicaManager",
]

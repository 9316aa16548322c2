"""One partition replica on this broker: leader or follower state over its log.

State machine (transitions only through `become_leader`, `become_follower`
and `stop`; anything else is a bug and raises)::

    NONE -> LEADER | FOLLOWER      first assignment
    LEADER <-> FOLLOWER            leader change (new leader epoch)
    LEADER | FOLLOWER -> STOPPED   the replica moved away or the broker stops

Invariants, asserted:

- leader epochs never go backwards;
- 0 <= high watermark <= log end offset;
- on a leader the high watermark never goes backwards, and it only covers
  offsets that at least `min_insync_replicas` ISR members hold (helper
  functions in high_watermark.py); under `flush_policy = group_commit`,
  hold fsynced (group_commit.py);
- every acks=all waiter is answered: resolved when the HW passes its
  records, failed when leadership is lost or the partition stops, or timed
  out by its caller.

This class runs on the broker's event loop; it never blocks on the network.
Its log writes may run in a worker thread (the replica manager decides by
their cost): `write_append` (a leader's append, after `prepare_append` on
the loop) and `apply_fetch_response` (a follower's). Each holds the
replica's role lock (Kafka's leaderIsrUpdateLock) and first checks that the
replica still has the role, and for a leader the epoch, it was decided
under; role changes take the same lock, so no write straddles one (and a
new leader epoch starts at a log end no write is still moving). A role
change on the loop therefore waits for at most one write of its replica in
flight. Everything else (acks=all waiters, ISR, follower state, the high
watermark of a leader) is touched on the loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from lograft.brokers.fetch_session import FetchOutcome, decide_fetch, truncation_offset
from lograft.brokers.group_commit import GroupCommitter
from lograft.brokers.high_watermark import (
    compute_high_watermark,
    enough_replicas_for_acks_all,
    follower_high_watermark,
)
from lograft.brokers.isr import isr_expand_candidates, isr_shrink_candidates
from lograft.brokers.producer_state import OK, Duplicate, ProducerStateManager, sequence_after
from lograft.brokers.replica_state import FollowerStateTracker
from lograft.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    LograftError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
)
from lograft.protocol.batch import (
    HEADER,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch_sizes,
    count_batches,
    validate_batch,
)
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.fetch_wire import EpochEndOffset, PartitionFetch
from lograft.protocol.produce_wire import Acks, AppendResult
from lograft.protocol.record_scan import RecordsSummary
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.config import FlushPolicy, TimestampType
from lograft.storage.log import AppendInfo, CheckedAppend, Log
from lograft.storage.produce_rules import RecordRules, TimestampBounds, check_producer_header


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"
    STOPPED = "stopped"


_ALLOWED: dict[Role, set[Role]] = {
    Role.NONE: {Role.LEADER, Role.FOLLOWER, Role.STOPPED},
    Role.LEADER: {Role.LEADER, Role.FOLLOWER, Role.STOPPED},
    Role.FOLLOWER: {Role.LEADER, Role.FOLLOWER, Role.STOPPED},
    Role.STOPPED: set(),
}


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the metadata says about a partition, as the broker needs it."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    min_insync_replicas: int = 2
    # A follower that has not caught up for this long leaves the ISR, ms.
    replica_lag_time_max_ms: int = 30_000
    # acks=all produce requests waiting on this partition at once.
    ack_waiters_max: int = 10_000
    # Record batches one produce request may carry for this partition: each
    # costs the event loop its validation and write, whatever its size.
    produce_batches_max: int = 1_000


@dataclass(frozen=True, slots=True)
class FollowerFetchResult:
    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging: EpochEndOffset | None = None
    error: LograftError | None = None
    # `serve_follower_fetch`: where the answer's data is to be read from
    # (`read_for_follower`), -1 when it carries none; and the leader epoch
    # it was decided in.
    read_from: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """A leader append checked on the loop (`prepare_append`): what
    `write_append` writes, under which leader epoch, and what
    `finish_append` then records."""

    leader_epoch: int
    batches: list[tuple[bytes, BatchHeader]]
    # Per batch: the original offsets of the batch it repeats, or None (new).
    verdicts: list[Duplicate | None]
    # The new batches, back to back (empty: every batch repeats one).
    payload: bytes
    validate_records: bool
    rules: RecordRules | None
    # The payload's own check (`check_records`), when the payload is the
    # checked bytes: the log then checks only the batches' sizes again.
    checked: CheckedAppend | None = None

    @property
    def fresh(self) -> list[tuple[bytes, BatchHeader]]:
        return [b for b, v in zip(self.batches, self.verdicts, strict=True) if v is None]


class RoleMovedError(Exception):
    """A write found its replica no longer in the role (or leader epoch) it
    was decided under; nothing was written. Not a LograftError: the caller
    decides again (`prepare_append` then answers as the replica is now)."""


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An AlterPartition the leader wants to send to the controller."""

    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


@dataclass(order=True)
class _Waiter:
    required_offset: int
    seq: int
    future: asyncio.Future[None] = field(compare=False)


_seq = itertools.count()
# Past this many acks=all waiters, drop those whose callers gave up (timed
# out) instead of letting them sit in the heap until the HW reaches them.
WAITERS_COMPACT_AT = 64


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        log: Log,
        broker_id: int,
        settings: PartitionSettings,
        *,
        high_watermark: int = 0,
    ) -> None:
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self.settings = settings
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.high_watermark = max(0, min(high_watermark, log.log_end_offset))
        self.tracker = FollowerStateTracker(broker_id)
        self.producers = ProducerStateManager(owner=str(tp))
        self.producers.rebuild_from_batches(_headers(log))
        self.isr_in_flight: IsrProposal | None = None
        self._waiters: list[_Waiter] = []
        # Held by role changes and by log writes that may run in a worker
        # thread (see the module docstring).
        self._role_lock = threading.Lock()
        # Leader appends pass one at a time, in arrival order (FIFO), from
        # `prepare_append` to `finish_append`, across a thread hop: the next
        # one's producer checks must see this one's producer state, and its
        # offsets must follow this one's.
        self.append_lane = asyncio.Lock()
        # The log's group committer (`flush_policy = group_commit`), set by
        # the replica manager, which drives it.
        self.committer: GroupCommitter | None = None
        # Told of every change to what `isr_change` decides from (the role,
        # the ISR and replicas, the leader's log end, a follower's position),
        # so an ISR check visits only partitions that may need a change (the
        # replica manager's watch set; see `isr_settled`).
        self.on_isr_input: Callable[[Partition], None] = _ignore

    # -- transitions ---------------------------------------------------------------

    def _transition(self, to: Role) -> None:
        if to not in _ALLOWED[self.role]:
            raise AssertionError(f"{self.tp}: illegal transition {self.role.value} -> {to.value}")
        self.role = to

    def _check_epoch(self, a: Assignment) -> None:
        if a.leader_epoch < self.leader_epoch:
            raise AssertionError(
                f"{self.tp}: leader epoch went backwards ({self.leader_epoch} -> {a.leader_epoch})"
            )

    def become_leader(self, a: Assignment, now_ms: int) -> None:
        with self._role_lock:
            self._become_leader(a, now_ms)

    def _become_leader(self, a: Assignment, now_ms: int) -> None:
        self._check_epoch(a)
        new_term = a.leader_epoch > self.leader_epoch or self.role is not Role.LEADER
        self._transition(Role.LEADER)
        self._apply_assignment(a)
        if new_term:
            # Followers ask "where did epoch e end?"; the new epoch starts here.
            # In memory only: two fsyncs per partition on the event loop made a
            # broker taking over hundreds of leaderships stall for seconds. The
            # replica manager writes it from a worker thread, and the first
            # append of this epoch writes it before its batch (epoch_cache.py
            # says why that order is the one that matters).
            self.log.epochs.assign_deferred(a.leader_epoch, self.log.log_end_offset)
            self.tracker.become_leader(a.replicas, a.isr, now_ms)
            self.isr_in_flight = None
        else:
            self.tracker.set_replicas(a.replicas)
            if self.isr_in_flight and a.partition_epoch >= self.isr_in_flight.partition_epoch:
                self.isr_in_flight = None
        self.maybe_advance_high_watermark()
        self.on_isr_input(self)

    def become_follower(self, a: Assignment) -> None:
        with self._role_lock:
            self._become_follower(a)

    def _become_follower(self, a: Assignment) -> None:
        self._check_epoch(a)
        was_leader = self.role is Role.LEADER
        self._transition(Role.FOLLOWER)
        self._apply_assignment(a)
        self.isr_in_flight = None
        if was_leader:
            self._fail_waiters(self._not_leader())

    def stop(self) -> None:
        with self._role_lock:
            self._transition(Role.STOPPED)
        self._fail_waiters(self._not_leader())

    def _apply_assignment(self, a: Assignment) -> None:
        self.leader_id = a.leader
        self.leader_epoch = a.leader_epoch
        self.partition_epoch = a.partition_epoch
        self.replicas = a.replicas
        self.isr = a.isr

    def _not_leader(self) -> NotLeaderOrFollowerError:
        return NotLeaderOrFollowerError(
            f"broker {self.broker_id} is not the leader of {self.tp}",
            topic=self.tp.topic,
            partition=self.tp.partition,
            leader_id=self.leader_id,
            leader_epoch=self.leader_epoch,
        )

    def _require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise self._not_leader()

    # -- leader: produce -------------------------------------------------------------

    def append_records(
        self,
        data: bytes,
        acks: Acks,
        *,
        validate_records: bool = True,
        producer_id_end: int | None = None,
        checked: CheckedAppend | None = None,
    ) -> AppendResult:
        """Append producer batches as leader, all or nothing: every batch of the
        request is checked (structure, CRC, size, the client rules of
        produce_rules.py on its header and records, producer sequence) before
        any is written, so a refused request leaves the log as it was.
        Idempotent batches that repeat one of the producer's last five are not
        written again and get their original offsets back. `producer_id_end`
        is the first producer id the cluster has not allocated (None: not
        checked). `checked`: what `check_records(data, ...)` returned just
        before (in a worker thread): the records are not walked again, nor
        the batches' structure and CRC when `data` is the checked object.

        The three steps in one: the replica manager runs them apart, the
        write in a worker thread when it is costly."""
        plan = self.prepare_append(
            data,
            acks,
            validate_records=validate_records,
            producer_id_end=producer_id_end,
            checked=checked,
        )
        return self.finish_append(plan, self.write_append(plan))

    def prepare_append(
        self,
        data: bytes,
        acks: Acks,
        *,
        validate_records: bool = True,
        producer_id_end: int | None = None,
        checked: CheckedAppend | None = None,
    ) -> AppendPlan:
        """`append_records`' checks, on the loop; writes nothing. Raises what
        the append would refuse with."""
        self._require_leader()
        if acks is Acks.ALL and not enough_replicas_for_acks_all(
            len(self.isr), self.settings.min_insync_replicas
        ):
            raise NotEnoughReplicasError(
                f"{self.tp} has {len(self.isr)} in-sync replicas {list(self.isr)}; acks=all "
                f"needs min_insync_replicas={self.settings.min_insync_replicas}",
                isr=list(self.isr),
                min_insync_replicas=self.settings.min_insync_replicas,
            )
        batches = list(
            _split_batches(
                data,
                self.log.config.max_message_bytes,
                self.settings.produce_batches_max,
                None if checked is None else checked.headers_of(data),
            )
        )
        for index, (_chunk, h) in enumerate(batches):
            check_producer_header(h, index, producer_id_end=producer_id_end)
        verdicts = self._producer_verdicts(batches)
        fresh = [c for (c, _h), v in zip(batches, verdicts, strict=True) if v is None]
        whole = len(fresh) == len(batches)
        return AppendPlan(
            leader_epoch=self.leader_epoch,
            batches=batches,
            verdicts=verdicts,
            # One append of every new batch: the log validates them all
            # (records included) before it writes any.
            payload=data if whole else b"".join(fresh),
            validate_records=validate_records and checked is None,
            rules=None if checked is not None else self._record_rules(),
            checked=checked if whole else None,
        )

    def write_append(self, plan: AppendPlan) -> AppendInfo | None:
        """Write a prepared append (None: nothing new to write). Blocking file
        work, safe in a worker thread: it touches only the log, under the role
        lock, and raises RoleMovedError, writing nothing, if this replica is no
        longer the leader of `plan`'s epoch."""
        if not plan.payload:
            return None
        with self._role_lock:
            if self.role is not Role.LEADER or self.leader_epoch != plan.leader_epoch:
                raise RoleMovedError(f"{self.tp}: leadership moved under an append")
            return self.log.append(
                plan.payload,
                leader_epoch=plan.leader_epoch,
                validate_records=plan.validate_records,
                rules=plan.rules,
                checked=plan.checked,
            )

    def finish_append(self, plan: AppendPlan, info: AppendInfo | None) -> AppendResult:
        """After `write_append(plan)` returned `info`, on the loop: record the
        producers' new batches, move the HW, answer with the offsets."""
        ranges: list[tuple[int, int]] = []
        append_time = -1
        if info is not None:
            append_time = info.log_append_time_ms
            offset = info.first_offset
            for _chunk, h in plan.fresh:
                ranges.append((offset, offset + h.last_offset_delta))
                if h.producer_id >= 0:
                    self.producers.record(
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.last_sequence,
                        offset,
                        offset + h.last_offset_delta,
                        append_time if append_time >= 0 else h.max_timestamp,
                    )
                offset += h.last_offset_delta + 1
            assert offset == info.last_offset + 1, (offset, info)
        new_ranges = iter(ranges)
        spans = [
            (v.first_offset, v.last_offset) if v is not None else next(new_ranges)
            for v in plan.verdicts
        ]
        self.maybe_advance_high_watermark()
        if info is not None:
            self.on_isr_input(self)  # the leader's log end moved past its followers
        return AppendResult(spans[0][0], spans[-1][1], append_time, info is None)

    def check_records(self, data: bytes, budget: DecompressionBudget) -> CheckedAppend:
        """The record checks `append_records` makes (sizes, every record
        decompressed within `budget`, the client rules on records), writing
        nothing; what passed, for the append (`checked`). Reads only configs
        and the clock: safe in a worker thread."""
        return self.log.check_append(data, rules=self._record_rules(), budget=budget)

    def check_built(
        self, data: bytes, summary: RecordsSummary, budget: DecompressionBudget
    ) -> CheckedAppend:
        """`check_records` for a batch this process encoded itself, with its
        encoder's account of its records (`Log.check_built`): the same
        size and record rules, without walking its bytes again."""
        return self.log.check_built(data, summary, rules=self._record_rules(), budget=budget)

    def _record_rules(self) -> RecordRules:
        """The client rules on records for this topic's configs, now."""
        cfg = self.log.config
        bounds = None
        if cfg.message_timestamp_type is TimestampType.CREATE_TIME:
            bounds = TimestampBounds.around(
                self.log.clock(),
                cfg.message_timestamp_before_max_ms,
                cfg.message_timestamp_after_max_ms,
            )
        return RecordRules(bounds, keys_required=cfg.compact)

    def _producer_verdicts(
        self, batches: list[tuple[bytes, BatchHeader]]
    ) -> list[Duplicate | None]:
        """Per batch: the original offsets of the batch it repeats, or None (append it).

        Raises, before anything is written, if any batch is out of sequence or
        of a stale producer epoch. A producer's first batch in the request is
        checked against the partition's producer state; its later ones must
        follow the one before them in the request."""
        previous: dict[int, BatchHeader] = {}
        out: list[Duplicate | None] = []
        for _chunk, h in batches:
            if h.producer_id < 0:
                out.append(None)
                continue
            prior = previous.get(h.producer_id)
            if prior is None:
                verdict = self.producers.validate(
                    h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence
                )
                if isinstance(verdict, Duplicate):
                    out.append(verdict)
                    continue
                assert verdict is OK
            else:
                _check_follows(prior, h)
            previous[h.producer_id] = h
            out.append(None)
        return out

    def wait_for_high_watermark(self, required_offset: int) -> asyncio.Future[None]:
        """A future resolved once the HW reaches `required_offset` (acks=all)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if self.high_watermark >= required_offset:
            fut.set_result(None)
            return fut
        self._require_leader()
        if len(self._waiters) >= self.settings.ack_waiters_max:
            raise RequestTimedOutError(
                f"{self.tp} already has {len(self._waiters)} acks=all requests waiting "
                f"(ack_waiters_max={self.settings.ack_waiters_max}); retry later"
            )
        heapq.heappush(self._waiters, _Waiter(required_offset, next(_seq), fut))
        return fut

    def _release_waiters(self) -> None:
        while self._waiters and self._waiters[0].required_offset <= self.high_watermark:
            w = heapq.heappop(self._waiters)
            if not w.future.done():
                w.future.set_result(None)
        # Drop waiters whose callers gave up (timed out), so the heap stays bounded.
        if len(self._waiters) > WAITERS_COMPACT_AT:
            live = [w for w in self._waiters if not w.future.done()]
            if len(live) != len(self._waiters):
                heapq.heapify(live)
                self._waiters = live

    def _fail_waiters(self, error: LograftError) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.future.done():
                w.future.set_exception(error)

    @property
    def group_commit(self) -> bool:
        return self.log.config.flush_policy is FlushPolicy.GROUP_COMMIT

    def maybe_advance_high_watermark(self) -> bool:
        if self.role is not Role.LEADER:
            return False
        followers = [r for r in self.isr if r != self.broker_id]
        if self.group_commit:
            # Only what every ISR member has fsynced: the leader's durable
            # offset (a new leader's may lag its HW until its first commit:
            # then the HW holds) and what each follower last reported.
            end = max(self.log.durable_offset, self.high_watermark)
            offsets = self.tracker.follower_durables(followers)
        else:
            end = self.log.log_end_offset
            offsets = self.tracker.follower_leos(followers)
        new_hw = compute_high_watermark(
            self.high_watermark, end, offsets, self.settings.min_insync_replicas
        )
        if new_hw == self.high_watermark:
            return False
        self.high_watermark = new_hw
        self._release_waiters()
        return True

    # -- leader: fetches -------------------------------------------------------------

    def read_for_consumer(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from `offset`, never at or past the high watermark."""
        self._require_leader()
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark)

    def on_follower_fetch(
        self, follower: int, request: PartitionFetch, max_bytes: int, now_ms: int
    ) -> FollowerFetchResult:
        """A follower's fetch, answered with its data (`serve_follower_fetch`
        then `read_for_follower`; the replica manager runs them apart, the
        read in a thread when it is large)."""
        res = self.serve_follower_fetch(follower, request, now_ms)
        if res.read_from < 0:
            return res
        return dataclasses.replace(res, data=self.read_for_follower(res.read_from, max_bytes))

    def serve_follower_fetch(
        self, follower: int, request: PartitionFetch, now_ms: int
    ) -> FollowerFetchResult:
        """Decide a follower's fetch and take note of its progress (which may
        move the HW); the answer says where its data starts (`read_from`)
        but carries none yet."""
        self._require_leader()
        if follower not in self.replicas:
            raise NotLeaderOrFollowerError(
                f"broker {follower} is not a replica of {self.tp}", replicas=list(self.replicas)
            )
        leo = self.log.log_end_offset
        decision = decide_fetch(
            request,
            leader_epoch=self.leader_epoch,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=leo,
            end_offset_for=lambda e: self.log.epochs.end_offset_for(e, self.log.log_end_offset),
        )
        if decision.outcome is FetchOutcome.DIVERGING_EPOCH:
            return self._fetch_result(b"", decision.diverging)
        error = decision.error()
        if error is not None:
            return self._fetch_result(b"", None, error)
        self.tracker.on_fetch(follower, request.fetch_offset, leo, now_ms, request.durable_offset)
        self.maybe_advance_high_watermark()
        if request.fetch_offset != leo or follower not in self.isr:
            self.on_isr_input(self)  # a follower behind the log end, or one that may join
        return self._fetch_result(b"", None, read_from=request.fetch_offset)

    def read_for_follower(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from `offset` up to the log end, at most `max_bytes`
        but the first batch whole even if larger. Blocking file work (the
        log's own lock), safe in a worker thread."""
        return self.log.read(offset, max_bytes)

    def require_leader_in(self, epoch: int) -> None:
        """NOT_LEADER_OR_FOLLOWER unless this replica leads in `epoch`."""
        if self.role is not Role.LEADER or self.leader_epoch != epoch:
            raise self._not_leader()

    def _fetch_result(
        self,
        data: bytes,
        diverging: EpochEndOffset | None,
        error: LograftError | None = None,
        *,
        read_from: int = -1,
    ) -> FollowerFetchResult:
        return FollowerFetchResult(
            data,
            self.high_watermark,
            self.log.log_start_offset,
            self.log.log_end_offset,
            diverging,
            error,
            read_from,
            self.leader_epoch,
        )

    def isr_change(
        self, now_ms: int, ineligible: frozenset[int] = frozenset()
    ) -> IsrProposal | None:
        """The ISR the leader should propose now, if any (one in flight at a time)."""
        if self.role is not Role.LEADER or self.isr_in_flight is not None:
            return None
        states = self.tracker.states()
        out = isr_shrink_candidates(
            self.isr,
            states,
            self.log.log_end_offset,
            now_ms,
            self.broker_id,
            self.settings.replica_lag_time_max_ms,
        )
        start = _epoch_start(self.log, self.leader_epoch)
        join = isr_expand_candidates(
            self.isr,
            self.replicas,
            states,
            self.high_watermark,
            start,
            self.broker_id,
            ineligible,
            leader_leo=self.log.log_end_offset,
            now_ms=now_ms,
            replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
        )
        if not out and not join:
            return None
        new_isr = tuple(r for r in self.replicas if (r in self.isr and r not in out) or r in join)
        proposal = IsrProposal(new_isr, self.leader_epoch, self.partition_epoch)
        self.isr_in_flight = proposal
        return proposal

    def isr_change_done(self, accepted: Assignment | None) -> None:
        """The controller answered an AlterPartition (None: it failed)."""
        self.isr_in_flight = None
        if accepted is not None and self.role is Role.LEADER:
            if accepted.partition_epoch >= self.partition_epoch:
                self.isr = accepted.isr
                self.partition_epoch = accepted.partition_epoch
            self.maybe_advance_high_watermark()
        self.on_isr_input(self)

    def isr_settled(self) -> bool:
        """No ISR check can propose a change until one of the inputs
        `on_isr_input` reports moves: not the leader (nothing to check), or
        leading with every replica in the ISR, no change in flight, and every
        follower at the log end. A follower at the leader's log end is in sync
        however long ago it fetched (Kafka's isCaughtUp), so only an append,
        a follower's fetch behind the end, or an ISR or role change can
        unsettle it."""
        if self.role is not Role.LEADER:
            return True
        if self.isr_in_flight is not None or set(self.isr) != set(self.replicas):
            return False
        leo = self.log.log_end_offset
        states = self.tracker.states()
        return all(
            r == self.broker_id or (r in states and states[r].leo == leo) for r in self.replicas
        )

    # -- follower ------------------------------------------------------------------------

    def follower_fetch_request(self) -> PartitionFetch:
        return PartitionFetch(
            fetch_offset=self.log.log_end_offset,
            last_fetched_epoch=self.log.epochs.latest_epoch,
            current_leader_epoch=self.leader_epoch,
            durable_offset=self.log.durable_offset,
        )

    def apply_fetch_response(
        self,
        data: bytes,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        diverging: EpochEndOffset | None,
    ) -> int:
        """Truncate on divergence, else append what the leader sent.
        Returns the number of bytes appended.

        Blocking file work, safe in a worker thread: it holds the role lock
        throughout, so the replica stays a follower until it is done (the
        producer state and a follower's high watermark it sets are touched
        by nothing else then)."""
        with self._role_lock:
            if self.role is not Role.FOLLOWER:
                raise self._not_leader()
            return self._apply_fetched(
                data,
                leader_high_watermark=leader_high_watermark,
                leader_log_start_offset=leader_log_start_offset,
                diverging=diverging,
            )

    def _apply_fetched(
        self,
        data: bytes,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        diverging: EpochEndOffset | None,
    ) -> int:
        if diverging is not None:
            target = truncation_offset(
                self.log.log_end_offset,
                diverging,
                lambda e: self.log.epochs.end_offset_for(e, self.log.log_end_offset),
            )
            self._truncate_to(target)
            return 0
        if leader_log_start_offset > self.log.log_end_offset:
            # The leader deleted what we have not copied yet: start over there.
            self.log.truncate_fully_and_start_at(leader_log_start_offset)
            self.producers.rebuild_from_batches(_headers(self.log))
        appended = 0
        if data:
            self.log.append_as_follower(data)
            for _pos, h in _iter_headers(data):
                self.producers.record_batch(h)
            appended = len(data)
        if leader_log_start_offset > self.log.log_start_offset:
            self.log.advance_log_start_offset(min(leader_log_start_offset, self.log.log_end_offset))
        self.high_watermark = follower_high_watermark(
            leader_high_watermark, self.log.log_end_offset
        )
        return appended

    def fetched_data_writes_epochs(self, data: bytes) -> bool:
        """Whether appending fetched `data` writes the leader-epoch
        checkpoint first (two fsyncs): the cache holds a deferred entry, or a
        batch of the data starts an epoch the cache does not end with (a
        follower's first batch of each new leader epoch)."""
        epochs = self.log.epochs
        if epochs.dirty:
            return True
        latest = epochs.latest_epoch
        return any(h.partition_leader_epoch != latest for _pos, h in _iter_headers(data))

    def _truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.producers.truncate_to(offset, _headers(self.log))
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    # -- views -----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def describe(self) -> dict[str, object]:
        return {
            "partition": self.tp.partition,
            "role": self.role.value,
            "leader": self.leader_id,
            "leader_epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "log_start_offset": self.log.log_start_offset,
            "log_end_offset": self.log.log_end_offset,
            "high_watermark": self.high_watermark,
        }


def _check_follows(prior: BatchHeader, h: BatchHeader) -> None:
    """`h` comes right after `prior`, a batch of the same producer in the same request."""
    pid = h.producer_id
    if h.producer_epoch < prior.producer_epoch:
        raise InvalidProducerEpochError(
            f"producer {pid} sent epoch {h.producer_epoch} after epoch {prior.producer_epoch} "
            "in the same request",
            producer_id=pid,
            epoch=h.producer_epoch,
            current_epoch=prior.producer_epoch,
        )
    expected = (
        0 if h.producer_epoch > prior.producer_epoch else sequence_after(prior.last_sequence, 1)
    )
    if h.base_sequence != expected:
        raise OutOfOrderSequenceError(
            f"producer {pid} sent sequence {h.base_sequence} after {prior.last_sequence} in the "
            f"same request, expected {expected}",
            producer_id=pid,
            epoch=h.producer_epoch,
            sequence=h.base_sequence,
            expected_sequence=expected,
        )


def check_batch_count(data: bytes, batches_max: int) -> None:
    """Refuse a produce of more than `batches_max` batches before any is
    validated: the work a request causes on the event loop grows with its
    batch count (a 16 MiB body holds over 200,000 one-record batches), not
    only with its bytes. Kafka takes exactly one batch per partition."""
    if not data:
        raise InvalidRecordError("no record batch in the request")
    if count_batches(data, batches_max + 1) > batches_max:
        raise InvalidRecordError(
            f"a produce request may carry at most {batches_max} record batches per "
            "partition (produce_batches_max); this one has more. Put more records in "
            "each batch, or send several requests",
            produce_batches_max=batches_max,
        )


def _split_batches(
    data: bytes,
    max_bytes: int,
    batches_max: int,
    checked: tuple[tuple[int, BatchHeader], ...] | None = None,
) -> Iterator[tuple[bytes, BatchHeader]]:
    """Each batch of a request, validated (structure and CRC) and sliced;
    `checked`: `data`'s headers as its check read them (`CheckedAppend`),
    only held to `max_bytes` again."""
    check_batch_count(data, batches_max)
    view = memoryview(data)
    if checked is not None:
        check_batch_sizes(checked, max_bytes)
        if len(checked) == 1 and type(data) is bytes:
            yield data, checked[0][1]  # the one batch: not a copy (below)
            return
        for pos, h in checked:
            yield bytes(view[pos : pos + h.size]), h
        return
    pos = 0
    while pos < len(data):
        h = validate_batch(data, pos, max_batch_bytes=max_bytes)
        if pos == 0 and h.size == len(data) and type(data) is bytes:
            # The request is this one batch (a JSON produce's, most clients'):
            # the bytes themselves, immutable, not a copy of them (a 500 KiB
            # copy per produce of 1 KiB records).
            yield data, h
            return
        yield bytes(view[pos : pos + h.size]), h
        pos += h.size


def _iter_headers(data: bytes) -> Iterator[tuple[int, BatchHeader]]:
    pos = 0
    while len(data) - pos >= HEADER.size:
        h = BatchHeader(*HEADER.unpack_from(data, pos))
        yield pos, h
        pos += h.batch_length + LOG_OVERHEAD


def _headers(log: Log) -> Iterator[BatchHeader]:
    """Every batch header of the log, read segment by segment."""
    for seg in log.segments():
        for b in seg.walk(0):
            yield BatchHeader(*HEADER.unpack_from(seg.read_range(b.position, b.position + 61), 0))


def _ignore(_part: Partition) -> None:
    pass


def _epoch_start(log: Log, epoch: int) -> int:
    for e, start in log.epochs.entries():
        if e == epoch:
            return start
    return log.log_end_offset

"""Where a produce's batches go: this broker's replicas, or their leaders.

Any broker accepts a JSON produce; its batches, one per partition, are
appended here for the partitions this broker leads, and forwarded to the
leader of each other partition: one request per leader (as a Kafka client
sends one ProduceRequest per broker), cut to the leader's body limit, all
concurrently (`produce`). A leader receives such a request
(`POST /internal/v1/produce`, lograft/protocol/produce_wire.py) and appends
each partition exactly as a raw produce of it would be (`append_forwarded`,
`append_raw`); each partition gets its own outcome.

The forward transport is injected (`ForwardTransport`: the node's
`PeerClient`), and so is the worker that runs record checks off the event
loop (`RecordWorker`: the node's `RecordWork`), so the HTTP handlers only
parse, call and render. The router sends every partition's batch to its
leader the same way (`forward_produce`); for this broker's own partitions
the transport runs `produce_here` in process (registered by the routes with
`serve_locally`), with the batches as they are: no copy, no encoding.
Keyless records of a JSON produce (no key, no partition) may go to any
partition, so the router says which partitions their request's one partition
is chosen from (`keyless_choices`, a `KEYLESS_PARTITIONS` rule): with `local`
(the default) the partitions this broker leads, so that nothing is forwarded
while it leads one (as a REST proxy's user expects: Kafka's own sticky
partitioner puts a keyless batch on any one partition); with `all`, every
partition of the topic, round-robin, wherever its leader is.

Outcomes of forwarded partitions:

- the leader has no address: NOT_LEADER_OR_FOLLOWER (or LEADER_NOT_AVAILABLE
  when the partition has no leader), as a produce sent here would get;
- the leader cannot be reached: LEADER_NOT_AVAILABLE, retriable;
- the leader refused the whole request: its error, for every partition;
- the leader's refusal is no lograft error (a proxy's page): an
  UNKNOWN_SERVER_ERROR, not retriable, since the leader may have appended the
  records before whatever answered lost its answer.
"""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeVar, get_args

from lograft.brokers.metadata_sync import TopicView, partition_of
from lograft.brokers.partition import Partition, check_batch_count
from lograft.brokers.peer_calls import UnreadableAnswer
from lograft.brokers.replica_manager import ReplicaManager
from lograft.errors import (
    LeaderNotAvailableError,
    LograftError,
    NotLeaderOrFollowerError,
    PeerAddressUnknownError,
    PeerAnswerUnreadableError,
    PeerUnreachableError,
)
from lograft.protocol.compression import DecompressionBudget
from lograft.protocol.plain_batch import BuiltBatch
from lograft.protocol.produce_wire import (
    Acks,
    AppendResult,
    PartitionBatch,
    PartitionOutcome,
    ProduceRequest,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.storage.log import CheckedAppend

T = TypeVar("T")

FORWARD_PATH = "/internal/v1/produce"
# Which partitions the keyless records of a JSON produce may go to:
# `local`, those this broker leads (else those with a leader, else all);
# `all`, every partition, round-robin across requests wherever it is led.
KeylessPartitions = Literal["local", "all"]
KEYLESS_PARTITIONS: tuple[str, ...] = get_args(KeylessPartitions)
# Topics whose locally led partitions are remembered (per metadata view);
# past this many the memory starts over, so deleted topics cannot pile up.
KEYLESS_CHOICES_CACHED_MAX = 1024
# What a forwarded produce's header costs per partition and in all, bytes; a
# generous bound, so that a request cut at the limit fits the peer's limit.
FORWARD_PARTITION_OVERHEAD = 64
FORWARD_REQUEST_OVERHEAD = 1024


class ForwardTransport(Protocol):
    """Takes a produce to a partition leader (the node's PeerClient: in
    process for this broker); raises as `lograft.brokers.peer_calls.PeerCalls`
    describes."""

    async def forward_produce(
        self, broker_id: int, view: TopicView, req: ProduceRequest
    ) -> list[PartitionOutcome]: ...


class RecordWorker(Protocol):
    """Runs record checks off the event loop (the node's RecordWork)."""

    async def run(self, fn: Callable[[], T], *, inline: bool = False) -> T: ...

    def worth_a_thread(self, data: bytes) -> bool: ...


class ProduceRouter:
    def __init__(
        self,
        replicas: ReplicaManager,
        transport: ForwardTransport,
        work: RecordWorker,
        broker_url: Callable[[int], str | None],
        *,
        produce_decompressed_bytes_max: int,
        forward_request_bytes_max: int,
        keyless_partitions: KeylessPartitions = "local",
    ) -> None:
        """`broker_url`: a broker's advertised URL, for NOT_LEADER answers
        (clients go there, not to the node-to-node address); `keyless_partitions`:
        see `keyless_choices`."""
        if keyless_partitions not in KEYLESS_PARTITIONS:
            raise ValueError(
                f"keyless_partitions must be one of {KEYLESS_PARTITIONS}, "
                f"got {keyless_partitions!r}"
            )
        self.replicas = replicas
        self.transport = transport
        self.work = work
        self.broker_url = broker_url
        # Bytes the batches of one produce request may inflate to, in all.
        self.produce_decompressed_bytes_max = produce_decompressed_bytes_max
        # A produce forwarded to one leader is cut into requests of at most
        # this many bytes: the leader refuses a larger body.
        self.forward_request_bytes_max = forward_request_bytes_max
        self.keyless_partitions = keyless_partitions
        # Topic -> (the view they were read from, keyless_choices of it).
        self._keyless: dict[str, tuple[TopicView, tuple[int, ...] | None]] = {}

    # -- keyless records -------------------------------------------------------------------

    def keyless_choices(self, view: TopicView) -> tuple[int, ...] | None:
        """The partitions a request's keyless records may go to (one of them,
        round-robin across requests: `KeylessPartitioner`); None: any.

        Rule `local`: the partitions this broker leads and hosts, so they are
        appended here and nothing is forwarded; when it leads none, those with
        a leader (a leaderless one would only refuse); when none has one, any.
        Rule `all`: any. Worked out once per metadata view of the topic."""
        if self.keyless_partitions == "all":
            return None
        cached = self._keyless.get(view.name)
        if cached is not None and cached[0] is view:
            return cached[1]
        choices = self._local_or_led(view)
        if len(self._keyless) >= KEYLESS_CHOICES_CACHED_MAX:
            self._keyless.clear()
        self._keyless[view.name] = (view, choices)
        return choices

    def _local_or_led(self, view: TopicView) -> tuple[int, ...] | None:
        me = self.replicas.broker_id
        hosted = self.replicas.partitions
        led = sorted(p for p, a in view.partitions.items() if a.leader >= 0)
        local = tuple(
            p
            for p in led
            if view.partitions[p].leader == me and TopicPartition(view.name, p) in hosted
        )
        return local or tuple(led) or None

    # -- leadership ----------------------------------------------------------------------

    def require_local_leader(self, view: TopicView, tp: TopicPartition) -> None:
        a = view.partitions[tp.partition]
        if a.leader == self.replicas.broker_id:
            if tp in self.replicas.partitions:
                return
            # Not "ask broker N" when N is this broker: its replica failed.
            self.replicas.raise_if_failed(tp)
        raise self.not_leader(view, tp)

    def not_leader(self, view: TopicView, tp: TopicPartition) -> LograftError:
        a = view.partitions[tp.partition]
        if a.leader < 0:
            return LeaderNotAvailableError(
                f"{tp} has no leader right now; retry shortly",
                topic=tp.topic,
                partition=tp.partition,
            )
        return NotLeaderOrFollowerError(
            f"broker {self.replicas.broker_id} is not the leader of {tp}; "
            f"broker {a.leader} is, at {self.broker_url(a.leader)}",
            topic=tp.topic,
            partition=tp.partition,
            leader_id=a.leader,
            leader_url=self.broker_url(a.leader),
        )

    # -- a produce accepted here ---------------------------------------------------------

    async def produce(
        self, view: TopicView, batches: dict[int, bytes | BuiltBatch], acks: Acks
    ) -> dict[int, PartitionOutcome]:
        """Every partition's outcome: each leader gets its partitions in one
        request (this broker in process), all concurrently. A batch built
        here (`BuiltBatch`) keeps its encoder's account of its records for
        this broker's own check; one sent to another leader is walked there."""
        outcomes: dict[int, PartitionOutcome] = {}
        by_leader: dict[int, list[PartitionBatch]] = defaultdict(list)
        calls: list[Awaitable[dict[int, PartitionOutcome]]] = []
        for p, data in batches.items():
            leader = view.partitions[p].leader
            if leader < 0:
                outcomes[p] = self.not_leader(view, TopicPartition(view.name, p))
            elif isinstance(data, BuiltBatch):
                by_leader[leader].append(PartitionBatch(p, data.data, data.summary))
            else:
                by_leader[leader].append(PartitionBatch(p, data))
        for leader, parts in by_leader.items():
            for chunk in self.forward_chunks(parts):
                calls.append(self._forward(view, leader, ProduceRequest(view.name, acks, chunk)))
        if len(calls) == 1:  # the usual case (one leader): no task to gather
            outcomes.update(await calls[0])
            return outcomes
        for answered in await asyncio.gather(*calls):
            outcomes.update(answered)
        return outcomes

    async def produce_here(self, view: TopicView, req: ProduceRequest) -> list[PartitionOutcome]:
        """A produce accepted here for partitions this broker leads (the
        transport's in-process `forward_produce`): each partition's outcome,
        in request order, all concurrently."""
        if len(req.partitions) == 1:  # the usual case: no gather
            return [await self._produce_local(view.name, req.partitions[0], req.acks)]
        return list(
            await asyncio.gather(
                *(self._produce_local(view.name, b, req.acks) for b in req.partitions)
            )
        )

    async def _produce_local(
        self, topic: str, batch: PartitionBatch, acks: Acks
    ) -> PartitionOutcome:
        tp, data = TopicPartition(topic, batch.partition), batch.data
        try:
            part = self.replicas.partition(tp)
            if batch.built is not None:
                # Encoded here from the request's checked fields: judged by
                # the topic's rules from its encoder's account (a few us, on
                # the loop), not walked again.
                checked = part.check_built(data, batch.built, self.produce_budget())
            else:
                check = functools.partial(part.check_records, data, self.produce_budget())
                checked = await self.work.run(check, inline=not self.work.worth_a_thread(data))
            return await self.replicas.produce(tp, data, acks, checked=checked)
        except LograftError as exc:
            return exc

    def forward_chunks(self, parts: list[PartitionBatch]) -> list[list[PartitionBatch]]:
        """`parts` cut into requests the leader's body limit accepts; almost
        always one. A single batch over the limit still goes (alone), to be
        refused by the leader as it would be on its own."""
        budget = self.forward_request_bytes_max - FORWARD_REQUEST_OVERHEAD
        chunks: list[list[PartitionBatch]] = [[]]
        used = 0
        for part in parts:
            size = len(part.data) + FORWARD_PARTITION_OVERHEAD
            if chunks[-1] and used + size > budget:
                chunks.append([])
                used = 0
            chunks[-1].append(part)
            used += size
        return chunks

    async def _forward(
        self, view: TopicView, leader: int, req: ProduceRequest
    ) -> dict[int, PartitionOutcome]:
        """One request carrying `req`'s partitions to their leader; each
        partition's outcome is the one the leader's raw produce would give
        (this broker's: `produce_here`'s)."""
        partitions = [b.partition for b in req.partitions]
        try:
            answered = await self.transport.forward_produce(leader, view, req)
        except PeerAddressUnknownError:
            return {p: self.not_leader(view, TopicPartition(view.name, p)) for p in partitions}
        except PeerUnreachableError as exc:
            return {p: _unreachable(leader, TopicPartition(view.name, p), exc) for p in partitions}
        except PeerAnswerUnreadableError as exc:
            status = exc.details.get("status")
            return {p: LograftError(f"broker {leader} answered {status}") for p in partitions}
        except LograftError as exc:
            # The whole request was refused: every partition gets the error (a
            # fresh instance each: the produce answer may still extend one's details).
            return {p: LograftError.from_dict(exc.to_dict()) for p in partitions}
        except UnreadableAnswer as exc:
            return {
                p: LograftError(f"broker {leader} answered a produce unreadably: {exc}")
                for p in partitions
            }
        return dict(zip(partitions, answered, strict=True))

    # -- a produce for partitions led here -----------------------------------------------

    async def append_forwarded(
        self, view: TopicView, req: ProduceRequest
    ) -> list[tuple[int, PartitionOutcome]]:
        """Partitions of one JSON produce, forwarded by the node that took it:
        each is appended exactly as `append_raw` would append it, all
        concurrently; per partition, in request order, its outcome."""
        checks = await self._check_partitions(view, req.partitions)
        outcomes = await asyncio.gather(
            *(
                self._append_as_leader(view, b, req.acks, checks[b.partition])
                for b in req.partitions
            )
        )
        return list(zip([b.partition for b in req.partitions], outcomes, strict=True))

    async def append_raw(
        self, view: TopicView, tp: TopicPartition, data: bytes, acks: Acks
    ) -> AppendResult:
        """Raw batches for one partition led here, checked off the loop, appended."""
        self.require_local_leader(view, tp)
        check = functools.partial(
            self.check_batches, self.replicas.partition(tp), data, self.produce_budget()
        )
        checked = await self.work.run(check, inline=not self.work.worth_a_thread(data))
        return await self.replicas.produce(tp, data, acks, checked=checked)

    async def _check_partitions(
        self, view: TopicView, parts: list[PartitionBatch]
    ) -> dict[int, LograftError | CheckedAppend | None]:
        """Each partition's batches checked as append_raw checks them, sharing
        one request's budget, in one job; per partition, its refusal, what
        passed, or None (not hosted here: refused by the append)."""
        hosted = {
            b.partition: part
            for b in parts
            if (part := self.replicas.partitions.get(TopicPartition(view.name, b.partition)))
        }
        budget = self.produce_budget()

        def check_all() -> dict[int, LograftError | CheckedAppend | None]:
            out: dict[int, LograftError | CheckedAppend | None] = {}
            for b in parts:
                try:
                    out[b.partition] = None  # not hosted: refused below, as append_raw would
                    if b.partition in hosted:
                        out[b.partition] = self.check_batches(hosted[b.partition], b.data, budget)
                except LograftError as exc:
                    out[b.partition] = exc
            return out

        inline = not any(self.work.worth_a_thread(b.data) for b in parts)
        return await self.work.run(check_all, inline=inline)

    async def _append_as_leader(
        self,
        view: TopicView,
        batch: PartitionBatch,
        acks: Acks,
        check: LograftError | CheckedAppend | None,
    ) -> PartitionOutcome:
        try:
            tp = partition_of(view, batch.partition)
            self.require_local_leader(view, tp)
            if isinstance(check, LograftError):
                return check
            return await self.replicas.produce(tp, batch.data, acks, checked=check)
        except LograftError as exc:
            return exc

    def produce_budget(self) -> DecompressionBudget:
        return DecompressionBudget(
            self.produce_decompressed_bytes_max, "produce_decompressed_bytes_max"
        )

    def check_batches(
        self, part: Partition, data: bytes, budget: DecompressionBudget
    ) -> CheckedAppend:
        """Every batch and record of a produce, as the leader's append checks
        them (structure, CRC, sizes, the client rules on records, every record
        decompressed within `budget`), before anything is appended."""
        # Before anything else: a body of tiny batches would be walked whole.
        check_batch_count(data, self.replicas.settings.produce_batches_max)
        return part.check_records(data, budget)


def _unreachable(leader: int, tp: TopicPartition, exc: PeerUnreachableError) -> LograftError:
    return LeaderNotAvailableError(
        f"could not reach broker {leader}, the leader of {tp}: {exc.message}; retry shortly",
        leader_id=leader,
    )


__all__ = [
    "FORWARD_PATH",
    "KEYLESS_PARTITIONS",
    "ForwardTransport",
    "KeylessPartitions",
    "ProduceRouter",
    "RecordWorker",
]

"""Every stream's reads of one remote leader, carried by a few shared long-polls.

A stream reads each partition with one read in flight. When a node serves many
streams of partitions led elsewhere, one HTTP long-poll per (stream,
partition) would need that many connections at once: a node with 100 streams
of 4 remote partitions each wanted 400, its pool had 64, and new streams
could not even ask a leader for their start offsets (they queued behind
long-polls that each held a connection for seconds). Instead, as a Kafka
consumer's fetcher does, this node keeps at most `polls_per_leader_max`
requests in flight to each leader, each one carrying many reads
(`stream_fetch`, `POST /internal/v1/stream-fetch`):

- A read joins its leader's queue; streams that want the same partition,
  offset and size (tails of one topic, all at its high watermark) share one
  entry and one answer.
- While fewer than `polls_per_leader_max` polls are in flight, the first
  waiting reads (at most `reads_max`) go out in a new poll; otherwise they
  wait for one to return (at most the poll's wait plus its timeout margin).
- A read answered with data or an error is done. One answered empty goes to
  the back of the queue and out again in its turn (round robin: when
  `reads_max` or `bytes_max` cut polls short, reads of idle partitions cannot
  keep newer ones waiting), unless the metadata no longer names that leader:
  then it is answered empty, and the stream asks the metadata where to read
  next.
- A read whose stream went away leaves the queue; if it was in flight, its
  answer is dropped. A poll whose transport fails answers every read in it
  with BROKER_NOT_AVAILABLE, which the stream retries like any other.

Connections: at most `polls_per_leader_max` per leader, whatever the number of
streams; the work one poll asks of the leader is bounded by `reads_max` and
`bytes_max`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from lograft.api.services import PeerCalls
from lograft.api.stream.fetch import PATH, StreamFetchRequest
from lograft.brokers.replica_manager import ConsumerRead
from lograft.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    LograftError,
)
from lograft.protocol.fetch_wire import FetchPartitionResponse, decode_response
from lograft.protocol.topic_partition import TopicPartition

# (partition, offset, max_bytes): reads that agree on all three share an answer.
ReadKey = tuple[TopicPartition, int, int]


@dataclass(frozen=True, slots=True)
class PollLimits:
    polls_per_leader_max: int  # requests in flight to one leader
    reads_max: int  # reads one request carries
    bytes_max: int  # batch bytes one answer may bring, all its reads together
    wait_ms: int  # the leader's long-poll of one request
    timeout_margin_ms: int  # one request may take its long-poll plus this


class _Entry:
    """One distinct read and the streams waiting for its answer."""

    __slots__ = ("in_flight", "key", "waiters")

    def __init__(self, key: ReadKey) -> None:
        self.key = key
        self.waiters: set[asyncio.Future[FetchPartitionResponse]] = set()
        self.in_flight = False


class RemoteReads:
    """The shared long-polls of this node's streams, per remote leader."""

    def __init__(
        self,
        calls: PeerCalls,
        limits: PollLimits,
        still_leads: Callable[[int, TopicPartition], bool],
    ) -> None:
        self.calls = calls
        self.limits = limits
        self._still_leads = still_leads
        self._leaders: dict[tuple[int, str], _LeaderPolls] = {}
        self._closed = False

    async def read(
        self, leader: int, url: str, tp: TopicPartition, offset: int, max_bytes: int
    ) -> FetchPartitionResponse:
        """Batches of `tp` from `offset`, from `leader` at `url`; waits until there
        are some (an empty answer only when the leader may have moved)."""
        if self._closed:
            raise BrokerNotAvailableError("this node is stopping", leader_id=leader)
        key = (leader, url)
        polls = self._leaders.get(key)
        if polls is None:
            polls = self._leaders[key] = _LeaderPolls(self, leader, url)
        try:
            return await polls.read((tp, offset, max_bytes))
        finally:
            self._forget_if_idle(polls)

    def _forget_if_idle(self, polls: _LeaderPolls) -> None:
        key = (polls.leader, polls.url)
        if polls.idle() and self._leaders.get(key) is polls:
            del self._leaders[key]

    def polls_in_flight(self) -> int:
        return sum(len(p.polls) for p in self._leaders.values())

    def reads_waiting(self) -> int:
        return sum(len(p.entries) for p in self._leaders.values())

    async def close(self) -> None:
        """Stop every poll; reads still waiting end with BROKER_NOT_AVAILABLE."""
        self._closed = True
        for polls in list(self._leaders.values()):
            await polls.close()
        self._leaders.clear()


class _LeaderPolls:
    def __init__(self, owner: RemoteReads, leader: int, url: str) -> None:
        self.owner = owner
        self.leader = leader
        self.url = url
        # The queue, in the order reads go out: new ones and ones answered empty
        # join at the back.
        self.entries: dict[ReadKey, _Entry] = {}
        self.polls: set[asyncio.Task[None]] = set()

    def idle(self) -> bool:
        return not self.entries and not self.polls

    async def read(self, key: ReadKey) -> FetchPartitionResponse:
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(key)
        fut: asyncio.Future[FetchPartitionResponse] = asyncio.get_running_loop().create_future()
        entry.waiters.add(fut)
        self._kick()
        try:
            return await fut
        finally:
            entry.waiters.discard(fut)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved, even when our task was cancelled meanwhile
            if not entry.waiters and not entry.in_flight and self.entries.get(key) is entry:
                del self.entries[key]

    def _kick(self) -> None:
        """Send the first waiting reads while polls are below their limit."""
        limits = self.owner.limits
        while len(self.polls) < limits.polls_per_leader_max and not self.owner._closed:
            waiting = (e for e in self.entries.values() if not e.in_flight)
            batch = list(itertools.islice(waiting, limits.reads_max))
            if not batch:
                return
            for entry in batch:
                entry.in_flight = True
            task = asyncio.create_task(self._poll(batch), name=f"stream-poll-{self.leader}")
            self.polls.add(task)

    async def _poll(self, batch: list[_Entry]) -> None:
        try:
            try:
                answers: list[FetchPartitionResponse | LograftError] = list(await self._send(batch))
            except LograftError as exc:
                answers = [exc] * len(batch)
            for entry, answer in zip(batch, answers, strict=True):
                entry.in_flight = False
                self._settle(entry, answer)
        finally:
            for entry in batch:
                entry.in_flight = False
            self.polls.discard(asyncio.current_task())
            self._kick()
            self.owner._forget_if_idle(self)

    def _settle(self, entry: _Entry, answer: FetchPartitionResponse | LograftError) -> None:
        if not entry.waiters:
            self._drop(entry)
            return
        if isinstance(answer, FetchPartitionResponse):
            if answer.error is not None:
                answer = answer.error
            elif not answer.data and self.owner._still_leads(self.leader, entry.key[0]):
                # Nothing yet: to the back of the queue, out again in its turn.
                if self.entries.get(entry.key) is entry:
                    del self.entries[entry.key]
                    self.entries[entry.key] = entry
                return
        for fut in entry.waiters:
            if fut.done():
                continue
            if isinstance(answer, LograftError):
                fut.set_exception(answer)
            else:
                fut.set_result(answer)
        self._drop(entry)

    def _drop(self, entry: _Entry) -> None:
        if self.entries.get(entry.key) is entry:
            del self.entries[entry.key]

    async def _send(self, batch: list[_Entry]) -> list[FetchPartitionResponse]:
        limits = self.owner.limits
        req = StreamFetchRequest(
            limits.wait_ms,
            limits.bytes_max,
            tuple(ConsumerRead(tp, offset, size) for tp, offset, size in (e.key for e in batch)),
        )
        # Unreachable: BROKER_NOT_AVAILABLE; refused: the leader's error. Either
        # answers every read of this poll, and the streams retry.
        body = await self.owner.calls.call(
            self.url,
            "POST",
            PATH,
            peer_id=self.leader,
            body=req.to_json(),
            timeout_ms=limits.wait_ms + limits.timeout_margin_ms,
        )
        try:
            parts = decode_response(body)
        except (InvalidRequestError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            parts = []
        if len(parts) != len(batch):
            raise BrokerNotAvailableError(
                f"broker {self.leader} sent a malformed stream fetch answer",
                leader_id=self.leader,
            )
        return parts

    async def close(self) -> None:
        polls = list(self.polls)
        for task in polls:
            task.cancel()
        if polls:
            await asyncio.wait(polls)
        stopping = BrokerNotAvailableError("this node is stopping", leader_id=self.leader)
        for entry in self.entries.values():
            for fut in entry.waiters:
                if not fut.done():
                    fut.set_exception(stopping)
        self.entries.clear()


__all__ = ["PollLimits", "RemoteReads"]

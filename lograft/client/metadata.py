"""The client's cache of cluster metadata: topic layouts and broker URLs.

Sources: `GET /v1/topics/{topic}` (partitions, leaders, leader epochs) and
`GET /v1/brokers` (broker id -> HTTP URL), asked of any node: the last node
that answered first, then the bootstrap URLs in order, then every broker URL
learnt since. A node that cannot be reached is skipped; when none can be,
`ClusterUnreachableError` names every URL tried and why.

Invariants:
- Entries are immutable snapshots (`TopicMetadata`) that are replaced, never
  mutated or removed, so another thread may read `cached()` at any time.
- At most one refresh per topic is in flight; concurrent callers share it.
- A topic is reported unknown only after every reachable node said so: a
  node that has not yet applied a just-created topic is not the last word.
- Loop-bound: everything but `cached()` runs on the client's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lograft.client.config import CommonConfig
from lograft.client.errors import (
    ClusterUnreachableError,
    NetworkError,
    OutcomeUnknownError,
    UnexpectedResponseError,
)
from lograft.client.throttle import ThrottledTransport
from lograft.client.transport import HttpResponse, HttpTransport, Transport
from lograft.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    LograftError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition

NO_LEADER = -1
# Errors after which the cached layout of a topic may be wrong (the producer
# and the consumer mark the topic stale on them).
STALE_METADATA_ERRORS = (
    NotLeaderOrFollowerError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    FencedLeaderEpochError,
    NetworkError,
)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # NO_LEADER while offline or being elected
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: tuple[PartitionMetadata, ...]  # index == partition number
    fetched_at: float  # monotonic seconds
    stale: bool = False  # an error said it is out of date; refresh before trusting leaders

    @property
    def count(self) -> int:
        return len(self.partitions)

    def available(self) -> list[int]:
        """Partitions that have a leader right now."""
        return [p.partition for p in self.partitions if p.leader != NO_LEADER]


def parse_topic(doc: Any, now: float) -> TopicMetadata:
    try:
        parts = sorted(doc["partitions"], key=lambda p: p["partition"])
        partitions = tuple(
            PartitionMetadata(
                partition=int(p["partition"]),
                leader=int(p["leader"]) if p.get("leader") is not None else NO_LEADER,
                leader_epoch=int(p.get("leader_epoch", -1)),
                replicas=tuple(int(r) for r in p.get("replicas", ())),
                isr=tuple(int(r) for r in p.get("isr", ())),
            )
            for p in parts
        )
        name = str(doc["name"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UnexpectedResponseError(f"topic description is malformed: {exc!r}") from None
    if [p.partition for p in partitions] != list(range(len(partitions))):
        raise UnexpectedResponseError(f"topic {name!r}: partitions are not 0..n-1")
    return TopicMetadata(name, partitions, now)


def parse_brokers(doc: Any) -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        for b in doc["brokers"]:
            url = (b.get("endpoints") or {}).get("http")
            if url and not b.get("fenced", False):
                out[int(b["id"])] = str(url).rstrip("/")
    except (KeyError, TypeError, ValueError) as exc:
        raise UnexpectedResponseError(f"broker list is malformed: {exc!r}") from None
    return out


class ClusterMetadata:
    def __init__(
        self,
        transport: Transport,
        bootstrap: Iterable[str],
        *,
        request_timeout_ms: int,
        metadata_max_age_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self.bootstrap: tuple[str, ...] = tuple(bootstrap)
        assert self.bootstrap, "at least one bootstrap URL"
        self._timeout_ms = request_timeout_ms
        self._max_age_s = metadata_max_age_ms / 1000
        self._clock = clock
        self._topics: dict[str, TopicMetadata] = {}
        self._brokers: dict[int, str] = {}
        self._last_good: str | None = None
        self._refreshing: dict[str, asyncio.Task[TopicMetadata]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.refreshes = 0  # topic refreshes done (for tests and stats)

    # -- reads (cheap, no I/O) -------------------------------------------------------------

    @property
    def brokers(self) -> Mapping[int, str]:
        return self._brokers

    def cached(self, topic: str) -> TopicMetadata | None:
        """The cached layout, or None. Safe from any thread."""
        return self._topics.get(topic)

    def leader_url(self, tp: TopicPartition) -> str | None:
        """URL of the partition's leader per the cache; None if unknown or stale."""
        meta = self._topics.get(tp.topic)
        if meta is None or meta.stale or tp.partition >= meta.count:
            return None
        leader = meta.partitions[tp.partition].leader
        return self._brokers.get(leader) if leader != NO_LEADER else None

    async def find_leader_url(self, tp: TopicPartition) -> str:
        """URL of the partition's leader, refreshing the topic's layout when
        the cache does not say (the one lookup the producer and the consumer
        share). Raises UnknownTopicOrPartitionError when the topic or the
        partition does not exist (a partition past a cached layout is asked
        for again first: partitions may have been added), and
        LeaderNotAvailableError when the partition has no leader with a known
        URL (the topic is then marked stale)."""
        url = self.leader_url(tp)
        if url is not None:
            return url
        meta = await self.topic(tp.topic)
        if tp.partition >= meta.count:
            # A layout cached before partitions were added does not know
            # them: ask the nodes before calling the partition missing.
            meta = await self.refresh(tp.topic)
        if tp.partition >= meta.count:
            raise UnknownTopicOrPartitionError(
                f"{tp} does not exist (the topic has {meta.count} partitions)",
                topic=tp.topic,
                partition=tp.partition,
            )
        leader = meta.partitions[tp.partition].leader
        url = self._brokers.get(leader) if leader != NO_LEADER else None
        if url is None:
            self.request_update(tp.topic)
            raise LeaderNotAvailableError(
                f"{tp} has no leader with a known URL (leader {leader})",
                topic=tp.topic,
                partition=tp.partition,
            )
        return url

    def candidates(self) -> list[str]:
        """Nodes to ask, in order: last that answered, bootstrap, known brokers."""
        out: list[str] = []
        for url in (self._last_good, *self.bootstrap, *self._brokers.values()):
            if url is not None and url not in out:
                out.append(url)
        return out

    # -- updates ---------------------------------------------------------------------------

    def request_update(self, topic: str) -> None:
        """Mark a topic stale: the next leader lookup refreshes it first."""
        meta = self._topics.get(topic)
        if meta is not None and not meta.stale:
            self._topics[topic] = replace(meta, stale=True)

    def apply_leader_hint(self, tp: TopicPartition, leader_id: Any, leader_url: Any) -> bool:
        """Use a NOT_LEADER_OR_FOLLOWER answer's `details` (leader_id, leader_url)
        at once; True if it named a usable leader. The topic is still refreshed
        in the background, since the hint covers one partition only."""
        if not isinstance(leader_id, int) or not isinstance(leader_url, str) or not leader_url:
            return False
        self._brokers[leader_id] = leader_url.rstrip("/")
        meta = self._topics.get(tp.topic)
        if meta is not None and tp.partition < meta.count:
            parts = list(meta.partitions)
            parts[tp.partition] = replace(parts[tp.partition], leader=leader_id)
            self._topics[tp.topic] = replace(meta, partitions=tuple(parts), stale=False)
            self._refresh_in_background(tp.topic)
        return True

    # -- I/O ----------------------------------------------------------------------------------

    async def request_any(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        urls: list[str] | None = None,
        idempotent: bool = True,
    ) -> HttpResponse:
        """Send to the first node that answers (any status). Only connection
        failures move on to the next node; all failing is ClusterUnreachableError.
        A request that is not `idempotent` (an admin change) is not sent again
        once it may have reached a node: OutcomeUnknownError."""
        errors: dict[str, str] = {}
        for url in urls if urls is not None else self.candidates():
            try:
                resp = await self._transport.request(
                    method,
                    url + path,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout_ms=self._timeout_ms,
                )
            except NetworkError as exc:
                if not idempotent and exc.details.get("sent", True):
                    raise outcome_unknown(method, url + path, exc) from exc
                errors[url] = exc.message
                continue
            self._last_good = url
            return resp
        raise unreachable(errors)

    async def bootstrap_brokers(self) -> dict[int, str]:
        """Load the broker list from any node; ClusterUnreachableError if none answers."""
        resp = await self.request_any("GET", "/v1/brokers")
        self._brokers.update(parse_brokers(resp.ok_json()))
        return dict(self._brokers)

    async def topic(self, name: str) -> TopicMetadata:
        """The topic's layout: from the cache when fresh, else refreshed now."""
        meta = self._topics.get(name)
        if meta is None or meta.stale:
            return await self.refresh(name)
        if self._clock() - meta.fetched_at > self._max_age_s:
            self._refresh_in_background(name)
        return meta

    def refresh_if_old(self, name: str) -> None:
        """Start a background refresh if the entry is older than metadata_max_age_ms
        (partitions may have been added). On the loop only."""
        meta = self._topics.get(name)
        if meta is not None and self._clock() - meta.fetched_at > self._max_age_s:
            self._refresh_in_background(name)

    async def refresh_at_most_every(self, name: str, interval_s: float) -> TopicMetadata:
        """The topic's layout, refreshed unless a fresh (not stale) entry is
        younger than `interval_s`: callers that poll for a leader change
        (the producer's back-off, `Sender._await_new_leader`) cost at most one
        refresh per topic per interval together, whatever their number."""
        meta = self._topics.get(name)
        if meta is not None and not meta.stale and self._clock() - meta.fetched_at < interval_s:
            return meta
        return await self.refresh(name)

    async def refresh(self, name: str) -> TopicMetadata:
        """Re-read one topic (and the broker list). Concurrent calls share one refresh."""
        task = self._refreshing.get(name)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._refresh(name))
            self._refreshing[name] = task
            task.add_done_callback(lambda _t: self._refreshing.pop(name, None))
        # shield: one caller giving up must not cancel the refresh others wait on.
        return await asyncio.shield(task)

    async def _refresh(self, name: str) -> TopicMetadata:
        errors: dict[str, str] = {}
        unknown: LograftError | None = None
        for url in self.candidates():
            answers = await asyncio.gather(
                self._transport.request(
                    "GET", f"{url}/v1/topics/{name}", timeout_ms=self._timeout_ms
                ),
                self._transport.request("GET", f"{url}/v1/brokers", timeout_ms=self._timeout_ms),
                return_exceptions=True,
            )
            failed = [a for a in answers if isinstance(a, BaseException)]
            if failed:
                if not all(isinstance(a, NetworkError) for a in failed):
                    raise failed[0]
                errors[url] = str(failed[0])
                continue
            topic_resp, brokers_resp = answers
            assert isinstance(topic_resp, HttpResponse) and isinstance(brokers_resp, HttpResponse)
            self._last_good = url
            if not topic_resp.ok:
                err = topic_resp.error()
                if isinstance(err, UnknownTopicOrPartitionError):
                    unknown = err
                    continue  # another node may have applied the topic already
                raise err
            self._brokers.update(parse_brokers(brokers_resp.ok_json()))
            meta = parse_topic(topic_resp.json(), self._clock())
            self._topics[name] = meta
            self.refreshes += 1
            return meta
        if unknown is not None:
            raise unknown
        raise unreachable(errors)

    def _refresh_in_background(self, name: str) -> None:
        if name in self._refreshing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._quiet_refresh(name))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _quiet_refresh(self, name: str) -> None:
        # A background refresh is an optimisation: a failure leaves the old
        # entry, and the next error marks it stale for a foreground refresh.
        with contextlib.suppress(LograftError):
            await self.refresh(name)

    async def close(self) -> None:
        tasks = [*self._background, *self._refreshing.values()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def unreachable(errors: Mapping[str, str]) -> ClusterUnreachableError:
    urls = list(errors)
    reasons = "; ".join(f"{u}: {why}" for u, why in errors.items())
    return ClusterUnreachableError(
        f"could not reach any lograft node of {', '.join(urls) or '(none)'} ({reasons})",
        urls=urls,
        errors=dict(errors),
    )


def outcome_unknown(method: str, url: str, exc: LograftError) -> OutcomeUnknownError:
    return OutcomeUnknownError(
        f"{method} {url} was sent but no answer came back ({exc.message}); it may or may "
        "not have taken effect: look before sending it again",
        url=url,
    )


def connect(config: CommonConfig, transport: Transport | None) -> tuple[Transport, ClusterMetadata]:
    """The transport (HTTP unless one is given, as tests do), honouring the
    nodes' quota throttles (client/throttle.py), and the metadata cache a
    producer, consumer or admin builds from its settings."""
    chosen: Transport = ThrottledTransport(
        transport
        or HttpTransport(
            connect_timeout_ms=config.connect_timeout_ms,
            connections_max=config.connections_max,
            client_id=config.client_id,
            response_max_bytes=config.response_max_bytes,
            credentials=config.credentials(),
            tls=config.tls_context(),
        )
    )
    metadata = ClusterMetadata(
        chosen,
        config.urls(),
        request_timeout_ms=config.request_timeout_ms,
        metadata_max_age_ms=config.metadata_max_age_ms,
    )
    return chosen, metadata

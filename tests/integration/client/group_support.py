"""Helpers for consumer-group tests of the client: a producer that writes until
told to stop, a poll loop per member that records what it consumed and when
it held which partition, the checks over those records, and a transport that
can cut a member off from its coordinator while its fetches still work."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lograft.client import AsyncConsumer, AsyncProducer, TopicPartition
from lograft.client.errors import NetworkError
from lograft.client.transport import HttpResponse, HttpTransport
from lograft.errors import LograftError
from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import start_cluster

# Pause between two sends of the background producer, s: a steady trickle
# (about 100 records/s) so records keep arriving while members come and go.
PRODUCE_PAUSE_S = 0.01


class CuttableTransport:
    """The real HTTP transport; after `cut()`, every consumer-group request
    (`/v1/groups/...`) fails as if the coordinator were unreachable, while
    fetches still work: a member that lost its coordinator but not the
    partition leaders, the case where it must stop consuming by itself."""

    def __init__(self) -> None:
        self.inner = HttpTransport()
        self.cut_off = False

    def cut(self) -> None:
        self.cut_off = True

    async def request(self, method: str, url: str, **kw: Any) -> HttpResponse:
        if self.cut_off and "/v1/groups/" in url:
            raise NetworkError(f"could not connect to {url} (cut by the test)", sent=False)
        return await self.inner.request(method, url, **kw)

    async def close(self) -> None:
        await self.inner.close()


class TrickleProducer:
    """Sends records round robin over the partitions until `stop()`; keeps
    what was acknowledged."""

    def __init__(self, url: str, topic: str, partitions: int) -> None:
        self.producer = AsyncProducer(url, linger_ms=0)
        self.topic = topic
        self.partitions = partitions
        self.acked: set[tuple[int, int]] = set()  # (partition, offset)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.producer.start()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            meta = await self.producer.send_and_wait(
                self.topic, b"r%d" % i, partition=i % self.partitions
            )
            self.acked.add((meta.partition, meta.offset))
            i += 1
            # Pacing, not synchronisation: a steady rate rather than a burst.
            await asyncio.sleep(PRODUCE_PAUSE_S)

    async def stop(self) -> None:
        """Stop sending and close the producer (also after a failure; again: nothing)."""
        self._stop.set()
        try:
            if self._task is not None:
                await self._task
        finally:
            await self.producer.close()


@dataclass
class Interval:
    member: str
    start: float
    end: float | None = None


@dataclass
class Ledger:
    """What every member of a group consumed, and when it held what."""

    records: dict[str, list[tuple[float, TopicPartition, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    held: dict[TopicPartition, list[Interval]] = field(default_factory=lambda: defaultdict(list))
    commits: dict[str, dict[TopicPartition, int]] = field(default_factory=lambda: defaultdict(dict))

    def assigned(self, member: str, tps: Iterable[TopicPartition]) -> None:
        now = time.monotonic()
        for tp in tps:
            self.held[tp].append(Interval(member, now))

    def released(self, member: str, tps: Iterable[TopicPartition]) -> None:
        now = time.monotonic()
        for tp in tps:
            open_ = [i for i in self.held[tp] if i.member == member and i.end is None]
            assert len(open_) == 1, f"{member} released {tp} it did not hold: {self.held[tp]}"
            open_[0].end = now

    def seen(self, member: str) -> set[tuple[int, int]]:
        return {(tp.partition, off) for _t, tp, off in self.records[member]}

    def all_seen(self) -> list[tuple[int, int]]:
        return [(tp.partition, off) for rs in self.records.values() for _t, tp, off in rs]

    def check_one_owner_at_a_time(self) -> None:
        """Per partition, the members' holding intervals never overlap, and
        every record a member got lies inside one of its intervals."""
        for tp, intervals in self.held.items():
            ordered = sorted(intervals, key=lambda i: i.start)
            for a, b in itertools.pairwise(ordered):
                assert a.end is not None and a.end <= b.start, (
                    f"{tp} held by {a.member} and {b.member} at once: {ordered}"
                )
        for member, recs in self.records.items():
            for t, tp, off in recs:
                assert any(
                    i.member == member and i.start <= t and (i.end is None or t <= i.end)
                    for i in self.held[tp]
                ), f"{member} got {tp}@{off} at {t} outside its holding of it: {self.held[tp]}"


class Member:
    """One AsyncConsumer of a group, polled in a task, recorded in a Ledger."""

    def __init__(
        self,
        name: str,
        ledger: Ledger,
        url: str,
        group: str,
        topic: str,
        *,
        commit_every_poll: bool = False,
        **settings: Any,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.transport = CuttableTransport()
        self.consumer = AsyncConsumer(url, group_id=group, transport=self.transport, **settings)
        self.topic = topic
        self.commit_every_poll = commit_every_poll
        self.lost: list[TopicPartition] = []
        self.commit_errors: list[str] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._task = asyncio.get_running_loop().create_task(self._run())

    def _on_assign(self, tps: list[TopicPartition]) -> None:
        self.ledger.assigned(self.name, tps)

    def _on_revoke(self, tps: list[TopicPartition]) -> None:
        self.ledger.released(self.name, tps)

    def _on_lost(self, tps: list[TopicPartition]) -> None:
        self.lost += tps
        self.ledger.released(self.name, tps)

    async def _run(self) -> None:
        while not self._stop.is_set():
            got = await self.consumer.poll(timeout_ms=100, max_records=20)
            now = time.monotonic()
            for tp, recs in got.items():
                self.ledger.records[self.name] += [(now, tp, r.offset) for r in recs]
            if got and self.commit_every_poll:
                positions = {tp: recs[-1].offset + 1 for tp, recs in got.items()}
                try:
                    await self.consumer.commit(positions)
                except LograftError as exc:  # cut off or fenced: not committed
                    self.commit_errors.append(exc.code)
                else:
                    self.ledger.commits[self.name].update(positions)

    def holding(self) -> set[TopicPartition]:
        return self.consumer.assignment()

    async def stop_polling(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    def resume_polling(self) -> None:
        """Poll again after `stop_polling` (an application that was stuck)."""
        assert self._task is None, "still polling"
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self, timeout_ms: int | None = None) -> None:
        """Stop polling, then close (commit, on_revoke, leave); on_revoke is
        recorded like a revocation."""
        try:
            await self.stop_polling()
        finally:
            await self.consumer.close(timeout_ms)


async def close_all(*members: Member) -> None:
    """A test's cleanup: close every member still open (closing twice does
    nothing), even after a failure; their errors are the test's, not this."""
    await asyncio.gather(*(m.close(timeout_ms=1_000) for m in members), return_exceptions=True)


def group_cluster(make_dir: Any, name: str, groups: Mapping[str, Any]) -> Iterator[LograftCluster]:
    """A three-node cluster whose `[groups]` settings are `groups` (a module
    fixture's body); its logs are printed when the module is done.
    `make_dir(basename)` gives a fresh directory (tmp_path_factory.mktemp)."""
    c = start_cluster(
        lambda attempt: LograftCluster(
            Path(make_dir(f"{name}-{attempt}")),
            3,
            overrides={n: {"groups": dict(groups)} for n in (1, 2, 3)},
        )
    )
    try:
        yield c
    finally:
        print(c.logs(lines=120))
        c.close()

"""Client consumer groups on three real nodes, while a producer keeps writing:
two members split six partitions, a third joins (2/2/2), one closes, and
together they get every record exactly once; a member cut off from its
coordinator stops by itself and the other takes over from the committed
offsets (duplicates only above them); a member process SIGKILLed is
replaced within its session from its commits; a second group gets every
record too; no partition is ever held by two members at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from lograft.client import TopicPartition
from tests.integration.client.group_support import (
    Ledger,
    Member,
    TrickleProducer,
    close_all,
    group_cluster,
)
from tests.integration.cluster_harness import LograftCluster
from tests.integration.data_plane import wait_in_sync
from tests.raft_support import eventually_async

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

PARTITIONS = 6
SESSION_TIMEOUT_MS = 2_000
GROUPS = {
    "offsets_topic_num_partitions": 3,
    "session_timeout_ms": SESSION_TIMEOUT_MS,
    "group_heartbeat_interval_ms": 200,
}
# Conditions that take a few heartbeat rounds (or one session) get this long,
# s: generous, the machine is shared and loaded.
SETTLE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    yield from group_cluster(tmp_path_factory.mktemp, "cg", GROUPS)


def make_topic(cluster: LograftCluster, name: str) -> str:
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    wait_in_sync(cluster, name)
    return name


def urls(cluster: LograftCluster) -> str:
    return ",".join(n.url for n in cluster)


ALL_TPS = lambda topic: {TopicPartition(topic, p) for p in range(PARTITIONS)}  # noqa: E731


async def test_members_split_close_hands_over_and_a_second_group_sees_everything(cluster):
    topic = make_topic(cluster, "split")
    url = urls(cluster)
    producer = TrickleProducer(url, topic, PARTITIONS)
    g1, g2 = Ledger(), Ledger()
    common = {"auto_offset_reset": "earliest", "auto_commit_interval_ms": 300}
    a = Member("a", g1, url, "g1", topic, **common)
    b = Member("b", g1, url, "g1", topic, **common)
    d = Member("d", g1, url, "g1", topic, **common)
    c = Member("c", g2, url, "g2", topic, **common)

    def split(members: list[Member]) -> bool:
        sizes = [len(m.holding()) for m in members]
        union = set().union(*(m.holding() for m in members))
        return sizes == [PARTITIONS // len(members)] * len(members) and union == ALL_TPS(topic)

    try:
        await producer.start()
        try:
            await a.start()
            await c.start()
            await eventually_async(lambda: split([a]), SETTLE_S, "a holds all")
            await b.start()
            await eventually_async(lambda: split([a, b]), SETTLE_S, "a and b split 3/3")
            got_by_b = lambda: {tp.partition for _t, tp, _o in g1.records["b"]}  # noqa: E731
            await eventually_async(
                lambda: got_by_b() == {tp.partition for tp in b.holding()}, SETTLE_S, "b consumes"
            )
            await d.start()
            await eventually_async(lambda: split([a, b, d]), SETTLE_S, "a, b and d split 2/2/2")
            await a.close()  # commits its positions, revokes, leaves
            await eventually_async(lambda: split([b, d]), SETTLE_S, "b and d split 3/3")
            # Let them read some records of the partitions they took over.
            mark = len(g1.all_seen())
            await eventually_async(lambda: len(g1.all_seen()) > mark + 50, SETTLE_S, "going on")
        finally:
            await producer.stop()
        acked = producer.acked
        await eventually_async(
            lambda: g1.seen("a") | g1.seen("b") | g1.seen("d") >= acked, SETTLE_S, "g1 all"
        )
        await eventually_async(lambda: g2.seen("c") >= acked, SETTLE_S, "g2 all")
        await b.close()
        await d.close()
        await c.close()

        # Graceful hand-overs commit before giving up: every record exactly once.
        dup = [k for k, n in Counter(g1.all_seen()).items() if n > 1]
        assert not dup, f"records consumed twice in g1: {sorted(dup)[:20]}"
        assert g1.seen("a") and g1.seen("b") and g1.seen("d")
        assert sorted(g2.all_seen()) == sorted(acked)
        g1.check_one_owner_at_a_time()
        g2.check_one_owner_at_a_time()
    finally:
        await close_all(a, b, c, d)


async def test_a_member_cut_off_stops_and_the_other_resumes_from_its_commits(cluster):
    topic = make_topic(cluster, "takeover")
    url = urls(cluster)
    producer = TrickleProducer(url, topic, PARTITIONS)
    ledger = Ledger()
    # Manual commits after each poll; a short API timeout so commits of the
    # cut-off member fail fast instead of retrying for a minute.
    common = {
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "default_api_timeout_ms": 1_000,
    }
    a = Member("a", ledger, url, "takeover", topic, commit_every_poll=True, **common)
    b = Member("b", ledger, url, "takeover", topic, commit_every_poll=True, **common)
    try:
        await producer.start()
        try:
            await a.start()
            await eventually_async(lambda: a.holding() == ALL_TPS(topic), SETTLE_S, "a holds all")
            await b.start()

            def split() -> bool:
                ha, hb = a.holding(), b.holding()
                return len(ha) == len(hb) == PARTITIONS // 2 and ha | hb == ALL_TPS(topic)

            await eventually_async(split, SETTLE_S, "a and b split the partitions 3/3")
            a_parts = a.holding()
            await eventually_async(
                lambda: a_parts <= set(ledger.commits["a"]), SETTLE_S, "a commits on its partitions"
            )
            a.transport.cut()  # a keeps polling, and its fetches still work
            await eventually_async(
                lambda: set(a.lost) == a_parts, SETTLE_S, "a drops its partitions"
            )
            assert not a.holding()
            await eventually_async(lambda: b.holding() == ALL_TPS(topic), SETTLE_S, "b takes all")
            mark = len(ledger.records["b"])
            await eventually_async(
                lambda: len(ledger.records["b"]) > mark + 50, SETTLE_S, "b goes on"
            )
        finally:
            await producer.stop()
        acked = producer.acked
        await eventually_async(
            lambda: ledger.seen("b") | ledger.seen("a") >= acked, SETTLE_S, "all"
        )
        await a.close(timeout_ms=500)
        await b.close()

        a_committed = ledger.commits["a"]
        for tp in a_parts:
            b_got = [(t, off) for t, tp2, off in ledger.records["b"] if tp2 == tp]
            a_last = max(t for t, tp2, _o in ledger.records["a"] if tp2 == tp)
            # a stopped by itself (its session ran out) before b got the partition...
            assert b_got and a_last < b_got[0][0], (tp, a_last, b_got[:1])
            # ...and b starts exactly at a's last successful commit of it.
            assert b_got[0][1] == a_committed[tp], (tp, b_got[:3], a_committed)
        # Duplicates only from what a consumed after its last commit (at-least-once).
        for (partition, offset), n in Counter(ledger.all_seen()).items():
            if n > 1:
                tp = TopicPartition(topic, partition)
                assert n == 2 and tp in a_parts and offset >= a_committed[tp], (tp, offset, n)
    finally:
        await close_all(a, b)


REPO = Path(__file__).resolve().parents[3]


def worker_view(path: Path) -> tuple[set[int], list[tuple[int, int]], dict[int, int]]:
    """What a group_worker process wrote: partitions held, records, last commits."""
    held: set[int] = set()
    records: list[tuple[int, int]] = []
    committed: dict[int, int] = {}
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        kind, *nums = line.split()
        if len(nums) != (1 if kind in ("assigned", "revoked", "lost") else 2):
            continue  # the last line may be half written
        if kind == "assigned":
            held.add(int(nums[0]))
        elif kind in ("revoked", "lost"):
            held.discard(int(nums[0]))
        elif kind == "record":
            records.append((int(nums[0]), int(nums[1])))
        elif kind == "committed":
            committed[int(nums[0])] = int(nums[1])
    return held, records, committed


async def test_a_member_process_killed_is_replaced_from_its_commits(cluster, tmp_path):
    topic = make_topic(cluster, "killed")
    url = urls(cluster)
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    producer = TrickleProducer(url, topic, PARTITIONS)
    ledger = Ledger()
    b = Member(
        "b",
        ledger,
        url,
        "killed",
        topic,
        commit_every_poll=True,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        await producer.start()
        with open(err, "wb") as err_file:
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.integration.client.group_worker",
                    url,
                    "killed",
                    topic,
                    str(out),
                ],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=err_file,
            )
        try:
            await eventually_async(
                lambda: len(worker_view(out)[0]) == PARTITIONS, SETTLE_S, "the worker holds all"
            )
            await b.start()
            await eventually_async(
                lambda: len(b.holding()) == 3 and len(worker_view(out)[0]) == 3,
                SETTLE_S,
                "a 3/3 split with the worker",
            )
            kept = worker_view(out)[0]
            await eventually_async(
                lambda: kept <= set(worker_view(out)[2]),
                SETTLE_S,
                "worker commits on its partitions",
            )
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait()
            killed_at = time.monotonic()
            await eventually_async(lambda: b.holding() == ALL_TPS(topic), SETTLE_S, "b takes all")
            takeover_s = time.monotonic() - killed_at
            mark = len(ledger.records["b"])
            await eventually_async(
                lambda: len(ledger.records["b"]) > mark + 50, SETTLE_S, "b goes on"
            )
        finally:
            await producer.stop()
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        acked = producer.acked
        _held, w_records, w_committed = worker_view(out)
        await eventually_async(lambda: ledger.seen("b") | set(w_records) >= acked, SETTLE_S, "all")
        await b.close()

        # The coordinator moved the partitions once the session ran out (2 s),
        # not before; the bound is loose for a loaded machine.
        assert SESSION_TIMEOUT_MS / 1000 * 0.5 <= takeover_s < SETTLE_S, takeover_s
        for p in kept:
            b_offsets = [off for _t, tp, off in ledger.records["b"] if tp.partition == p]
            # b starts at the worker's last commit: the last one it noted, or the
            # one in flight when it died (it notes a commit after its answer),
            # which covered the last records it noted.
            last_read = max(off for p2, off in w_records if p2 == p)
            assert b_offsets and b_offsets[0] in (w_committed[p], last_read + 1), (
                p,
                b_offsets[:3],
                w_committed,
                last_read,
            )
        seen = Counter(w_records + ledger.all_seen())
        for (p, offset), n in seen.items():
            if n > 1:  # read by the worker after its last commit, then again by b
                assert n == 2 and p in kept and offset >= w_committed[p], (p, offset, n)
    finally:
        await close_all(b)


async def test_the_group_carries_on_when_its_coordinators_node_is_killed(cluster):
    """Last in this module: it kills a node (restarted at the end)."""
    topic = make_topic(cluster, "coordinator-killed")
    url = urls(cluster)
    producer = TrickleProducer(url, topic, PARTITIONS)
    ledger = Ledger()
    common = {"auto_offset_reset": "earliest", "auto_commit_interval_ms": 200}
    a = Member("a", ledger, url, "coordinator-killed", topic, **common)
    b = Member("b", ledger, url, "coordinator-killed", topic, **common)
    victim = None
    try:
        await producer.start()
        try:
            await a.start()
            await b.start()
            await eventually_async(
                lambda: len(a.holding()) == len(b.holding()) == 3, SETTLE_S, "a 3/3 split"
            )
            group = a.consumer.group
            assert group is not None
            old_coordinator = group.coordinator.url

            async def committed_all() -> dict[TopicPartition, int | None]:
                return {tp: await a.consumer.committed(tp) for tp in sorted(ALL_TPS(topic))}

            async def all_committed() -> dict[TopicPartition, int | None] | None:
                got = await committed_all()
                return got if all(off is not None for off in got.values()) else None

            before = await eventually_async(all_committed, SETTLE_S, "commits on every partition")
            victim = next(n for n in cluster if n.url == old_coordinator)
            victim.kill()
            mark = len(ledger.all_seen())
            # Both members carry on: records keep coming, through the new coordinator.
            await eventually_async(
                lambda: (
                    len(ledger.all_seen()) > mark + 100
                    and group.coordinator.url not in (None, old_coordinator)
                ),
                SETTLE_S,
                "consuming again after the coordinator's node died",
            )
        finally:
            await producer.stop()
        acked = producer.acked
        await eventually_async(
            lambda: ledger.seen("a") | ledger.seen("b") >= acked, SETTLE_S, "every record"
        )
        after = await committed_all()
        # No committed offset was lost: each is where it was or further.
        for tp, offset in before.items():
            if offset is not None:
                assert after[tp] is not None and after[tp] >= offset, (tp, offset, after[tp])
    finally:
        await close_all(a, b)
        if victim is not None and not victim.running:
            victim.restart()

"""Leader failover with real node processes: no acknowledged record is lost,
the old leader truncates its divergent tail and rejoins, idempotent retries
are answered from the new leader's rebuilt producer state (issue 4).

Default broker sessions (1500 ms), so a SIGKILLed leader is fenced and
replaced within a few seconds; preferred-leader balance every 500 ms, so a
restarted leader that is back in the ISR becomes leader again and its log
can be read over HTTP.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.cluster_harness import ClusterNode, LograftCluster, http_request
from tests.integration.data_plane import (
    BATCH_TYPE,
    batch_of,
    describe,
    fetch_all,
    fetch_all_raw,
    leader_of,
    offsets,
    pick_partition,
    post_batches,
    produce,
    produce_error,
    produce_ok,
    running_cluster,
    segment_records,
    wait_in_sync,
    wait_serving,
)

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

# Acknowledgements each producer must collect before the kill and again after it.
ACKS_BEFORE = 15
ACKS_AFTER = 15
PRODUCER_DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LograftCluster]:
    with running_cluster(
        tmp_path_factory,
        "failover",
        log_lines=150,
        controller={"leader_imbalance_check_interval_ms": 500},
    ) as c:
        yield c


@pytest.fixture(autouse=True)
def whole_cluster(cluster: LograftCluster) -> None:
    """Each test starts with every node running and ready."""
    for node in cluster:
        if not node.running:
            node.start()
    cluster.wait_ready()


# -- background producers --------------------------------------------------------------------


@dataclass
class Acked:
    value: str
    offset: int


@dataclass
class Producer:
    """Sends unique values to one partition, one request at a time, until
    stopped; records every acknowledged value with its offset, in ack order."""

    name: str
    cluster: LograftCluster
    topic: str
    partition: int
    acked: list[Acked] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    fatal: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._guarded, name=self.name, daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=PRODUCER_DEADLINE_S)
        assert not self.thread.is_alive(), f"{self.name} did not stop"
        assert not self.fatal, f"{self.name}: {self.fatal}"

    def wait_acks(self, count: int, timeout_s: float = 30.0) -> None:
        def enough() -> bool:
            assert not self.fatal, f"{self.name}: {self.fatal}"
            return len(self.acked) >= count

        self.cluster.eventually(enough, timeout_s, f"{self.name}: {count} acks ({self.failures})")

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # surfaced by halt() / wait_acks()
            self.fatal.append(repr(exc))

    def run(self) -> None:
        raise NotImplementedError

    def backoff(self) -> None:
        self.stop.wait(0.05)  # retry pacing, not synchronisation


@dataclass
class JsonProducer(Producer):
    """JSON records through a fixed node (`via`) that routes them to the
    leader. A failed value is never sent again (its outcome is unknown), so a
    value that shows up twice in the log was duplicated by the cluster."""

    via: ClusterNode | None = None

    def run(self) -> None:
        assert self.via is not None
        seq = 0
        while not self.stop.is_set():
            value = f"{self.name}-{seq}"
            seq += 1
            try:
                resp = produce(
                    self.via, self.topic, [{"value": value, "partition": self.partition}], "all"
                )
            except OSError as exc:
                self.failures[type(exc).__name__] += 1
                self.backoff()
                continue
            if resp.status == 200:
                self.acked.append(Acked(value, resp.body["offsets"][0]["offset"]))
                continue
            error = produce_error(resp) or {}
            if not error.get("retriable"):
                self.fatal.append(f"{value}: {resp}")
                return
            self.failures[error["code"]] += 1
            self.backoff()


class IdempotentProducer(Producer):
    """Raw idempotent batches straight to the leader it finds, each batch
    retried (same producer id, epoch and sequence) until acknowledged."""

    def run(self) -> None:
        node = self.cluster.running()[0]
        pid = node.ok("POST", "/v1/producers", status=201)["producer_id"]
        seq = 0
        url = self._leader_url()
        while not self.stop.is_set():
            value = f"{self.name}-{seq}"
            data = batch_of([value.encode()], producer_id=pid, producer_epoch=0, base_sequence=seq)
            deadline = time.monotonic() + PRODUCER_DEADLINE_S
            while True:
                if time.monotonic() > deadline:
                    self.fatal.append(f"{value}: not acknowledged in {PRODUCER_DEADLINE_S}s")
                    return
                try:
                    resp = http_request(
                        "POST",
                        f"{url}/v1/topics/{self.topic}/partitions/{self.partition}/batches"
                        "?acks=all",
                        data,
                        headers={"Content-Type": BATCH_TYPE},
                    )
                except OSError as exc:
                    self.failures[type(exc).__name__] += 1
                    self.backoff()
                    url = self._leader_url()
                    continue
                if resp.status == 200:
                    self.acked.append(Acked(value, resp.body["base_offset"]))
                    if resp.body["duplicate"]:
                        self.failures["retry-answered-duplicate"] += 1
                    break
                error = resp.body["error"] if isinstance(resp.body, dict) else {}
                if not error.get("retriable"):
                    self.fatal.append(f"{value}: {resp}")
                    return
                self.failures[error["code"]] += 1
                leader_url = error.get("details", {}).get("leader_url")
                self.backoff()
                url = leader_url or self._leader_url()
            seq += 1

    def _leader_url(self) -> str:
        """The leader's URL as any running node's metadata has it (or any node)."""
        for node in self.cluster.running():
            try:
                leader = leader_of(node, self.topic, self.partition)
            except (OSError, AssertionError):
                continue
            if leader >= 0:
                return self.cluster[leader].url
        return self.cluster.running()[0].url


def check_acknowledged(producers: list[Producer], log: list[dict[str, Any]]) -> None:
    """Every acknowledged value is in the log exactly once, at the offset its
    acknowledgement gave, in acknowledgement order per producer."""
    at = {r["offset"]: r["value"] for r in log}
    seen = Counter(r["value"] for r in log)
    duplicated = {v: n for v, n in seen.items() if n > 1}
    assert not duplicated, f"values written more than once: {duplicated}"
    for p in producers:
        missing = [a for a in p.acked if a.value not in seen]
        assert not missing, f"{p.name}: acknowledged but lost: {missing[:10]} of {len(missing)}"
        moved = [(a, at.get(a.offset)) for a in p.acked if at.get(a.offset) != a.value]
        assert not moved, f"{p.name}: not at their acknowledged offsets: {moved[:10]}"
        ack_offsets = [a.offset for a in p.acked]
        assert ack_offsets == sorted(ack_offsets), f"{p.name}: out of acknowledgement order"


# -- the tests -------------------------------------------------------------------------------


def test_sigkilled_leader_loses_no_acknowledged_record_and_rejoins_truncated(
    cluster: LograftCluster,
) -> None:
    topic = "stream"
    cluster.create_topic(topic, partitions=3)
    parts = wait_in_sync(cluster, topic)
    # The partition led by the active controller: killing its leader also
    # kills the controller, and (below) both followers can be paused without
    # pausing the controller that has to fence the dead leader afterwards.
    old = cluster.active_controller()
    p = pick_partition(parts, old.node_id)
    followers = [n for n in cluster if n is not old]
    router = followers[0]

    json_producer = JsonProducer("json", cluster, topic, p, via=router)
    idem_producer = IdempotentProducer("idem", cluster, topic, p)
    producers: list[Producer] = [json_producer, idem_producer]
    for prod in producers:
        prod.start()
    try:
        for prod in producers:
            prod.wait_acks(ACKS_BEFORE)

        # A divergent tail, deterministically: with both followers stopped,
        # records the leader takes with acks=1 exist only in its log; but
        # only once no fetch of theirs is pending at the leader, though: a
        # long-poll sent before the SIGSTOP would carry new records into the
        # stopped follower's socket buffer. A barrier record wakes every such
        # fetch (it answers at once when data arrives), and a stopped
        # follower sends no new one.
        paused: list[ClusterNode] = []
        try:
            for f in followers:
                f.pause()
                paused.append(f)
            produce_ok(cluster, old, topic, [{"value": "barrier", "partition": p}], acks="1")
            tail = produce_ok(
                cluster,
                old,
                topic,
                [{"value": f"divergent-{i}", "partition": p} for i in range(3)],
                acks="1",
            )
            state = offsets(old, topic, p)
            assert state["log_end_offset"] > state["latest"], state
            acked_at_kill = {prod.name: len(prod.acked) for prod in producers}
            old.kill()
        finally:
            for f in paused:
                f.resume()
        t_kill = time.monotonic()

        observer = followers[1]

        def new_leader() -> int | None:
            leader = leader_of(observer, topic, p)
            return leader if leader not in (-1, old.node_id) else None

        new_id = cluster.eventually(new_leader, 30, f"a new leader of {topic}-{p}")
        failover_s = time.monotonic() - t_kill
        for prod in producers:
            prod.wait_acks(acked_at_kill[prod.name] + ACKS_AFTER)
    finally:
        for prod in producers:
            prod.stop.set()
    for prod in producers:
        prod.halt()
    leader = cluster[new_id]
    wait_serving(cluster, leader, topic, p)

    # The dead leader's files hold the divergent records (and the new leader does not).
    divergent = {f"divergent-{i}" for i in range(3)}
    on_disk = {r.value for r in segment_records(old.spec.data_dir, topic, p)}
    assert {f'"{v}"'.encode() for v in divergent} <= on_disk

    def settled() -> dict[str, Any] | None:
        state = offsets(leader, topic, p)
        return state if state["latest"] == state["log_end_offset"] else None

    cluster.eventually(settled, 30, "the new leader's HW to reach its LEO")
    log = fetch_all(leader, topic, p)
    assert [r["offset"] for r in log] == list(range(len(log))), "offsets are not dense"
    check_acknowledged(producers, log)
    assert not {r["value"] for r in log} & divergent, "the old leader's acks=1 tail survived"
    leader_bytes, leader_hw = fetch_all_raw(leader, topic, p)

    # The old leader comes back, truncates its tail, catches up and rejoins...
    old.start()
    old.wait_ready()
    cluster.eventually(
        lambda: old.node_id in describe(leader, topic)[p]["isr"], 30, "the old leader in the ISR"
    )
    # ... and, as preferred replica, leads again: its log, read over HTTP,
    # is byte for byte the new leader's below the HW.
    cluster.eventually(lambda: leader_of(leader, topic, p) == old.node_id, 30, "leader moved back")
    wait_serving(cluster, old, topic, p)
    cluster.eventually(
        lambda: offsets(old, topic, p)["latest"] >= leader_hw, 30, "old leader's HW caught up"
    )
    state = offsets(old, topic, p)
    assert state["log_end_offset"] == leader_hw, (state, leader_hw)
    old_bytes, _hw = fetch_all_raw(old, topic, p)
    assert old_bytes == leader_bytes
    print(
        f"\n[failover] partition {topic}-{p}: leader {old.node_id} killed, {new_id} led after "
        f"{failover_s:.1f}s; acks json={len(json_producer.acked)} idem={len(idem_producer.acked)}; "
        f"retries json={dict(json_producer.failures)} idem={dict(idem_producer.failures)}; "
        f"log {len(log)} records, divergent tail at offsets {[o['offset'] for o in tail]}"
    )


def test_idempotent_retry_after_failover_is_answered_as_duplicate(
    cluster: LograftCluster,
) -> None:
    topic = "idem-failover"
    cluster.create_topic(topic, partitions=1)
    doc = wait_in_sync(cluster, topic)[0]
    old = cluster[doc["leader"]]
    # Election takes the first in-sync replica in preferred order.
    successor = cluster[next(r for r in doc["replicas"] if r != old.node_id)]
    pid = cluster[1].ok("POST", "/v1/producers", status=201)["producer_id"]

    def batch(seq: int, n: int) -> bytes:
        vals = [f"s{seq + i}".encode() for i in range(n)]
        return batch_of(vals, producer_id=pid, producer_epoch=0, base_sequence=seq)

    first = post_batches(old, topic, 0, batch(0, 2))
    second = post_batches(old, topic, 0, batch(2, 3))
    assert (first.status, second.status) == (200, 200), (first, second)
    assert second.body["base_offset"] == 2

    # The successor restarts: its producer state now comes from its log alone.
    successor.restart()
    cluster.eventually(
        lambda: sorted(describe(old, topic)[0]["isr"]) == [1, 2, 3], 30, "successor back in ISR"
    )
    old.kill()
    survivors = [n for n in cluster if n is not old]

    def led_by_successor() -> bool:
        return all(leader_of(n, topic, 0) == successor.node_id for n in survivors)

    cluster.eventually(led_by_successor, 30, f"broker {successor.node_id} to lead {topic}")

    def retried() -> Any:
        resp = post_batches(successor, topic, 0, batch(2, 3))
        if resp.status == 421:  # its replica manager is a moment behind the image
            return None
        return resp

    resp = cluster.eventually(retried, 15, "the retry to reach the new leader")
    assert resp.status == 200, resp
    assert (resp.body["base_offset"], resp.body["last_offset"], resp.body["duplicate"]) == (
        2,
        4,
        True,
    )
    older = post_batches(successor, topic, 0, batch(0, 2))
    assert (older.body["base_offset"], older.body["duplicate"]) == (0, True), older
    assert offsets(successor, topic, 0)["log_end_offset"] == 5
    # The producer carries on from the next sequence; a gap is still refused.
    nxt = post_batches(successor, topic, 0, batch(5, 1))
    assert (nxt.status, nxt.body["base_offset"], nxt.body["duplicate"]) == (200, 5, False), nxt
    gap = post_batches(successor, topic, 0, batch(7, 1))
    assert (gap.status, gap.body["error"]["code"]) == (409, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert [r["value"] for r in fetch_all(successor, topic, 0)] == [f"s{i}" for i in range(6)]

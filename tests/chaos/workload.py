"""The Jepsen-style queue workload that runs while a scenario injects faults.

Writers send unique string values "<writer>-<seq>" with acks=all, each to a
partition its own seeded rng picks, one every `send_interval_ms`:

- `ClientWriter`: the lograft.client `Producer`, idempotent or not;
- `HttpWriter`: raw JSON produce (`POST /v1/topics/{t}/records`), one record
  per request, always to its own node (which forwards to the leader): one
  writer per node. It is the one writer that knows which node answered, so
  it is what the minority-ack check sees; pinning it to a node means a
  writer whose request hangs on a cut-off node stalls only that node's
  probe, while the isolated node's own writer keeps asking it.
- probes: the same raw HTTP writer, one more per node, that gives up on a
  request after `probe_request_timeout_ms` (its outcome then unknown). A
  writer that waits the full request timeout can spend a whole isolation
  window on one request invoked just before the cut (which proves nothing
  about the isolation); a probe keeps sending into the window, so the
  minority-ack check has evidence (checker.inconclusive requires some).

`ClientReader` polls every partition from the start with the lograft.client
`Consumer` during the run. Every outcome and every record read is recorded
with monotonic timestamps in a `Recorder`; `Workload` starts and stops them
together. tests/chaos/final_state.py does the reads after healing.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lograft.client import Consumer, Producer, TopicPartition, deserializers, serializers
from lograft.client.errors import ClusterUnreachableError, DeliveryTimeoutError
from lograft.errors import LograftError
from tests.chaos.history import Outcome, Read, Send
from tests.integration.cluster_harness import LograftCluster, eventually, http_request

# Error codes that mean "nothing was written": the broker refused before it
# appended (NOT_ENOUGH_REPLICAS is checked first, see brokers/partition.py),
# or the request was malformed. Any other error leaves the outcome unknown
# (e.g. NOT_LEADER_OR_FOLLOWER may fail an acks=all wait after the append).
DEFINITE_ERROR_CODES = frozenset(
    {
        "NOT_ENOUGH_REPLICAS",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "INVALID_REQUEST",
        "INVALID_RECORD",
        "CORRUPT_MESSAGE",
        "MESSAGE_TOO_LARGE",
        "CLUSTER_UNREACHABLE",
    }
)


@dataclass(frozen=True)
class WorkloadSettings:
    # "all" for the real suite. "1" exists to check the checker: acks=1 writes
    # acknowledged by a leader that dies before its followers fetched them are
    # truly lost, and the checker must say so (docs/reliability.md). Writers
    # are never idempotent with acks=1 (the client refuses it, as Kafka's does).
    acks: str = "all"
    # Pause between two sends of one writer, in ms (a pace, not a wait for anything).
    send_interval_ms: int = 25
    idempotent_client_writers: int = 2
    plain_client_writers: int = 1
    # Raw HTTP writers per node, each pinned to its node.
    http_writers_per_node: int = 1
    # Raw HTTP probes per node ("p<node>"), pinned like the writers but giving up
    # on a request after probe_request_timeout_ms.
    http_probes_per_node: int = 1
    # A probe's request timeout, in ms: well under the shortest isolation window
    # (the fault is held at least 2 s after the cluster reacted), so several
    # probes are invoked inside every window.
    probe_request_timeout_ms: int = 1_000
    readers: int = 1
    # One client request, in ms: above the chaos brokers' produce_timeout_ms
    # (runner.CHAOS_BROKER) so the broker answers REQUEST_TIMED_OUT first.
    request_timeout_ms: int = 8_000
    # A send not acknowledged this long after it was made fails (unknown), in ms.
    delivery_timeout_ms: int = 30_000
    # How long `send` may block on metadata or buffer room, in ms.
    max_block_ms: int = 5_000
    # Closing a writer's producer waits this long for its records, in ms;
    # those still in flight then are recorded as unknown.
    close_timeout_ms: int = 15_000
    # A consumer poll's wait, in ms.
    poll_timeout_ms: int = 300
    # Pause after a reader's poll failed, in ms.
    reader_backoff_ms: int = 200


class Recorder:
    """Thread-safe append-only lists of sends and reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sends: list[Send] = []
        self.reads: list[Read] = []

    def send(self, send: Send) -> None:
        with self._lock:
            self.sends.append(send)

    def read(self, read: Read) -> None:
        with self._lock:
            self.reads.append(read)

    def snapshot(self) -> tuple[list[Send], list[Read]]:
        with self._lock:
            return list(self.sends), list(self.reads)

    def acked_since(self, partition: int, since_s: float) -> bool:
        with self._lock:
            return any(
                s.partition == partition and s.outcome is Outcome.OK and s.invoked_s >= since_s
                for s in self.sends
            )


def classify(exc: BaseException) -> Outcome:
    """The outcome of a send that raised `exc` (see tests/chaos/history.py)."""
    if isinstance(exc, DeliveryTimeoutError):
        return Outcome.UNKNOWN if exc.details.get("maybe_appended", True) else Outcome.FAIL
    if isinstance(exc, ClusterUnreachableError):
        return Outcome.FAIL  # no node was reached: nothing was sent
    if isinstance(exc, LograftError) and exc.code in DEFINITE_ERROR_CODES:
        return Outcome.FAIL
    return Outcome.UNKNOWN


def _error_code(exc: BaseException) -> str:
    return exc.code if isinstance(exc, LograftError) else type(exc).__name__


class _Worker(threading.Thread):
    def __init__(self, name: str, stop: threading.Event, errors: list[str]) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.worker = name
        self.stop_event = stop
        self.errors = errors

    def run(self) -> None:
        try:
            self.work()
        except Exception as exc:  # a crashed worker must fail the run, not vanish
            self.errors.append(f"{self.worker}: {exc!r}")

    def work(self) -> None:
        raise NotImplementedError


class ClientWriter(_Worker):
    def __init__(
        self,
        name: str,
        *,
        bootstrap: str,
        topic: str,
        partitions: list[int],
        idempotent: bool,
        settings: WorkloadSettings,
        recorder: Recorder,
        rng: random.Random,
        stop: threading.Event,
        errors: list[str],
    ) -> None:
        super().__init__(name, stop, errors)
        self.idempotent = idempotent and settings.acks == "all"
        self.topic, self.partitions = topic, partitions
        self.settings, self.recorder, self.rng = settings, recorder, rng
        self.producer = Producer(
            bootstrap,
            acks=settings.acks,
            enable_idempotence=self.idempotent,
            value_serializer=serializers.str,
            request_timeout_ms=settings.request_timeout_ms,
            delivery_timeout_ms=settings.delivery_timeout_ms,
            max_block_ms=settings.max_block_ms,
        )
        self._pending: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def _record(
        self, value: str, outcome: Outcome, *, offset: int | None = None, error: str | None = None
    ) -> None:
        with self._lock:
            entry = self._pending.pop(value, None)
        if entry is None:
            return  # recorded already
        partition, invoked = entry
        self.recorder.send(
            Send(
                self.worker,
                self.idempotent,
                value,
                partition,
                invoked,
                time.monotonic(),
                outcome,
                offset,
                None,
                error,
            )
        )

    def _on_done(self, value: str) -> Callable[[Any], None]:
        def done(fut: Any) -> None:
            exc = fut.exception()
            if exc is None:
                self._record(value, Outcome.OK, offset=fut.result().offset)
            else:
                self._record(value, classify(exc), error=_error_code(exc))

        return done

    def work(self) -> None:
        seq = 0
        try:
            while not self.stop_event.is_set():
                value = f"{self.worker}-{seq}"
                seq += 1
                partition = self.rng.choice(self.partitions)
                with self._lock:
                    self._pending[value] = (partition, time.monotonic())
                try:
                    fut = self.producer.send(self.topic, value, partition=partition)
                except LograftError as exc:
                    self._record(value, classify(exc), error=exc.code)
                else:
                    fut.add_done_callback(self._on_done(value))
                self.stop_event.wait(self.settings.send_interval_ms / 1000)
        finally:
            try:
                self.producer.close(timeout_ms=self.settings.close_timeout_ms)
            finally:
                with self._lock:
                    left = list(self._pending)
                for value in left:  # still unresolved after close: nobody knows
                    self._record(value, Outcome.UNKNOWN, error="UNRESOLVED_AT_CLOSE")


class HttpWriter(_Worker):
    def __init__(
        self,
        name: str,
        *,
        node: int,
        url: str,
        topic: str,
        partitions: list[int],
        settings: WorkloadSettings,
        recorder: Recorder,
        rng: random.Random,
        stop: threading.Event,
        errors: list[str],
        request_timeout_ms: int | None = None,
    ) -> None:
        super().__init__(name, stop, errors)
        self.node, self.url, self.topic, self.partitions = node, url, topic, partitions
        self.settings, self.recorder, self.rng = settings, recorder, rng
        self.request_timeout_ms = (
            settings.request_timeout_ms if request_timeout_ms is None else request_timeout_ms
        )

    def _produce(
        self, url: str, value: str, partition: int
    ) -> tuple[Outcome, int | None, str | None]:
        body = {"value_format": "string", "records": [{"value": value, "partition": partition}]}
        try:
            resp = http_request(
                "POST",
                f"{url}/v1/topics/{self.topic}/records?acks={self.settings.acks}",
                body,
                timeout_s=self.request_timeout_ms / 1000,
            )
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError):
                return Outcome.FAIL, None, "CONNECTION_REFUSED"  # never reached the node
            return Outcome.UNKNOWN, None, f"URLError({exc.reason!r})"
        except OSError as exc:  # a timeout or reset after the request went out
            return Outcome.UNKNOWN, None, type(exc).__name__
        if resp.status == 200:
            return Outcome.OK, int(resp.body["offsets"][0]["offset"]), None
        error = resp.body.get("error", {}) if isinstance(resp.body, dict) else {}
        code = str(error.get("code", f"HTTP_{resp.status}"))
        return (Outcome.FAIL if code in DEFINITE_ERROR_CODES else Outcome.UNKNOWN), None, code

    def work(self) -> None:
        seq = 0
        while not self.stop_event.is_set():
            value = f"{self.worker}-{seq}"
            seq += 1
            partition = self.rng.choice(self.partitions)
            invoked = time.monotonic()
            outcome, offset, error = self._produce(self.url, value, partition)
            self.recorder.send(
                Send(
                    self.worker,
                    False,
                    value,
                    partition,
                    invoked,
                    time.monotonic(),
                    outcome,
                    offset,
                    self.node,
                    error,
                )
            )
            self.stop_event.wait(self.settings.send_interval_ms / 1000)


class ClientReader(_Worker):
    def __init__(
        self,
        name: str,
        *,
        bootstrap: str,
        topic: str,
        partitions: list[int],
        settings: WorkloadSettings,
        recorder: Recorder,
        stop: threading.Event,
        errors: list[str],
    ) -> None:
        super().__init__(name, stop, errors)
        self.settings, self.recorder = settings, recorder
        self.poll_errors = 0
        self.consumer = Consumer(
            bootstrap,
            auto_offset_reset="earliest",
            value_deserializer=deserializers.str,
            request_timeout_ms=settings.request_timeout_ms,
        )
        self.consumer.assign([TopicPartition(topic, p) for p in partitions])

    def work(self) -> None:
        try:
            while not self.stop_event.is_set():
                try:
                    batch = self.consumer.poll(timeout_ms=self.settings.poll_timeout_ms)
                except LograftError:
                    self.poll_errors += 1
                    self.stop_event.wait(self.settings.reader_backoff_ms / 1000)
                    continue
                now = time.monotonic()
                for tp, records in batch.items():
                    for r in records:
                        self.recorder.read(Read(self.worker, tp.partition, r.offset, r.value, now))
        finally:
            self.consumer.close()


class Workload:
    """Writers and readers on `topic`, started and stopped together."""

    def __init__(
        self,
        cluster: LograftCluster,
        topic: str,
        partitions: list[int],
        seed: int,
        settings: WorkloadSettings | None = None,
    ) -> None:
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.settings = settings or WorkloadSettings()
        self.recorder = Recorder()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.started_s = 0.0
        self.stopped_s = 0.0
        self._seed = seed
        self._workers: list[_Worker] = []
        self._readers: list[ClientReader] = []

    def _rng(self, name: str) -> random.Random:
        return random.Random(f"{self._seed}:{name}")

    def start(self) -> None:
        s = self.settings
        urls = {n.node_id: n.url for n in self.cluster}
        bootstrap = ",".join(urls.values())
        common: dict[str, Any] = {
            "topic": self.topic,
            "partitions": self.partitions,
            "settings": s,
            "recorder": self.recorder,
            "stop": self._stop,
            "errors": self.errors,
        }
        idempotence = [True] * s.idempotent_client_writers + [False] * s.plain_client_writers
        for i, idempotent in enumerate(idempotence):
            name = f"c{i}"
            self._workers.append(
                ClientWriter(
                    name, bootstrap=bootstrap, idempotent=idempotent, rng=self._rng(name), **common
                )
            )
        for node, url in sorted(urls.items()):
            for i in range(s.http_writers_per_node):
                name = f"h{node}" + (f"_{i}" if i else "")
                self._workers.append(
                    HttpWriter(name, node=node, url=url, rng=self._rng(name), **common)
                )
            for i in range(s.http_probes_per_node):
                name = f"p{node}" + (f"_{i}" if i else "")
                self._workers.append(
                    HttpWriter(
                        name,
                        node=node,
                        url=url,
                        rng=self._rng(name),
                        request_timeout_ms=s.probe_request_timeout_ms,
                        **common,
                    )
                )
        for i in range(s.readers):
            reader = ClientReader(f"r{i}", bootstrap=bootstrap, **common)
            self._readers.append(reader)
            self._workers.append(reader)
        self.started_s = time.monotonic()
        for w in self._workers:
            w.start()

    def wait_acked_everywhere(self, since_s: float, timeout_s: float, what: str) -> None:
        """Every partition acknowledged a send invoked at or after `since_s`."""
        self.cluster.eventually(
            lambda: all(self.recorder.acked_since(p, since_s) for p in self.partitions),
            timeout_s,
            what,
            interval_s=0.1,
        )

    def run_until(self, until_s: float) -> None:
        """Keep the workload going until monotonic time `until_s` (its duration, not a
        wait for a condition)."""
        self._stop.wait(max(0.0, until_s - time.monotonic()))

    def stop(self, timeout_s: float) -> None:
        self.stopped_s = time.monotonic()
        self._stop.set()
        eventually(
            lambda: not any(w.is_alive() for w in self._workers),
            timeout_s,
            "the workload's writers and readers to stop",
            interval_s=0.1,
        )

    def poll_errors(self) -> int:
        return sum(r.poll_errors for r in self._readers)

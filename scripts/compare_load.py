"""One load process of scripts/bench_compare.py: produce, consume, latency or failover
load against Kafka (confluent-kafka), NATS JetStream (nats-py) or lograft.

    python scripts/compare_load.py '{"system": "kafka", "action": "produce", ...}'

Run by the tools virtualenv's interpreter for Kafka and NATS (their clients are
not lograft dependencies) and by the project's for lograft, so only the chosen
system's client is imported. Prints one JSON line on stdout: what it did, its
own CPU seconds and peak RSS (getrusage, all threads), so the harness meters
each client process on its own.

Settings shared by every system (issue 14's table): acks=all, idempotent
producers (Kafka also without: system "kafka-noidem"), linger 5 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import resource
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from compare_stats import latencies_from_schedule, percentile  # a sibling script

LINGER_MS = 5
# Records per JSON API request (issue 14).
JSON_RECORDS_PER_REQUEST = 500
# How long a latency run waits for its last records after the last send, s.
LATENCY_DRAIN_S = 10.0
# Records a consume poll asks for at most.
CONSUME_BATCH = 10_000
# A failover run's pace of sequential acks=all sends, records/s.
FAILOVER_RATE = 200


def value_of(index: int, size: int) -> bytes:
    """A `size`-byte value that starts with its record's index (latency runs read it back)."""
    head = b"%010d:" % index
    return head + b"x" * max(0, size - len(head))


def index_of(value: bytes) -> int:
    return int(value[:10])


def rusage() -> dict[str, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kb": float(ru.ru_maxrss)}


def latency_summary(start: float, rate: float, count: int, got: dict[int, float]) -> dict:
    lat = latencies_from_schedule(start, rate, count, got)
    ms = {
        f"p{q:g}": (v * 1000 if (v := percentile(lat, q)) is not None else None)
        for q in (50, 99, 99.9)
    }
    return {"records": count, "lost": count - len(got), **ms}


def paced(rate: float, count: int, send: Callable[[int], None]) -> float:
    """Call send(i) at start + i/rate for i < count; the start time (perf_counter)."""
    start = time.perf_counter() + 0.05
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(i)
    return start


# -- Kafka (confluent-kafka) -------------------------------------------------------------


def kafka_producer_conf(spec: dict) -> dict:
    return {
        "bootstrap.servers": spec["bootstrap"],
        "acks": "all",
        "enable.idempotence": spec["system"] != "kafka-noidem",
        "linger.ms": LINGER_MS,
    }


def kafka_produce(spec: dict) -> dict:
    from confluent_kafka import Producer

    p = Producer(kafka_producer_conf(spec))
    acked = [0, 0]  # delivered, failed

    def done(err: Any, _msg: Any) -> None:
        acked[1 if err else 0] += 1

    value = value_of(0, spec["value_bytes"])
    limit = spec.get("max_records") or sys.maxsize
    t0 = time.perf_counter()
    end = t0 + spec["seconds"]
    sent = 0
    while sent < limit and (sent % 1000 or time.perf_counter() < end):
        try:
            p.produce(spec["topic"], value, on_delivery=done)
            sent += 1
        except BufferError:
            p.poll(0.005)
        if sent % 1000 == 0:
            p.poll(0)
    p.flush(120)
    return {"records": acked[0], "failed": acked[1], "seconds": time.perf_counter() - t0}


def kafka_consume(spec: dict) -> dict:
    from confluent_kafka import Consumer

    target = spec["max_records"]
    total, counted = counter()

    def one() -> None:
        c = Consumer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "group.id": spec["group"],
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe([spec["topic"]])
        deadline = time.perf_counter() + spec["timeout_s"]
        while total[0] < target and time.perf_counter() < deadline:
            got = c.consume(CONSUME_BATCH, 0.5)
            counted(sum(1 for m in got if m.error() is None))
        c.close()

    run_threads(one, spec["consumers"])
    return {"records": total[0], "seconds": time.perf_counter() - total[1]}


def kafka_latency(spec: dict) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition

    got: dict[int, float] = {}
    ready, stop = threading.Event(), threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"]})
        c.assign([TopicPartition(spec["topic"], p, -1) for p in range(spec["partitions"])])
        c.consume(1, 1.0)
        ready.set()
        while not stop.is_set():
            for m in c.consume(1000, 0.05):
                if m.error() is None:
                    got[index_of(m.value())] = time.perf_counter()
        c.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    ready.wait(30)
    p = Producer(kafka_producer_conf(spec))
    count = int(spec["rate"] * spec["seconds"])

    def send(i: int) -> None:
        p.produce(spec["topic"], value_of(i, spec["value_bytes"]))
        p.poll(0)

    start = paced(spec["rate"], count, send)
    p.flush(60)
    wait_all(got, count)
    stop.set()
    t.join(10)
    return latency_summary(start, spec["rate"], count, got)


def kafka_failover(spec: dict) -> dict:
    from confluent_kafka import Producer

    p = Producer({**kafka_producer_conf(spec), "linger.ms": 0})
    pairs: list[tuple[float, float]] = []

    def acked(err: Any, sent: float) -> None:
        if not err:
            pairs.append((sent, time.time()))
            say_ready(pairs)

    def send(_i: int) -> None:
        sent = time.time()
        p.produce(spec["topic"], b"f", partition=0, on_delivery=lambda e, _m, s=sent: acked(e, s))
        p.poll(0)

    paced(FAILOVER_RATE, int(FAILOVER_RATE * spec["seconds"]), send)
    p.flush(60)
    return {"pairs": pairs}


def kafka_leader(spec: dict) -> dict:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": spec["bootstrap"]}).list_topics(
        spec["topic"], timeout=10
    )
    part = md.topics[spec["topic"]].partitions[0]
    return {"leader": part.leader, "isr": len(part.isrs)}


def kafka_create(spec: dict) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})
    topic = NewTopic(
        spec["topic"],
        num_partitions=spec["partitions"],
        replication_factor=3,
        config={"min.insync.replicas": "2"},
    )
    for future in admin.create_topics([topic]).values():
        future.result(60)
    return {}


def kafka_delete(spec: dict) -> dict:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})
    for future in admin.delete_topics([spec["topic"]]).values():
        future.result(60)
    return {}


# -- NATS JetStream (nats-py) ------------------------------------------------------------

# Async publishes a NATS producer keeps in flight (nats-py has no linger: this
# window is what batches its acks).
NATS_WINDOW = 512


async def nats_connect(spec: dict) -> Any:
    import nats

    return await nats.connect(spec["bootstrap"].split(","), max_reconnect_attempts=-1)


async def nats_produce(spec: dict) -> dict:
    nc = await nats_connect(spec)
    js = nc.jetstream()
    subject = spec["topic"]
    value = value_of(0, spec["value_bytes"])
    window = asyncio.Semaphore(NATS_WINDOW)
    acked = [0, 0]

    async def one() -> None:
        try:
            await js.publish(subject, value, stream=spec["stream"], timeout=30)
            acked[0] += 1
        except Exception:
            acked[1] += 1
        finally:
            window.release()

    limit = spec.get("max_records") or sys.maxsize
    t0 = time.perf_counter()
    end, sent, tasks = t0 + spec["seconds"], 0, set()
    while sent < limit and time.perf_counter() < end:
        await window.acquire()
        task = asyncio.create_task(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
    await asyncio.gather(*tasks)
    seconds = time.perf_counter() - t0
    await nc.close()
    return {"records": acked[0], "failed": acked[1], "seconds": seconds}


async def nats_consume(spec: dict) -> dict:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await nats_connect(spec)
    js = nc.jetstream()
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
    target = spec["max_records"]
    total, counted = counter()
    deadline = time.perf_counter() + spec["timeout_s"]

    async def one() -> None:
        sub = await js.pull_subscribe(
            spec["topic"], durable=spec["group"], stream=spec["stream"], config=config
        )
        while total[0] < target and time.perf_counter() < deadline:
            with contextlib.suppress(TimeoutError):  # nothing more yet
                counted(len(await sub.fetch(1000, timeout=1)))

    await asyncio.gather(*(one() for _ in range(spec["consumers"])))
    seconds = time.perf_counter() - total[1]
    await nc.close()
    return {"records": total[0], "seconds": seconds}


async def nats_latency(spec: dict) -> dict:
    from nats.js.api import DeliverPolicy

    nc = await nats_connect(spec)
    js = nc.jetstream()
    got: dict[int, float] = {}

    async def on_msg(msg: Any) -> None:
        got[index_of(msg.data)] = time.perf_counter()

    sub = await js.subscribe(
        spec["topic"], cb=on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
    )
    rate, count = spec["rate"], int(spec["rate"] * spec["seconds"])
    tasks: set[asyncio.Task] = set()
    start = time.perf_counter() + 0.05
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(
            js.publish(spec["topic"], value_of(i, spec["value_bytes"]), stream=spec["stream"])
        )
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks, return_exceptions=True)
    deadline = time.perf_counter() + LATENCY_DRAIN_S
    while len(got) < count and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)  # the subscription's callback fills `got`
    await sub.unsubscribe()
    await nc.close()
    return latency_summary(start, rate, count, got)


async def nats_failover(spec: dict) -> dict:
    nc = await nats_connect(spec)
    js = nc.jetstream()
    pairs: list[tuple[float, float]] = []
    end = time.time() + spec["seconds"]
    while time.time() < end:
        sent = time.time()
        try:
            await js.publish(spec["topic"], b"f", stream=spec["stream"], timeout=1)
            pairs.append((sent, time.time()))
            say_ready(pairs)
        except Exception:
            await asyncio.sleep(0.01)
        await asyncio.sleep(max(0.0, sent + 1 / FAILOVER_RATE - time.time()))
    await nc.close()
    return {"pairs": pairs}


async def nats_leader(spec: dict) -> dict:
    nc = await nats_connect(spec)
    info = await nc.jetstream().stream_info(spec["stream"])
    await nc.close()
    current = sum(1 for r in info.cluster.replicas or [] if r.current)
    return {"leader": info.cluster.leader, "isr": 1 + current}


async def nats_create(spec: dict) -> dict:
    from nats.js.api import StorageType, StreamConfig

    nc = await nats_connect(spec)
    await nc.jetstream().add_stream(
        StreamConfig(
            name=spec["stream"],
            subjects=[spec["topic"]],
            num_replicas=3,
            storage=StorageType.FILE,
        )
    )
    await nc.close()
    return {}


async def nats_delete(spec: dict) -> dict:
    nc = await nats_connect(spec)
    await nc.jetstream().delete_stream(spec["stream"])
    await nc.close()
    return {}


# -- lograft (its Python client, and its JSON API) ---------------------------------------


def lograft_settings(**extra: Any) -> dict[str, Any]:
    """The issue's producer settings for lograft's clients, sync or async."""
    return {"acks": "all", "enable_idempotence": True, "linger_ms": LINGER_MS, **extra}


def lograft_producer(spec: dict, **extra: Any) -> Any:
    from lograft.client import Producer

    return Producer(spec["bootstrap"], **lograft_settings(**extra))


def lograft_produce(spec: dict) -> dict:
    value = value_of(0, spec["value_bytes"])
    limit = spec.get("max_records") or sys.maxsize
    with lograft_producer(spec) as p:
        t0 = time.perf_counter()
        end, sent = t0 + spec["seconds"], 0
        while sent < limit and (sent % 1000 or time.perf_counter() < end):
            p.send(spec["topic"], value)
            sent += 1
        p.flush()
        return {"records": sent, "seconds": time.perf_counter() - t0}


def lograft_json_produce(spec: dict) -> dict:
    host, port = spec["bootstrap"].split(",")[0].removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    text = value_of(0, spec["value_bytes"]).decode()
    per = JSON_RECORDS_PER_REQUEST
    body = json.dumps({"value_format": "string", "records": [{"value": text}] * per}).encode()
    headers = {"Content-Type": "application/json"}
    limit = spec.get("max_records") or sys.maxsize
    t0 = time.perf_counter()
    end, sent, failed = t0 + spec["seconds"], 0, 0
    errors: dict[str, int] = {}
    while sent < limit and time.perf_counter() < end:
        try:
            conn.request("POST", f"/v1/topics/{spec['topic']}/records", body, headers)
            resp = conn.getresponse()
            answer = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            # A node restarted by the failover cell may not listen yet: count
            # the request as failed, say why, and reconnect after a pause.
            failed += per
            key = f"no answer: {exc!r}"[:200]
            errors[key] = errors.get(key, 0) + 1
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            time.sleep(0.1)  # back-off before reconnecting
            continue
        if resp.status == 200:
            sent += per
        else:
            failed += per
            key = failure_key(resp.status, answer)
            errors[key] = errors.get(key, 0) + 1
    out = {"records": sent, "failed": failed, "seconds": time.perf_counter() - t0}
    return {**out, "errors": errors} if errors else out


def failure_key(status: int, answer: bytes) -> str:
    """`<status> <error code> (retriable|not retriable): <message>` of a failed
    request, from the API's `{"error": {...}}` body (the status alone if none)."""
    try:
        error = json.loads(answer)["error"]
        retriable = "retriable" if error.get("retriable") else "not retriable"
        return f"{status} {error['code']} ({retriable}): {str(error.get('message'))[:200]}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{status} (no error body: {answer[:200]!r})"


def lograft_consume(spec: dict) -> dict:
    from lograft.client import Consumer

    target = spec["max_records"]
    total, counted = counter()

    def one() -> None:
        with Consumer(spec["bootstrap"], group_id=spec["group"], auto_offset_reset="earliest") as c:
            c.subscribe([spec["topic"]])
            deadline = time.perf_counter() + spec["timeout_s"]
            while total[0] < target and time.perf_counter() < deadline:
                got = c.poll(timeout_ms=500, max_records=CONSUME_BATCH)
                counted(sum(len(records) for records in got.values()))

    run_threads(one, spec["consumers"])
    return {"records": total[0], "seconds": time.perf_counter() - total[1]}


def lograft_latency(spec: dict) -> dict:
    from lograft.client import Consumer, TopicPartition

    got: dict[int, float] = {}
    ready, stop = threading.Event(), threading.Event()

    def consume() -> None:
        with Consumer(spec["bootstrap"], fetch_max_wait_ms=500) as c:
            parts = [TopicPartition(spec["topic"], p) for p in range(spec["partitions"])]
            c.assign(parts)
            c.seek_to_end(*parts)
            for tp in parts:
                c.position(tp)
            ready.set()
            while not stop.is_set():
                for records in c.poll(timeout_ms=100).values():
                    now = time.perf_counter()
                    for r in records:
                        got[index_of(r.value)] = now

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    ready.wait(30)
    count = int(spec["rate"] * spec["seconds"])
    with lograft_producer(spec) as p:
        start = paced(
            spec["rate"], count, lambda i: p.send(spec["topic"], value_of(i, spec["value_bytes"]))
        )
        p.flush()
    wait_all(got, count)
    stop.set()
    t.join(10)
    return latency_summary(start, spec["rate"], count, got)


def lograft_latency_async(spec: dict) -> dict:
    """`lograft_latency` with the asyncio client: an AsyncProducer and an
    AsyncConsumer on one uvloop loop in this one thread, the shape of the
    NATS load (nats-py publishing and subscribed on one loop). The sync
    client runs a loop thread per producer and per consumer beside the
    caller's threads, and every send() and poll() crosses between them."""
    from lograft.client.loop_thread import new_loop

    loop = new_loop("uvloop")
    try:
        return loop.run_until_complete(_lograft_latency_async(spec))
    finally:
        loop.close()


@contextlib.asynccontextmanager
async def polling_from_end(
    bootstrap: str, topic: str, partitions: int, on_records: Callable[[list[Any]], None]
) -> AsyncIterator[None]:
    """An AsyncConsumer positioned at the end of `topic`'s partitions, polling
    in a task of this loop and handing each partition's records to
    `on_records`, from entry until exit."""
    from lograft.client import AsyncConsumer, TopicPartition

    stop = asyncio.Event()
    async with AsyncConsumer(bootstrap, fetch_max_wait_ms=500) as c:
        parts = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(parts)
        c.seek_to_end(*parts)
        for tp in parts:
            await c.position(tp)

        async def consume() -> None:
            while not stop.is_set():
                for records in (await c.poll(timeout_ms=100)).values():
                    on_records(records)

        consumer = asyncio.create_task(consume())
        try:
            yield
        finally:
            stop.set()
            await consumer


async def _lograft_latency_async(spec: dict) -> dict:
    from lograft.client import AsyncProducer

    got: dict[int, float] = {}

    def on_records(records: list[Any]) -> None:
        now = time.perf_counter()
        for r in records:
            got[index_of(r.value)] = now

    async with polling_from_end(spec["bootstrap"], spec["topic"], spec["partitions"], on_records):
        count = int(spec["rate"] * spec["seconds"])
        async with AsyncProducer(spec["bootstrap"], **lograft_settings()) as p:
            start = time.perf_counter() + 0.05
            for i in range(count):
                delay = start + i / spec["rate"] - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await p.send(spec["topic"], value_of(i, spec["value_bytes"]))
            await p.flush()
        deadline = time.perf_counter() + LATENCY_DRAIN_S
        while len(got) < count and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)  # the consumer task fills `got`; waited with a deadline
    return latency_summary(start, spec["rate"], count, got)


def lograft_failover(spec: dict) -> dict:
    """Sequential acks=all sends to `partition`, or with partition None to
    every partition in turn (the harness picks the victim at the kill and
    counts only the partitions it led): (sent, acked, partition) triples."""
    pairs: list[tuple[float, float, int]] = []
    chosen = spec.get("partition", 0)
    partitions = list(range(spec["partitions"])) if chosen is None else [chosen]
    turn = 0
    with lograft_producer(spec, linger_ms=0) as p:
        end = time.time() + spec["seconds"]
        while time.time() < end:
            partition = partitions[turn % len(partitions)]
            sent = time.time()
            try:
                p.send(spec["topic"], b"f", partition=partition).get(30)
                pairs.append((sent, time.time(), partition))
                say_ready(pairs)
                turn += 1
            except Exception:
                time.sleep(0.01)
            time.sleep(max(0.0, sent + 1 / FAILOVER_RATE - time.time()))
    return {"pairs": pairs}


def say_ready(pairs: list[Any]) -> None:
    """One line on stdout once the first record is acknowledged: the harness
    kills the leader only after it (a process start takes seconds under load)."""
    if len(pairs) == 1:
        print('{"ready": true}', flush=True)


# -- shared ------------------------------------------------------------------------------


def counter() -> tuple[list[Any], Callable[[int], None]]:
    """A shared [records, time of the first record] and what adds to it: a
    consume rate is timed from the first record, not from the process start and
    the group join (seconds under load, the same for every size of topic)."""
    total: list[Any] = [0, time.perf_counter()]
    lock = threading.Lock()

    def counted(n: int) -> None:
        with lock:
            if total[0] == 0 and n:
                total[1] = time.perf_counter()
            total[0] += n

    return total, counted


def run_threads(fn: Callable[[], None], n: int) -> None:
    threads = [threading.Thread(target=fn) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def wait_all(got: dict[int, float], count: int) -> None:
    deadline = time.perf_counter() + LATENCY_DRAIN_S
    while len(got) < count and time.perf_counter() < deadline:
        time.sleep(0.05)  # the consumer thread fills `got`; waited with a deadline


ACTIONS: dict[tuple[str, str], Callable[[dict], Any]] = {
    ("kafka", "produce"): kafka_produce,
    ("kafka", "consume"): kafka_consume,
    ("kafka", "latency"): kafka_latency,
    ("kafka", "failover"): kafka_failover,
    ("kafka", "leader"): kafka_leader,
    ("kafka", "create"): kafka_create,
    ("kafka", "delete"): kafka_delete,
    ("nats", "produce"): nats_produce,
    ("nats", "consume"): nats_consume,
    ("nats", "latency"): nats_latency,
    ("nats", "failover"): nats_failover,
    ("nats", "leader"): nats_leader,
    ("nats", "create"): nats_create,
    ("nats", "delete"): nats_delete,
    ("lograft", "produce"): lograft_produce,
    ("lograft", "consume"): lograft_consume,
    ("lograft", "latency"): lograft_latency,
    ("lograft", "latency-async"): lograft_latency_async,
    ("lograft", "failover"): lograft_failover,
    ("lograft-json", "produce"): lograft_json_produce,
}


def main() -> int:
    spec = json.loads(sys.argv[1])
    family = "kafka" if spec["system"].startswith("kafka") else spec["system"]
    fn = ACTIONS[(family, spec["action"])]
    result = fn(spec)
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    text = json.dumps({**result, **rusage()})
    # The harness reads the result from a file (bench_compare.start_load);
    # stdout carries only the "ready" line of a failover load then.
    if "result_file" in spec:
        Path(spec["result_file"]).write_text(text)
    else:
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How long can one hostile request stall a node's event loop?

Starts a temporary three-node cluster (scripts/bench.py's `TempCluster`:
scripts/local_cluster.py's configs, free ports found at random, stopped by
pid at the end), creates a topic per kind of attack (replication factor 3,
default configs) and runs each attack `--repeat` times against the leader of
its topic's partition 0, while one process per node polls that node's
`GET /healthz` every `--probe-ms` ms over a kept-alive connection. Per attack:

- the worst `/healthz` latency seen while the attack ran, on the attacked
  node and on any node (ms): a request that arrives while an event loop is
  blocked waits for it, so this is the stall as a client sees it (plus ~1 ms
  of HTTP);
- the attacked node's own event-loop lag (`loop_lag_ms.max` of `/healthz`:
  the longest a 20 ms timer fired late over the last 10 s), read right after
  each round; a round starts once the node reports at most 50 ms, so that
  the figure is the round's own (up to 50 ms of it may be older);
- the attack request's status and time, and the node's peak RSS (VmHWM,
  since the node started).

Attacks (`--attacks`, comma-separated, default all):

- `produce-bomb-zstd`, `-gzip`, `-lz4`: one raw produce
  (`POST .../batches`) of as many batches as fit in ~527 KB, each holding
  one record of 63 MiB of zeros compressed (zstd: 250 batches of 2,109
  bytes, 15.4 GiB once inflated).
- `fetch-json-bomb`: a JSON fetch (default `max_bytes`) of a stored batch
  holding one 63 MiB record of zeros; `fetch-json-bomb-max`: the same with
  `max_bytes` = 50 MiB (`fetch_bytes_max`). The batch is stored first by
  raising the topic's `max_message_bytes` to 128 MiB (any client may), so
  the bomb passes the per-record bound; its produce is not measured.
- `stream-bomb`: a Server-Sent Events stream from that batch's offset, read
  until it ends or 10 s pass.
- `produce-json-max`: one JSON produce of ~15 MiB (10,000 records of
  1,500-byte strings, under `request_bytes_max`), to the leader of partition
  0 of a 16-partition topic, each record naming its partition (one batch of
  ~940 KB per partition, under `max_message_bytes`; about two thirds are
  forwarded to the other leaders).
- `produce-raw-many-batches`: one raw produce of ~15 MiB made of 100-byte
  single-record batches (~95,000 batches).
- `fetch-json-large`: a JSON fetch of 10,000 records (`max_records`)
  of 1 KiB each; `fetch-raw-large`: a raw fetch of 50 MiB of small batches.

    .venv/bin/python scripts/bench_stall.py [--attacks produce-bomb-zstd,...] [--repeat 3]

To measure another checkout's server, put it first on the nodes' path (run
from outside the repository, so that the current directory does not win):

    cd /tmp && PYTHONPATH=/path/to/checkout /work/main/.venv/bin/python \\
        /work/main/scripts/bench_stall.py
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing as mp
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Client, TempCluster, machine, progress  # a sibling script

from lograft.protocol.batch import RecordInput, build_batch
from lograft.protocol.compression import Compression

BATCH_TYPE = "application/vnd.lograft.batch"
MIB = 1024 * 1024
BOMB_RECORD_BYTES = 63 * MIB
BOMB_BODY_BYTES = 527_000
FETCH_BYTES_MAX = 50 * MIB
ATTACKS = (
    "produce-bomb-zstd",
    "produce-bomb-gzip",
    "produce-bomb-lz4",
    "fetch-json-bomb",
    "fetch-json-bomb-max",
    "stream-bomb",
    "produce-json-max",
    "produce-raw-many-batches",
    "fetch-json-large",
    "fetch-raw-large",
)
# After a round, before the next: the node's background work (replication of
# what was written, ISR checks) settles and is not charged to the next round.
SETTLE_S = 1.0
PROBE_TIMEOUT_S = 60.0
# The node reports its worst loop lag over this window (lograft/node/loop_lag.py);
# a round starts once that is at most QUIET_LAG_MS, ms.
LAG_WINDOW_S = 10
QUIET_LAG_MS = 50.0
# A stream attack reads for at most this long, or this many bytes.
STREAM_READ_S = 10.0
STREAM_READ_BYTES_MAX = 8 * MIB
FILL_BATCHES_PER_REQUEST = 1000
# The JSON produce attack spreads its records over this many partitions, so
# that each partition's batch (~940 KB) is under max_message_bytes.
JSON_PARTITIONS = 16


# -- the /healthz prober, in a process of its own ----------------------------------------------


def _probe_main(host: str, port: int, interval_s: float, ctl: Connection) -> None:
    """Poll /healthz until told to stop; on each "mark" message answer the
    worst latency (ms) since the previous mark. Its own process, so the
    attacker's work in this one (building bombs, reading big bodies) cannot
    delay a probe and be charged to the node."""
    conn = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
    worst = 0.0
    while True:
        if ctl.poll():
            msg = ctl.recv()
            if msg == "stop":
                return
            ctl.send(worst)
            worst = 0.0
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
        worst = max(worst, (time.perf_counter() - t0) * 1000)
        time.sleep(interval_s)  # the probe's own pacing


class Prober:
    """One probing process per node."""

    def __init__(self, urls: list[str], interval_ms: float) -> None:
        self._probes: list[tuple[Connection, mp.process.BaseProcess]] = []
        for url in urls:
            host, port = url.removeprefix("http://").split(":")
            ctl, child = mp.Pipe()
            proc = mp.get_context("fork").Process(
                target=_probe_main, args=(host, int(port), interval_ms / 1000, child), daemon=True
            )
            proc.start()
            self._probes.append((ctl, proc))

    def mark(self) -> list[float]:
        """Per node, the worst /healthz latency (ms) since the previous mark."""
        for ctl, _proc in self._probes:
            ctl.send("mark")
        return [float(ctl.recv()) for ctl, _proc in self._probes]

    def stop(self) -> None:
        for ctl, proc in self._probes:
            ctl.send("stop")
            proc.join(5)


# -- results ---------------------------------------------------------------------------------


@dataclass
class Round:
    status: int
    seconds: float
    healthz_ms: list[float]  # per node, in node id order
    lag_ms: float | None  # the attacked node's own report
    note: str = ""


@dataclass
class AttackResult:
    name: str
    node: int  # the node attacked (the partition's leader)
    rounds: list[Round] = field(default_factory=list)
    rss_peak_mib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        lags = [r.lag_ms for r in self.rounds if r.lag_ms is not None]
        return {
            "attack": self.name,
            "node": self.node,
            "statuses": sorted({r.status for r in self.rounds}),
            "request_s_max": round(max(r.seconds for r in self.rounds), 3),
            "healthz_node_ms": round(max(r.healthz_ms[self.node - 1] for r in self.rounds), 1),
            "healthz_any_ms": round(max(max(r.healthz_ms) for r in self.rounds), 1),
            "loop_lag_worst_ms": round(max(lags), 1) if lags else None,
            "node_rss_peak_mib": self.rss_peak_mib,
            "notes": sorted({r.note for r in self.rounds if r.note}),
        }


def rss_peak_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


# -- the attacks -----------------------------------------------------------------------------


def bomb_batches(codec: Compression, body_bytes: int) -> bytes:
    one = build_batch(
        [RecordInput(b"\0" * BOMB_RECORD_BYTES)],
        timestamp_ms=int(time.time() * 1000),
        compression=codec,
    )
    return one * max(1, body_bytes // len(one))


@dataclass
class Target:
    """A one-partition topic and its leader."""

    client: Client
    topic: str
    url: str  # the leader's base URL
    leader: int
    offset: int = 0  # where the attack reads

    @property
    def session(self) -> aiohttp.ClientSession:
        return self.client.session

    @property
    def records(self) -> str:
        return f"{self.url}/v1/topics/{self.topic}/partitions/0/records"

    async def refresh_leader(self) -> None:
        """Follow the partition's leader (an earlier attack may have moved it)."""
        url = await self.client.leader_url(self.topic, 0)
        if url is not None and url != self.url:
            self.url = url
            self.leader = next(i for i, u in self.client.urls.items() if u == url)

    async def post_raw(self, body: bytes) -> tuple[int, bytes]:
        async with self.session.post(
            f"{self.url}/v1/topics/{self.topic}/partitions/0/batches?acks=1",
            data=body,
            headers={"Content-Type": BATCH_TYPE},
        ) as resp:
            return resp.status, await resp.read()

    async def get(self, params: dict[str, str], raw: bool = False) -> tuple[int, str]:
        headers = {"Accept": BATCH_TYPE} if raw else {}
        async with self.session.get(self.records, params=params, headers=headers) as resp:
            body = await resp.read()
            if resp.status >= 400:
                return resp.status, body[:300].decode(errors="replace")
            if raw:
                return resp.status, f"{len(body)} bytes"
            doc = orjson.loads(body)
            return resp.status, (
                f"{len(doc['records'])} records, {len(body)} bytes, "
                f"next_offset {doc['next_offset']}"
            )


def _short(status: int, body: bytes) -> str:
    if status < 400:
        return f"{len(body)} bytes answered"
    try:
        err = orjson.loads(body)["error"]
        return f"{err['code']}: {err['message'][:100]}"
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return body[:100].decode(errors="replace")


async def attack_produce_bomb(t: Target, codec: Compression) -> tuple[int, str]:
    body = await asyncio.to_thread(bomb_batches, codec, BOMB_BODY_BYTES)
    status, answer = await t.post_raw(body)
    return status, f"{len(body)} bytes sent; {_short(status, answer)}"


async def attack_fetch_json(
    t: Target, max_bytes: int | None, max_records: int | None = None
) -> tuple[int, str]:
    params = {"offset": str(t.offset)}
    if max_bytes is not None:
        params["max_bytes"] = str(max_bytes)
    if max_records is not None:
        params["max_records"] = str(max_records)
    status, text = await t.get(params)
    return status, text[:200]


async def attack_stream(t: Target) -> tuple[int, str]:
    got = 0
    tail = b""
    async with t.session.get(
        f"{t.url}/v1/topics/{t.topic}/stream",
        params={"offset": str(t.offset), "partitions": "0"},
        timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
    ) as resp:
        deadline = time.monotonic() + STREAM_READ_S
        while time.monotonic() < deadline:
            try:
                chunk = await asyncio.wait_for(resp.content.readany(), deadline - time.monotonic())
            except TimeoutError:
                break
            if not chunk:
                break
            got += len(chunk)
            tail = (tail + chunk)[-400:]
            if b"event: error" in tail or got > STREAM_READ_BYTES_MAX:
                break
        return resp.status, f"{got} bytes streamed, ending {tail[-200:]!r}"


def json_produce_body() -> bytes:
    text = "x" * 1500
    records = [{"value": text, "partition": i % JSON_PARTITIONS} for i in range(10_000)]
    return orjson.dumps({"value_format": "string", "records": records})


def many_batches_body() -> bytes:
    one = build_batch([RecordInput(b"v" * 30)], timestamp_ms=int(time.time() * 1000))
    return one * ((15 * MIB) // len(one))


async def attack_produce_json(t: Target) -> tuple[int, str]:
    body = await asyncio.to_thread(json_produce_body)
    async with t.session.post(
        f"{t.url}/v1/topics/{t.topic}/records?acks=1",
        data=body,
        headers={"Content-Type": "application/json"},
    ) as resp:
        answer = await resp.read()
        return resp.status, f"{len(body)} bytes sent; {_short(resp.status, answer)}"


async def attack_produce_many(t: Target) -> tuple[int, str]:
    body = await asyncio.to_thread(many_batches_body)
    status, answer = await t.post_raw(body)
    return status, f"{len(body)} bytes sent; {_short(status, answer)}"


# -- preparing the data the fetch attacks read -------------------------------------------------


async def set_config(t: Target, key: str, value: int) -> None:
    async with t.session.patch(
        f"{t.client.bootstrap}/v1/topics/{t.topic}/configs",
        json={"configs": {key: str(value)}},
    ) as resp:
        if resp.status >= 300:
            raise RuntimeError(f"setting {key} of {t.topic}: {resp.status} {await resp.text()}")


async def store_bomb(t: Target) -> None:
    """One batch holding a 63 MiB record of zeros (zstd), alone in its topic:
    raise the topic's max_message_bytes (any client may) so that it passes
    the per-record bound, then produce it."""
    await set_config(t, "max_message_bytes", 128 * MIB)
    bomb = await asyncio.to_thread(bomb_batches, Compression.ZSTD, 1)
    deadline = time.monotonic() + 30
    while True:
        status, answer = await t.post_raw(bomb)
        if status == 200:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"storing the bomb batch: {status} {answer[:300]!r}")
        await asyncio.sleep(0.2)  # the config change reaches the leader soon; poll with a deadline
    progress(f"{t.topic}: stored one batch of a 63 MiB record of zeros ({len(bomb)} bytes)")


async def fill(t: Target, total_bytes: int, record_bytes: int, per_batch: int) -> None:
    batch = build_batch(
        [RecordInput(b"r" * record_bytes)] * per_batch, timestamp_ms=int(time.time() * 1000)
    )
    # At most produce_batches_max (1,000) batches per request.
    body = batch * max(1, min(total_bytes // len(batch), FILL_BATCHES_PER_REQUEST))
    written = 0
    while written < total_bytes:
        status, answer = await t.post_raw(body)
        if status != 200:
            raise RuntimeError(f"filling {t.topic}: {status} {answer[:300]!r}")
        written += len(body)
    progress(f"{t.topic}: wrote {written / MIB:.0f} MiB of {record_bytes}-byte records")


# -- driving ---------------------------------------------------------------------------------


async def node_lag(session: aiohttp.ClientSession, url: str) -> float | None:
    """The node's own worst event-loop lag of the last few seconds, if it reports one."""
    async with session.get(f"{url}/healthz") as resp:
        doc = await resp.json(loads=orjson.loads, content_type=None)
    lag = doc.get("loop_lag_ms") if isinstance(doc, dict) else None
    return float(lag["max"]) if isinstance(lag, dict) and "max" in lag else None


async def quiet(t: Target) -> None:
    """Wait until the node's reported lag (the worst of its last 10 s) no
    longer shows an earlier round or the preparation, so that the lag read
    after this round is this round's; at most LAG_WINDOW_S + 1 s."""
    deadline = time.monotonic() + LAG_WINDOW_S + 1
    while time.monotonic() < deadline:
        lag = await node_lag(t.session, t.url)
        if lag is None or lag <= QUIET_LAG_MS:
            return
        await asyncio.sleep(0.5)  # polling the node's window with a deadline


async def run_attack(
    name: str,
    attack: Callable[[], Awaitable[tuple[int, str]]],
    t: Target,
    repeat: int,
    prober: Prober,
    pid: int | None,
) -> AttackResult:
    result = AttackResult(name, t.leader)
    for i in range(repeat):
        await asyncio.sleep(SETTLE_S)  # let the previous round's background work settle
        await t.refresh_leader()
        await quiet(t)
        prober.mark()
        t0 = time.perf_counter()
        try:
            status, note = await attack()
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, note = 0, f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - t0
        healthz = prober.mark()
        lag = await node_lag(t.session, t.url)
        result.rounds.append(Round(status, seconds, healthz, lag, note))
        per_node = ", ".join(f"{ms:.1f}" for ms in healthz)
        progress(
            f"{name} round {i + 1}: HTTP {status} in {seconds * 1000:.0f} ms; worst /healthz per "
            f"node [{per_node}] ms; node {t.leader} loop lag "
            f"{'-' if lag is None else f'{lag:.1f} ms'}; {note}"
        )
    result.rss_peak_mib = rss_peak_mib(pid)
    return result


async def run(args: argparse.Namespace, cluster: TempCluster) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine(), "attacks": []}
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        client = Client(session, cluster.bootstrap)
        await client.discover()
        node_ids = sorted(client.urls)

        async def target(topic: str, partitions: int = 1) -> Target:
            url = (await client.create_topic(topic, partitions))[0]
            leader = next(i for i, u in client.urls.items() if u == url)
            return Target(client, topic, url, leader)

        wanted = args.attacks
        produce = await target("stall-produce")
        json_produce = await target("stall-json-produce", JSON_PARTITIONS)
        bomb = await target("stall-bomb")
        large_json = await target("stall-json")
        large_raw = await target("stall-raw")
        if wanted & {"fetch-json-bomb", "fetch-json-bomb-max", "stream-bomb"}:
            await store_bomb(bomb)
        if "fetch-json-large" in wanted:
            await fill(large_json, 11 * MIB, 1024, 800)
        if "fetch-raw-large" in wanted:
            await fill(large_raw, 52 * MIB, 100, 1)
        attacks: dict[str, tuple[Target, Callable[[], Awaitable[tuple[int, str]]]]] = {
            "produce-bomb-zstd": (produce, lambda: attack_produce_bomb(produce, Compression.ZSTD)),
            "produce-bomb-gzip": (produce, lambda: attack_produce_bomb(produce, Compression.GZIP)),
            "produce-bomb-lz4": (produce, lambda: attack_produce_bomb(produce, Compression.LZ4)),
            "fetch-json-bomb": (bomb, lambda: attack_fetch_json(bomb, None)),
            "fetch-json-bomb-max": (bomb, lambda: attack_fetch_json(bomb, FETCH_BYTES_MAX)),
            "stream-bomb": (bomb, lambda: attack_stream(bomb)),
            "produce-json-max": (json_produce, lambda: attack_produce_json(json_produce)),
            "produce-raw-many-batches": (produce, lambda: attack_produce_many(produce)),
            "fetch-json-large": (
                large_json,
                lambda: attack_fetch_json(large_json, FETCH_BYTES_MAX, 10_000),
            ),
            "fetch-raw-large": (
                large_raw,
                lambda: large_raw.get({"offset": "0", "max_bytes": str(FETCH_BYTES_MAX)}, raw=True),
            ),
        }
        prober = Prober([client.urls[n] for n in node_ids], args.probe_ms)
        try:
            for name in ATTACKS:
                if name not in wanted:
                    continue
                t, attack = attacks[name]
                pid = cluster.lc.pid_of(cluster.dir, t.leader)
                res = await run_attack(name, attack, t, args.repeat, prober, pid)
                out["attacks"].append(res.to_dict())
        finally:
            prober.stop()
    return out


def render_table(doc: dict[str, Any]) -> str:
    lines = [
        "| attack | node | HTTP | request s | worst /healthz ms (attacked node / any node) "
        "| worst loop lag ms | node RSS peak MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a in doc["attacks"]:
        lag = "-" if a["loop_lag_worst_ms"] is None else f"{a['loop_lag_worst_ms']:.1f}"
        rss = "-" if a["node_rss_peak_mib"] is None else f"{a['node_rss_peak_mib']:.0f}"
        lines.append(
            f"| {a['attack']} | {a['node']} | {','.join(map(str, a['statuses']))} "
            f"| {a['request_s_max']:.3f} | {a['healthz_node_ms']:.1f} / {a['healthz_any_ms']:.1f} "
            f"| {lag} | {rss} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--attacks",
        default=",".join(ATTACKS),
        type=lambda s: set(s.split(",")),
        help="comma-separated subset of: " + ", ".join(ATTACKS),
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds per attack (worst is shown)")
    ap.add_argument("--probe-ms", type=float, default=5.0, help="pause between /healthz probes")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    ap.add_argument("--json", action="store_true", help="print one JSON object, not a table")
    args = ap.parse_args()
    unknown = args.attacks - set(ATTACKS)
    if unknown:
        ap.error(f"unknown attack(s): {', '.join(sorted(unknown))}")
    cluster = TempCluster()
    try:
        cluster.start()
        doc = asyncio.run(run(args, cluster))
    finally:
        cluster.stop(args.keep)
    if args.json:
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    else:
        m = doc["machine"]
        print(f"machine: {m['cpu']}, {m['cores']} cores, {m['ram']}, Python {m['python']}")
        print(render_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

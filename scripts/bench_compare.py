"""lograft side by side with Apache Kafka and NATS JetStream, in one run on 127.0.0.1.

Issue 14's harness. The three systems run one after the other, each as three
nodes, with the same settings: 3 partitions, replication factor 3, min ISR 2,
acks=all, idempotent producers, 100 B values, linger 5 ms.

- Kafka 4.4 in KRaft mode, 3 combined broker+controller nodes, -Xmx1g each
  (scripts/kafka_local.py fetches the jars with Maven into .tools/ once),
  driven by confluent-kafka (librdkafka), both with and without
  enable.idempotence ("Kafka" and "Kafka no-idem").
- NATS JetStream: Debian's nats-server, 3 clustered nodes, file storage, a
  stream with 3 replicas (a stream is not partitioned: one stream stands for
  the topic), driven by nats-py with async publishes.
- lograft: three nodes (scripts/local_cluster.py's configs), through its
  Python client and through its JSON API (500 records per request).

The Kafka and NATS clients live in their own virtualenv, .tools/compare-venv,
made with pip on first use (they are no lograft dependency); nats-server is
installed with apt-get when missing and we are root on Debian (said when done).
Every load runs in its own process (scripts/compare_load.py), which reports its
own CPU seconds and peak RSS; the servers' CPU seconds and peak RSS (VmHWM)
are read from /proc.

Workloads (--only picks some; all by default):
  produce   100 B and 1 KiB values (--sizes), one producer and four
            (--producers): records/s, server and client CPU s per 1M records
  consume   from the start of a topic of --consume-mib MiB (default 1024, as
            the issue), one consumer and a group of three: records/s
  latency   end to end at 2,000 and 20,000 records/s (--rates): p50, p99,
            p99.9 ms, each record timed from its scheduled send time (no
            coordinated omission); server and client CPU s per 1M records.
            lograft twice: its sync client (a Producer and a Consumer, each
            with its loop thread, the consumer polling in a thread), and
            "lograft asyncio", an AsyncProducer and an AsyncConsumer on one
            event loop, the shape of the NATS load (nats-py on one loop)
  failover  SIGKILL of partition 0's leader (the stream's, for NATS) while a
            producer writes to it: seconds from the kill to the first ack of a
            record sent after it; median of --failovers kills per round. With
            --failover-kill controller (lograft), the producer writes every
            partition in turn and the node killed is the one that is the
            active controller at the kill (a Raft election first), timed on
            the partitions it leads then (partition 0's leader if it leads
            none); each kill says which node and partitions it hit and
            whether that node was the active controller

Disk: each produce cell writes to a topic of its own, deleted after the cell,
and a system's data directory is removed when it stops (unless --keep); a cell
is not started with less than --min-free-gib free (a full matrix at 1 KiB
values would otherwise leave tens of GiB behind; one run filled the disk).

Each system gets an untimed pre-warm (--warm-s, default 20 s: the JVM spends
its first minute compiling); each cell runs --rounds times (default 3) and the
table shows the median with min-max, and the ratio lograft ÷ Kafka of the
medians (below 1 is better for latency, failover, CPU and RSS; above 1 for
records/s). The table goes to stdout and, unless --no-docs, into
docs/benchmarks.md as a new subsection at the top of the section "Side by
side with Kafka and NATS JetStream" (the runs and notes already there are
kept below it), with the machine, versions and load averages before,
between and after.

    .venv/bin/python scripts/bench_compare.py                       # everything (hours)
    .venv/bin/python scripts/bench_compare.py --only produce --seconds 5 --rounds 1 \\
        --warm-s 5 --no-docs                                        # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka_local
from bench_common import http_json, log, machine, proc_cpu_s  # sibling scripts
from compare_stats import Spread, failover_seconds, render_table
from loopback_ports import free_ports

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
LOAD = SCRIPTS / "compare_load.py"
TOOLS_VENV = ROOT / ".tools" / "compare-venv"
TOOLS_PACKAGES = ("confluent-kafka>=2.3", "nats-py>=2.6")
DOCS = ROOT / "docs" / "benchmarks.md"
DOCS_HEADING = "## Side by side with Kafka and NATS JetStream"

PARTITIONS = 3
# Records a consume cell's topic holds: --consume-mib of 100 B values.
VALUE_BYTES = 100
# How long a node has to come back and rejoin (ISR 3) after a failover kill, s.
REJOIN_TIMEOUT_S = 180
# A failover run: seconds of writing before the kill, and in all.
FAILOVER_KILL_AFTER_S = 4.0
FAILOVER_RUN_S = 20.0
# A load process that outlives its work by this much is stuck, s.
LOAD_GRACE_S = 300
# Free disk below which a produce cell is not started, GiB (--min-free-gib):
# a 10 s cell of 1 KiB values at 150k records/s writes ~4.5 GiB over 3 replicas.
MIN_FREE_GIB = 8.0

SYSTEMS = ("Kafka", "Kafka no-idem", "NATS", "lograft", "lograft asyncio", "lograft JSON")
# The worker's name for each column.
WORKER = {
    "Kafka": "kafka",
    "Kafka no-idem": "kafka-noidem",
    "NATS": "nats",
    "lograft": "lograft",
    "lograft asyncio": "lograft",
    "lograft JSON": "lograft-json",
}
# compare_load.py's latency action per column (the default: "latency").
LATENCY_ACTION = {"lograft asyncio": "latency-async"}
RATIOS = (
    ("lograft ÷ Kafka", "lograft", "Kafka"),
    ("lograft asyncio ÷ Kafka", "lograft asyncio", "Kafka"),
    ("lograft JSON ÷ Kafka", "lograft JSON", "Kafka"),
)


def progress(msg: str) -> None:
    log(f"[{time.strftime('%H:%M:%S')}] {msg}")


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- processes, cleaned up by pid on every exit ---------------------------------------------


class Reaper:
    """Every process the harness starts, killed by pid on exit (also Ctrl-C)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[Any]] = []
        self.stops: list[Callable[[], None]] = []

    def add(self, proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for stop in reversed(self.stops):
            with contextlib.suppress(Exception):
                stop()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


REAPER = Reaper()


def peak_rss_mib(pids: list[int]) -> float | None:
    """The largest VmHWM (peak resident set) of the given processes, MiB."""
    best = None
    for pid in pids:
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    mib = int(line.split()[1]) / 1024
                    best = mib if best is None else max(best, mib)
    return best


# -- the tools: a virtualenv for confluent-kafka and nats-py, nats-server --------------------


def tools_python() -> str:
    python = TOOLS_VENV / "bin" / "python"
    check = [str(python), "-c", "import confluent_kafka, nats"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(python)
    progress(f"installing {', '.join(TOOLS_PACKAGES)} into {TOOLS_VENV} with pip (first run)")
    subprocess.run([sys.executable, "-m", "venv", str(TOOLS_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *TOOLS_PACKAGES], check=True)
    return str(python)


def ensure_nats_server() -> str:
    found = shutil.which("nats-server")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        progress("nats-server is not installed: installing Debian's nats-server with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-qq", "nats-server"], check=True, env=env)
        found = shutil.which("nats-server")
        if found:
            return found
    raise SystemExit(
        "this benchmark runs nats-server: install it (Debian: apt-get install nats-server)"
    )


def versions(py: str) -> dict[str, str]:
    out = {"lograft": importlib.metadata.version("lograft"), "Kafka": kafka_local.KAFKA_VERSION}
    probe = subprocess.run(
        [
            py,
            "-c",
            "import confluent_kafka, importlib.metadata as m; "
            "print(m.version('confluent-kafka'), confluent_kafka.libversion()[0], "
            "m.version('nats-py'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if len(probe) == 3:
        out["confluent-kafka"] = f"{probe[0]} (librdkafka {probe[1]})"
        out["nats-py"] = probe[2]
    nats = shutil.which("nats-server")
    if nats:
        out["nats-server"] = (
            subprocess.run([nats, "--version"], capture_output=True, text=True, check=False)
            .stdout.strip()
            .removeprefix("nats-server: ")
        )
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    out["Java"] = (java.stderr.splitlines() or ["?"])[0]
    return out


# -- the three clusters ---------------------------------------------------------------------


class NatsCluster:
    """Three clustered nats-server nodes with JetStream file storage on 127.0.0.1."""

    NODES = (1, 2, 3)

    def __init__(self, workdir: Path, binary: str) -> None:
        self.workdir, self.binary = workdir, binary
        ports = free_ports(6)
        self.ports = dict(zip(self.NODES, ports[:3], strict=True))
        self.route_ports = dict(zip(self.NODES, ports[3:], strict=True))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.ports.values())

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports.values())
        for n in self.NODES:
            (self.workdir / f"n{n}.conf").write_text(
                f"server_name: n{n}\nlisten: 127.0.0.1:{self.ports[n]}\n"
                f'jetstream {{ store_dir: "{self.workdir / f"n{n}"}" }}\n'
                f"cluster {{ name: bench, listen: 127.0.0.1:{self.route_ports[n]}, "
                f"routes: [{routes}] }}\n"
            )
        progress(f"starting NATS JetStream (3 nodes) on {self.bootstrap}")
        for n in self.NODES:
            self.start_node(n)
        for n in self.NODES:
            wait_port(self.ports[n], self.procs[n], f"nats node {n}")

    def start_node(self, n: int) -> None:
        out = (self.workdir / f"n{n}.log").open("ab")
        self.procs[n] = REAPER.add(
            subprocess.Popen(
                [self.binary, "-c", str(self.workdir / f"n{n}.conf")],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        out.close()

    def kill(self, n: int) -> None:
        self.procs[n].kill()
        self.procs[n].wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_port(port: int, proc: subprocess.Popen[Any], name: str, timeout_s: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode})")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)  # polling the port with a deadline
    raise RuntimeError(f"{name} did not listen on {port}")


class LograftCluster:
    """Three lograft nodes from scripts/bench.py's TempCluster (local_cluster's configs)."""

    def __init__(self) -> None:
        import bench  # a sibling script

        self.inner = bench.TempCluster()
        self.lc = self.inner.lc

    @property
    def bootstrap(self) -> str:
        # All three, so a client outlives the kill of any one (failover runs).
        return ",".join(self.urls())

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.lc.http_port(self.inner.base, n)}" for n in self.lc.NODES]

    def pids(self) -> list[int]:
        return self.inner.pids()

    def start(self) -> None:
        self.inner.start()

    def kill(self, n: int) -> None:
        pid = self.lc.pid_of(self.inner.dir, n)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def start_node(self, n: int) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            self.lc.start_node(self.inner.dir, n)

    def stop(self) -> None:
        self.inner.stop(keep=False)

    def create(self, topic: str) -> None:
        body = {
            "name": topic,
            "partitions": PARTITIONS,
            "replication_factor": 3,
            "configs": {"min_insync_replicas": "2"},
        }
        http_json("POST", f"{self.inner.bootstrap}/v1/topics", body)

    def delete(self, topic: str) -> None:
        http_json("DELETE", f"{self.inner.bootstrap}/v1/topics/{topic}")

    def controller(self) -> int | None:
        """The active controller's node id, as any node reports it."""
        for url in self.urls():
            with contextlib.suppress(OSError, urllib.error.HTTPError, ValueError):
                active = http_json("GET", f"{url}/v1/cluster")["active_controller"]
                return None if active is None else int(active)
        return None

    def leader(self, topic: str, partition: int = 0) -> dict[str, int]:
        for url in self.urls():
            with contextlib.suppress(OSError, urllib.error.HTTPError, ValueError):
                part = http_json("GET", f"{url}/v1/topics/{topic}")["partitions"][partition]
                return {"leader": part["leader"], "isr": len(part["isr"])}
        raise RuntimeError(f"no node answered for {topic}")


# -- running loads --------------------------------------------------------------------------


@dataclass
class Family:
    """One system's cluster and the columns it fills."""

    name: str
    columns: tuple[str, ...]
    python: str
    cluster: Any
    failover_column: str
    consume_columns: tuple[str, ...]
    latency_columns: tuple[str, ...]
    work: Path
    min_free_gib: float
    topics_made: set[str] = field(default_factory=set)
    cells_run: int = 0

    def spec(self, column: str, action: str, topic: str, **extra: Any) -> dict[str, Any]:
        spec = {
            "system": WORKER[column],
            "action": action,
            "bootstrap": self.cluster.bootstrap,
            "topic": topic,
            "partitions": PARTITIONS,
            "value_bytes": VALUE_BYTES,
            **extra,
        }
        if self.name == "NATS":
            spec["stream"] = topic.upper().replace("-", "_")
        return spec


# Where each running load process writes its result (by pid).
RESULT_FILES: dict[int, Path] = {}


def start_load(python: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
    """A load process; its stdout says when it is ready, its result goes to a
    file (a result read from the pipe, 105 KB of failover pairs, came back cut
    at 64 KiB twice, with the process's exit status 0)."""
    fd, name = tempfile.mkstemp(prefix="lograft-load-", suffix=".json")
    os.close(fd)
    proc = REAPER.add(
        subprocess.Popen(
            [python, str(LOAD), json.dumps({**spec, "result_file": name})],
            stdout=subprocess.PIPE,
            text=True,
            cwd=SCRIPTS,
        )
    )
    RESULT_FILES[proc.pid] = Path(name)
    return proc


def finish_load(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    path = RESULT_FILES.pop(proc.pid)
    try:
        proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"a load process failed ({proc.returncode}): {proc.args}")
        text = path.read_text()
        try:
            return json.loads(text)
        except ValueError as exc:
            raise RuntimeError(
                f"a load process's result is not JSON ({len(text)} chars): {exc}"
            ) from exc
    finally:
        path.unlink(missing_ok=True)


def run_load(python: str, spec: dict[str, Any], timeout_s: float = LOAD_GRACE_S) -> dict[str, Any]:
    return finish_load(start_load(python, spec), timeout_s)


def ensure_topic(fam: Family, topic: str) -> None:
    if topic in fam.topics_made:
        return
    if fam.name == "lograft":
        fam.cluster.create(topic)
    else:
        spec = fam.spec(fam.columns[0], "create", topic)
        deadline = time.monotonic() + 60
        while True:  # NATS' meta leader may not be elected yet
            try:
                run_load(fam.python, spec, 60)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)  # retrying a creation refused while the cluster forms
    fam.topics_made.add(topic)


def drop_topic(fam: Family, topic: str) -> None:
    """Delete a cell's topic, so its data leaves the disk before the next cell."""
    if fam.name == "lograft":
        fam.cluster.delete(topic)
    else:
        run_load(fam.python, fam.spec(fam.columns[0], "delete", topic), 60)
    fam.topics_made.discard(topic)


def check_free_space(path: Path, min_free_gib: float) -> None:
    """Stop before a cell when the disk under the work directory runs low.

    Every produce cell writes its records three times (RF 3); a full disk
    stalls the nodes and fails the run at an arbitrary cell (it did: Kafka's
    data of three rounds, 50 GiB, was still on disk when lograft ran)."""
    free_gib = shutil.disk_usage(path).free / 2**30
    if free_gib < min_free_gib:
        raise SystemExit(
            f"only {free_gib:.1f} GiB free under {path} (--min-free-gib {min_free_gib:g}): "
            "free some space or lower --consume-mib / --seconds"
        )


@dataclass
class Results:
    """Every round's figure per (row, column), and the rows in their order."""

    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    rows: list[str] = field(default_factory=list)
    client_rss: dict[str, float] = field(default_factory=dict)

    def add(self, row: str, column: str, value: float | None) -> None:
        if row not in self.rows:
            self.rows.append(row)
        if value is not None:
            self.values.setdefault((row, column), []).append(value)

    def cells(self) -> dict[tuple[str, str], Spread | None]:
        return {k: Spread.of(v) for k, v in self.values.items()}


def produce_cell(
    fam: Family, column: str, size: int, producers: int, seconds: float, res: Results
) -> None:
    # A topic per cell, deleted after it: the cells' records would otherwise
    # pile up on disk for the whole run (tens of GiB at 1 KiB values).
    fam.cells_run += 1
    topic = f"bench-produce-{fam.cells_run}"
    check_free_space(fam.work, fam.min_free_gib)
    ensure_topic(fam, topic)
    spec = fam.spec(column, "produce", topic, seconds=seconds, value_bytes=size)
    pids = fam.cluster.pids()
    cpu0 = proc_cpu_s(pids)
    procs = [start_load(fam.python, spec) for _ in range(producers)]
    outs = [finish_load(p, seconds + LOAD_GRACE_S) for p in procs]
    server_cpu = proc_cpu_s(pids) - cpu0
    records = sum(o["records"] for o in outs)
    secs = max(o["seconds"] for o in outs)
    label = f"produce {size} B x{producers}"
    res.add(f"{label}, records/s", column, records / secs)
    if records:
        res.add(f"{label}, server CPU s / 1M records", column, server_cpu / records * 1e6)
        client_cpu = sum(o["cpu_s"] for o in outs)
        res.add(f"{label}, client CPU s / 1M records", column, client_cpu / records * 1e6)
    note_rss(res, column, outs)
    failed = sum(o.get("failed", 0) for o in outs)
    progress(
        f"  {column}: {label}: {records / secs:,.0f} records/s"
        + (f" ({failed} failed)" if failed else "")
    )
    for out in outs:
        for error, requests in out.get("errors", {}).items():
            progress(f"    {requests} request(s) failed: {error}")
    drop_topic(fam, topic)


def note_rss(res: Results, column: str, outs: list[dict[str, Any]]) -> None:
    rss = max(o["maxrss_kb"] for o in outs) / 1024
    res.client_rss[column] = max(rss, res.client_rss.get(column, 0.0))


def fill_consume_topic(fam: Family, records: int) -> str:
    topic = "bench-consume"
    ensure_topic(fam, topic)
    column = "lograft JSON" if fam.name == "lograft" else fam.columns[0]
    progress(f"  {fam.name}: writing {records:,} records of {VALUE_BYTES} B to consume (untimed)")
    spec = fam.spec(column, "produce", topic, seconds=1e9, max_records=records)
    out = run_load(fam.python, spec, timeout_s=max(LOAD_GRACE_S, records / 2000))
    if out["records"] < records:
        raise RuntimeError(f"{fam.name}: only {out['records']} of {records} records written")
    return topic


def consume_cell(
    fam: Family, column: str, topic: str, records: int, consumers: int, res: Results
) -> None:
    timeout_s = max(120.0, records / 5000)
    spec = fam.spec(
        column,
        "consume",
        topic,
        max_records=records,
        consumers=consumers,
        group=f"g-{uuid.uuid4().hex[:8]}",
        timeout_s=timeout_s,
    )
    out = run_load(fam.python, spec, timeout_s + LOAD_GRACE_S)
    label = "consume, 1 consumer" if consumers == 1 else f"consume, group of {consumers}"
    rate = out["records"] / out["seconds"] if out["records"] >= records else None
    res.add(f"{label}, records/s", column, rate)
    note_rss(res, column, [out])
    shown = f"{rate:,.0f} records/s" if rate else f"only {out['records']:,} of {records:,}"
    progress(f"  {column}: {label}: {shown}")


def latency_cell(fam: Family, column: str, rate: int, seconds: float, res: Results) -> None:
    topic = "bench-latency"
    ensure_topic(fam, topic)
    action = LATENCY_ACTION.get(column, "latency")
    spec = fam.spec(
        column, action, topic, rate=rate, seconds=seconds, group=f"l-{uuid.uuid4().hex[:8]}"
    )
    pids = fam.cluster.pids()
    cpu0 = proc_cpu_s(pids)
    out = run_load(fam.python, spec, seconds + LOAD_GRACE_S)
    server_cpu = proc_cpu_s(pids) - cpu0
    for q in ("p50", "p99", "p99.9"):
        v = out[q]
        res.add(f"latency at {rate:,}/s, {q} ms", column, float("inf") if v is None else v)
    # At a fixed rate the CPU per record says how close to saturation the
    # load ran (this machine's 2 cores run the servers and the client): it
    # counts the load process's whole life, set-up and drain included.
    per_million = 1e6 / (rate * seconds)
    res.add(f"latency at {rate:,}/s, server CPU s / 1M records", column, server_cpu * per_million)
    res.add(f"latency at {rate:,}/s, client CPU s / 1M records", column, out["cpu_s"] * per_million)
    note_rss(res, column, [out])
    progress(
        f"  {column}: latency at {rate}/s: p50 {out['p50']:.1f} p99 {out['p99']:.1f} "
        f"p99.9 {out['p99.9']:.1f} ms, {out['lost']} lost"
    )


def leader_of(fam: Family, topic: str) -> dict[str, Any]:
    if fam.name == "lograft":
        return fam.cluster.leader(topic)
    return run_load(fam.python, fam.spec(fam.columns[0], "leader", topic), 60)


def node_of(fam: Family, leader: Any) -> int:
    # NATS names its nodes n1..n3; Kafka and lograft number them.
    return int(str(leader).removeprefix("n"))


def wait_rejoined(fam: Family, topic: str) -> None:
    deadline = time.monotonic() + REJOIN_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(RuntimeError, OSError, KeyError, ValueError):
            if leader_of(fam, topic)["isr"] >= 3:
                return
        time.sleep(1)  # polling the replica set with a deadline
    raise RuntimeError(f"{fam.name}: the killed node did not rejoin in {REJOIN_TIMEOUT_S} s")


def pick_at_kill(fam: Family, topic: str, kill: str, partition: int | None) -> tuple[int, set[int]]:
    """The node to kill and the partitions whose writes time the failover.

    `--failover-kill leader` (and Kafka, NATS): partition 0's leader. With
    `--failover-kill controller` (lograft, the load writing every partition
    in turn) the victim is read at the kill, not before the load: Raft
    leadership and partition leadership both move back to their preferred
    nodes within seconds of a restart, so a partition picked earlier was
    seldom still led by the controller when the kill came. The active
    controller's node, timed on the partitions it leads then; when it leads
    none, partition 0's leader (printed)."""
    if partition is not None:
        return node_of(fam, leader_of(fam, topic)["leader"]), {partition}
    controller = fam.cluster.controller()
    leaders = {p: fam.cluster.leader(topic, p)["leader"] for p in range(PARTITIONS)}
    led = {p for p, leader in leaders.items() if leader == controller}
    if controller is None or not led:
        progress(
            f"  node {controller} (the active controller) leads no partition of {topic}: "
            "killing partition 0's leader"
        )
        return node_of(fam, leaders[0]), {0}
    return node_of(fam, controller), led


def failover_once(fam: Family, column: str, kill: str = "leader") -> float | None:
    topic = "bench-failover"
    ensure_topic(fam, topic)
    wait_rejoined(fam, topic)
    # None: every partition in turn, the victim chosen at the kill.
    partition = None if kill == "controller" and fam.name == "lograft" else 0
    spec = fam.spec(column, "failover", topic, seconds=FAILOVER_RUN_S, partition=partition)
    proc = start_load(fam.python, spec)
    assert proc.stdout is not None
    if "ready" not in proc.stdout.readline():  # its first record is acknowledged
        raise RuntimeError(f"{column}: the failover producer did not start")
    time.sleep(FAILOVER_KILL_AFTER_S)  # let the producer write a while before the kill
    node, timed = pick_at_kill(fam, topic, kill, partition)
    # lograft: a kill of the active controller's node waits for a Raft election too.
    controller = getattr(fam.cluster, "controller", lambda: None)()
    killed_at = time.time()
    fam.cluster.kill(node)
    out = finish_load(proc, FAILOVER_RUN_S + LOAD_GRACE_S)
    fam.cluster.start_node(node)
    # The next kill, or the next round's first cell, must not meet a node
    # still starting: a JSON produce did (refused, or one failed request).
    wait_rejoined(fam, topic)
    # lograft's pairs name their partition third; Kafka's and NATS's write one.
    took = failover_seconds(out["pairs"], killed_at, timed)
    role = "leader, also the active controller" if controller == node else "leader"
    progress(
        f"  {column}: killed node {node} ({role}) of partitions {sorted(timed)}: "
        + (f"first ack after {took:.2f} s" if took is not None else "no ack after the kill")
    )
    return took


def failover_cell(fam: Family, column: str, kills: int, res: Results, kill: str) -> None:
    times = [failover_once(fam, column, kill) for _ in range(kills)]
    done = [t for t in times if t is not None]
    res.add(
        f"failover after SIGKILL of the leader, s (median of {kills})",
        column,
        Spread.of(done).median if len(done) == kills else float("inf"),
    )


def prewarm(fam: Family, seconds: float) -> None:
    if seconds <= 0:
        return
    progress(f"  {fam.name}: untimed pre-warm, {seconds:g} s per producer kind")
    ensure_topic(fam, "bench-warm")
    for column in fam.columns:
        run_load(fam.python, fam.spec(column, "produce", "bench-warm", seconds=seconds))


def run_family(fam: Family, args: argparse.Namespace, res: Results, loads: list[str]) -> None:
    only = set(args.only)
    consume_topic = None
    consume_records = args.consume_mib * 1024 * 1024 // VALUE_BYTES
    prewarm(fam, args.warm_s)
    if "consume" in only:
        consume_topic = fill_consume_topic(fam, consume_records)
    for r in range(1, args.rounds + 1):
        progress(f"{fam.name}: round {r} of {args.rounds} (load {load_avg()})")
        for column in fam.columns:
            if "produce" in only:
                for size in args.sizes:
                    for producers in args.producers:
                        produce_cell(fam, column, size, producers, args.seconds, res)
            if consume_topic and column in fam.consume_columns:
                for consumers in args.consumers:
                    consume_cell(fam, column, consume_topic, consume_records, consumers, res)
        if "latency" in only:
            for column in fam.latency_columns:
                for rate in args.rates:
                    latency_cell(fam, column, rate, args.latency_s, res)
        # The kills come after every other cell of the round: a restarted node
        # leads nothing until the next leader-imbalance check (30 s for
        # lograft, 300 s for Kafka), so a cell after them would measure the
        # cluster with its leaders on two nodes (the JSON cells did: every
        # request to the restarted node was forwarded).
        if "failover" in only and fam.failover_column in fam.columns:
            failover_cell(fam, fam.failover_column, args.failovers, res, args.failover_kill)
    rss = peak_rss_mib(fam.cluster.pids())
    for column in fam.columns:
        res.add("server peak RSS, MiB (largest node)", column, rss)
    loads.append(f"after {fam.name}: {load_avg()}")


def families(args: argparse.Namespace, work: Path, tools_py: str) -> Iterator[Family]:
    if "kafka" in args.systems:
        java = shutil.which("java")
        if java is None:
            raise SystemExit("Kafka needs Java (Debian: apt-get install default-jre-headless)")
        yield Family(
            "Kafka",
            ("Kafka", "Kafka no-idem"),
            tools_py,
            kafka_local.KafkaCluster(work / "kafka", java, PARTITIONS),
            failover_column="Kafka",
            consume_columns=("Kafka",),
            latency_columns=("Kafka",),
            work=work,
            min_free_gib=args.min_free_gib,
        )
    if "nats" in args.systems:
        yield Family(
            "NATS",
            ("NATS",),
            tools_py,
            NatsCluster(work / "nats", ensure_nats_server()),
            failover_column="NATS",
            consume_columns=("NATS",),
            latency_columns=("NATS",),
            work=work,
            min_free_gib=args.min_free_gib,
        )
    if "lograft" in args.systems:
        yield Family(
            "lograft",
            ("lograft", "lograft JSON"),
            sys.executable,
            LograftCluster(),
            failover_column="lograft",
            consume_columns=("lograft",),
            latency_columns=("lograft", "lograft asyncio"),
            work=work,
            min_free_gib=args.min_free_gib,
        )


def write_docs(run: str, docs: Path = DOCS) -> None:
    """Put `run` (a `### ...` subsection) at the top of the section under
    DOCS_HEADING, above the runs and notes already there, which are kept; a
    file without the section gets it at its end."""
    text = docs.read_text()
    start = text.find(DOCS_HEADING)
    if start < 0:
        docs.write_text(text.rstrip("\n") + f"\n\n{DOCS_HEADING}\n\n{run}")
        return
    at = start + len(DOCS_HEADING)
    body = text[at:].lstrip("\n")
    docs.write_text(f"{text[:at]}\n\n{run}\n{body}")


def report(
    args: argparse.Namespace, res: Results, loads: list[str], vers: dict[str, str], took: float
) -> str:
    for column, mib in res.client_rss.items():
        res.add("client peak RSS, MiB (largest process)", column, mib)
    systems = [s for s in SYSTEMS if any(c == s for _, c in res.values)]
    table = render_table(res.rows, systems, res.cells(), RATIOS)
    command = "scripts/bench_compare.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f"### A run of scripts/bench_compare.py ({when})\n\n"
        f"Written by `{command.strip()}` on {when} ({took / 60:.0f} min).\n\n"
        f"- Machine: {machine()}\n"
        f"- Versions: {', '.join(f'{k} {v}' for k, v in vers.items())}\n"
        f"- Load average (1, 5, 15 min): {'; '.join(loads)}\n"
        f"- Settings: {PARTITIONS} partitions (NATS: one stream), replication 3, min ISR 2, "
        f"acks=all, idempotent producers (except Kafka no-idem), {VALUE_BYTES} B values unless "
        f"a row says otherwise, linger 5 ms; {args.rounds} rounds per cell, median (min-max); "
        f"{args.warm_s:g} s untimed pre-warm per producer kind; produce cells "
        f"{args.seconds:g} s, latency cells {args.latency_s:g} s; consume from a topic of "
        f"{args.consume_mib} MiB.\n\n"
        f"{table}\n"
    )


def interrupted(_signum: int, _frame: Any) -> None:
    # SIGTERM cleans up as Ctrl-C does (the finally blocks stop every process by pid).
    raise KeyboardInterrupt


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    loads = ("produce", "consume", "latency", "failover")
    ap.add_argument("--only", nargs="+", choices=loads, default=list(loads), help="workloads")
    ap.add_argument(
        "--systems",
        nargs="+",
        choices=("kafka", "nats", "lograft"),
        default=["kafka", "nats", "lograft"],
    )
    ap.add_argument("--rounds", type=int, default=3, help="runs of each cell (default 3)")
    ap.add_argument("--warm-s", type=float, default=20.0, help="untimed pre-warm, s (20)")
    ap.add_argument("--seconds", type=float, default=15.0, help="one produce run, s (15)")
    ap.add_argument("--sizes", nargs="+", type=int, default=[100, 1024], help="value bytes")
    ap.add_argument("--producers", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--consumers", nargs="+", type=int, default=[1, 3])
    ap.add_argument("--consume-mib", type=int, default=1024, help="consume topic size, MiB")
    ap.add_argument("--rates", nargs="+", type=int, default=[2000, 20000], help="records/s")
    ap.add_argument("--latency-s", type=float, default=20.0, help="one latency run, s (20)")
    ap.add_argument("--failovers", type=int, default=5, help="kills per round (5)")
    ap.add_argument(
        "--failover-kill",
        choices=("leader", "controller"),
        default="leader",
        help="kill partition 0's leader (default), or (lograft) the leader of a partition "
        "led by the active controller's node, so that a Raft election comes first",
    )
    ap.add_argument(
        "--min-free-gib",
        type=float,
        default=MIN_FREE_GIB,
        help=f"stop before a produce cell when less disk is free, GiB ({MIN_FREE_GIB:g})",
    )
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, interrupted)
    t0 = time.monotonic()
    tools_py = tools_python() if {"kafka", "nats"} & set(args.systems) else sys.executable
    work = Path(tempfile.mkdtemp(prefix="lograft-compare-"))
    res, loads = Results(), [f"before: {load_avg()}"]
    try:
        for fam in families(args, work, tools_py):
            REAPER.stops.append(fam.cluster.stop)
            fam.cluster.start()
            try:
                run_family(fam, args, res, loads)
            finally:
                progress(f"stopping {fam.name}")
                fam.cluster.stop()
                REAPER.stops.remove(fam.cluster.stop)
                if not args.keep:  # its data leaves the disk before the next system runs
                    shutil.rmtree(work / fam.name.lower(), ignore_errors=True)
        section = report(args, res, loads, versions(tools_py), time.monotonic() - t0)
    except KeyboardInterrupt:
        progress("interrupted: stopping everything started")
        return 130
    finally:
        REAPER.close()
        if args.keep:
            progress(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(section)
    if not args.no_docs:
        write_docs(section)
        progress(f"wrote {DOCS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

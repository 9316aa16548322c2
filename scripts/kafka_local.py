"""Apache Kafka and Spark's Kafka connector from Maven Central, for comparisons.

Used by scripts/bench_spark.py. Nothing here is part of lograft: it fetches
jars with Maven into the git-ignored `.tools/` on first use and runs one
Kafka broker for a benchmark.

- `maven_jars(name, artifacts)`: `mvn dependency:copy-dependencies` of the
  given artifacts into `.tools/<name>/libs` (once; a `.complete` marker makes
  later runs skip Maven). When `mvn` is missing and we are root on a
  Debian-style system, Debian's `maven` package is installed first (and the
  script says so).
- `KafkaBroker`: a single KRaft node that is both broker and controller
  (`process.roles=broker,controller`), formatted with `kafka.tools.StorageTool`
  and run as `java -Xmx1g -cp libs/* kafka.Kafka`, on two 127.0.0.1 ports
  below the ephemeral range (loopback_ports.py), in its own session, stopped
  by pid.
  Topics are created on first write with `num.partitions` partitions.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from loopback_ports import free_ports  # a sibling script

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools"

KAFKA_VERSION = "4.4.0"
LOG4J_VERSION = "2.25.5"  # the log4j-core that kafka 4.4.0 depends on
KAFKA_BROKER_ARTIFACTS = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    f"org.apache.kafka:kafka-server:{KAFKA_VERSION}",
    # Kafka logs through slf4j 1.7; without a binding its log is empty.
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
)

# Maven Central serves spark-sql-kafka-0-10 up to 4.2.0 (4.2.1 and 4.3.0 are
# refused), so the comparison runs on PySpark 4.2.0.
SPARK_KAFKA_VERSION = "4.2.0"
SPARK_KAFKA_ARTIFACTS = (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_KAFKA_VERSION}",)
# What the connector needs beyond PySpark's own jars (Spark, Scala, Hadoop, lz4,
# snappy and slf4j are already there, and a second copy of them would clash).
SPARK_KAFKA_JARS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_mvn() -> str:
    """The path of `mvn`, installing Debian's maven when it is missing and we may."""
    mvn = shutil.which("mvn")
    if mvn:
        return mvn
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("mvn is not installed: installing Debian's maven package with apt-get (once)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "maven"],
            check=True,
            env=env,
        )
        mvn = shutil.which("mvn")
        if mvn:
            return mvn
    raise SystemExit(
        "this benchmark fetches Kafka's jars with Maven: install it (Debian: apt-get install maven)"
    )


def maven_jars(
    name: str, artifacts: tuple[str, ...], only: tuple[str, ...] | None = None
) -> list[Path]:
    """The runtime jars of `artifacts` (group:artifact:version) in .tools/<name>/libs,
    fetched with Maven on first use; `only` keeps just those artifact ids."""
    dest = TOOLS / name
    libs = dest / "libs"
    marker = dest / ".complete"
    if not marker.exists():
        mvn = ensure_mvn()
        log(f"fetching {', '.join(artifacts)} with Maven into {libs} (first run only)")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        deps = "".join(
            "<dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
            "<version>{}</version></dependency>".format(*a.split(":"))
            for a in artifacts
        )
        (dest / "pom.xml").write_text(
            '<project xmlns="http://maven.apache.org/POM/4.0.0">'
            "<modelVersion>4.0.0</modelVersion><groupId>lograft.tools</groupId>"
            f"<artifactId>{name}</artifactId><version>1</version><packaging>pom</packaging>"
            f"<dependencies>{deps}</dependencies></project>\n"
        )
        cmd = [
            mvn,
            "-q",
            "-B",
            "dependency:copy-dependencies",
            "-DoutputDirectory=libs",
            "-DincludeScope=runtime",
        ]
        if only:
            cmd.append("-DincludeArtifactIds=" + ",".join(only))
        done = subprocess.run(cmd, cwd=dest, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"mvn failed for {name}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
        marker.write_text("\n".join(artifacts) + "\n")
    return sorted(libs.glob("*.jar"))


def new_cluster_id() -> str:
    """A random KRaft cluster id, as Kafka's Uuid.randomUuid makes one: never
    starting with "-", which kafka-storage's argument parser would read as an
    option (one run in 64 failed with "--cluster-id/-t: expected one argument")."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaBroker:
    """One Kafka node in KRaft combined mode (broker and controller) on 127.0.0.1."""

    def __init__(self, workdir: Path, java: str, partitions: int) -> None:
        self.workdir = workdir
        self.java = java
        self.partitions = partitions
        self.libs = maven_jars("kafka-" + KAFKA_VERSION, KAFKA_BROKER_ARTIFACTS)[0].parent
        self.port, self.controller_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _properties(self) -> Path:
        data = self.workdir / "data"
        props = self.workdir / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                    f"CONTROLLER://127.0.0.1:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={data}",
                    f"num.partitions={self.partitions}",
                    "auto.create.topics.enable=true",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "",
                ]
            )
        )
        return props

    def _java(self, *args: str) -> list[str]:
        log4j = self.workdir / "log4j2.properties"
        if not log4j.exists():
            log4j.write_text(
                "rootLogger.level = WARN\nrootLogger.appenderRef.out.ref = out\n"
                "appender.out.type = Console\nappender.out.name = out\n"
                "appender.out.layout.type = PatternLayout\n"
                "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            )
        return [
            self.java,
            "-Xmx1g",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{self.libs}/*",
            *args,
        ]

    def start(self, timeout_s: float = 60.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self._properties()
        cluster_id = new_cluster_id()
        formatted = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
            capture_output=True,
            text=True,
            check=False,
        )
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{formatted.stderr[-3000:]}")
        log(f"starting Kafka {KAFKA_VERSION} (KRaft, one node) on {self.bootstrap}")
        out = (self.workdir / "kafka.log").open("wb")
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(props)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited ({self.proc.returncode}): {self.log_tail()}")
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"Kafka did not listen on {self.bootstrap}: {self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        path = self.workdir / "kafka.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class KafkaCluster:
    """Three Kafka nodes in KRaft combined mode (each broker and controller, a
    three-voter controller quorum) on 127.0.0.1, for scripts/bench_compare.py:
    default replication factor 3, min.insync.replicas 2, `-Xmx1g` each. Nodes
    can be SIGKILLed and restarted on their data (failover runs)."""

    NODES = (1, 2, 3)

    def __init__(self, workdir: Path, java: str, partitions: int) -> None:
        self.workdir = workdir
        self.java = java
        self.partitions = partitions
        self.libs = maven_jars("kafka-" + KAFKA_VERSION, KAFKA_BROKER_ARTIFACTS)[0].parent
        ports = free_ports(6)
        self.ports = dict(zip(self.NODES, ports[:3], strict=True))
        self.controller_ports = dict(zip(self.NODES, ports[3:], strict=True))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def _properties(self, n: int) -> Path:
        voters = ",".join(f"{m}@127.0.0.1:{self.controller_ports[m]}" for m in self.NODES)
        props = self.workdir / f"server-{n}.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    f"node.id={n}",
                    f"controller.quorum.voters={voters}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.ports[n]},"
                    f"CONTROLLER://127.0.0.1:{self.controller_ports[n]}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.ports[n]}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={self.workdir / f'data-{n}'}",
                    f"num.partitions={self.partitions}",
                    "default.replication.factor=3",
                    "min.insync.replicas=2",
                    "auto.create.topics.enable=true",
                    "offsets.topic.replication.factor=3",
                    "transaction.state.log.replication.factor=3",
                    "transaction.state.log.min.isr=2",
                    "group.initial.rebalance.delay.ms=0",
                    "",
                ]
            )
        )
        return props

    def _java(self, *args: str) -> list[str]:
        # The same command line and log4j settings as the single broker's.
        return KafkaBroker._java(self, *args)  # type: ignore[arg-type]  # duck-typed self

    def start(self, timeout_s: float = 120.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        for n in self.NODES:
            props = self._properties(n)
            formatted = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
                capture_output=True,
                text=True,
                check=False,
            )
            if formatted.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed:\n{formatted.stderr[-3000:]}")
        log(f"starting Kafka {KAFKA_VERSION} (KRaft, 3 combined nodes) on {self.bootstrap}")
        for n in self.NODES:
            self.start_node(n)
        for n in self.NODES:
            self.wait_listening(n, timeout_s)

    def start_node(self, n: int) -> None:
        out = (self.workdir / f"kafka-{n}.log").open("ab")
        self.procs[n] = subprocess.Popen(
            self._java("kafka.Kafka", str(self.workdir / f"server-{n}.properties")),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()

    def wait_listening(self, n: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.procs[n].poll() is not None:
                raise RuntimeError(f"Kafka node {n} exited: {self.log_tail(n)}")
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", self.ports[n])) == 0:
                    return
            time.sleep(0.2)  # polling the port with a deadline
        raise RuntimeError(f"Kafka node {n} did not listen: {self.log_tail(n)}")

    def kill(self, n: int) -> None:
        proc = self.procs[n]
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def log_tail(self, n: int, lines: int = 30) -> str:
        path = self.workdir / f"kafka-{n}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

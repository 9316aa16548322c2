"""A Spark standalone cluster on this machine, and the page-view pipeline submitted to it.

    .venv/bin/python scripts/spark_standalone.py     # against scripts/cluster.sh's cluster
    .venv/bin/python scripts/spark_standalone.py --bootstrap http://127.0.0.1:9091

Starts, from the installed pyspark (`bin/spark-class`), one master
(`org.apache.spark.deploy.master.Master`) and two workers
(`org.apache.spark.deploy.worker.Worker`, 1 core and 1 GiB each), all on
127.0.0.1 with ports below the ephemeral range, each in its own session;
submits `lograft/pipelines/examples/page_views.py` with `spark-submit
--master spark://127.0.0.1:PORT`; and checks that it succeeded (its counts
equal plain Python's) with one executor on each worker: the lograft source's
read tasks and the sink's write tasks ran in those executors' JVMs (and their
Python workers), which fetched from and produced to the partition leaders
themselves, not through the driver. Everything started is stopped by pid at
the end (SIGTERM, SIGKILL after a grace period), also on failure or Ctrl-C.

The same pipeline runs on a real Spark cluster the same way; docs/pipelines.md
says what the workers need.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from loopback_ports import free_ports  # noqa: E402  (a sibling script)

from lograft.pipelines.examples.common import LOCAL_BOOTSTRAP  # noqa: E402
from lograft.pipelines.local_spark import LOOPBACK, prepare_environment  # noqa: E402

PAGE_VIEWS = ROOT / "lograft" / "pipelines" / "examples" / "page_views.py"
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 20.0
WORKERS = 2
# Flags of every JVM started here (master, workers, driver, executors): the
# C1 compiler only, one compiler thread, the serial collector. These JVMs run
# one small job, so C2's optimisation never pays back its compile time; on a
# 2-core machine the defaults spend most of the run compiling (a local
# session's start plus a few small queries: 46 s of JVM CPU with the defaults,
# 25 s with these, load 11-15). Results do not depend on them.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"


def log(msg: str) -> None:
    print(f"[standalone] {msg}", file=sys.stderr, flush=True)


def spark_home(env: Mapping[str, str]) -> Path:
    """The SPARK_HOME of `env`, the environment the Spark programs run with
    (prepare_environment may have set it to a home of links for the Python
    workers); the installed pyspark's when it names none."""
    home = env.get("SPARK_HOME")
    if home:
        return Path(home)
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


@dataclass
class StandaloneCluster:
    """A master and `workers` workers in `workdir`; `start()`, then `stop()` (or `with`)."""

    workdir: Path
    workers: int = WORKERS
    worker_cores: int = 1
    worker_memory: str = "1g"
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    master_port: int = 0
    master_ui_port: int = 0
    _env: dict[str, str] | None = None

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def env(self) -> dict[str, str]:
        """Our environment with JAVA_HOME, SPARK_LOCAL_IP and PYSPARK_PYTHON set."""
        if self._env is None:
            env = dict(os.environ)
            prepare_environment(env)
            env["SPARK_LOG_DIR"] = str(self.workdir / "logs")
            # The master's and workers' JVMs (spark-class reads it for daemons).
            env.setdefault("SPARK_DAEMON_JAVA_OPTS", JVM_OPTIONS)
            self._env = env
        return self._env

    def _spawn(self, name: str, *args: str) -> None:
        log_file = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [str(spark_home(self.env) / "bin" / "spark-class"), *args],
            env=self.env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C to us does not reach it; we stop it by pid
        )
        log_file.close()
        self.procs.append((name, proc))
        log(f"started {name} (pid {proc.pid}), log {self.workdir / f'{name}.log'}")

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports = free_ports(2 + 2 * self.workers)
        self.master_port, self.master_ui_port = ports[0], ports[1]
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", LOOPBACK,
            "--port", str(self.master_port),
            "--webui-port", str(self.master_ui_port),
        )  # fmt: skip
        self._wait(lambda: self._master_state().get("status") == "ALIVE", "the master")
        for n in range(self.workers):
            work = self.workdir / f"worker-{n + 1}"
            work.mkdir(exist_ok=True)
            self._spawn(
                f"worker-{n + 1}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", LOOPBACK,
                "--port", str(ports[2 + 2 * n]),
                "--webui-port", str(ports[3 + 2 * n]),
                "--cores", str(self.worker_cores),
                "--memory", self.worker_memory,
                "--work-dir", str(work),
                self.master_url,
            )  # fmt: skip
        self._wait(
            lambda: (
                sum(w["state"] == "ALIVE" for w in self._master_state().get("workers", []))
                == self.workers
            ),
            f"{self.workers} workers to register",
        )
        log(f"master {self.master_url} with {self.workers} workers")

    def _master_state(self) -> dict:
        import json

        url = f"http://{LOOPBACK}:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())

    def _wait(self, condition: object, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}): {self.tail(name)}")
            with contextlib.suppress(OSError, ValueError):
                if condition():  # type: ignore[operator]
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.tail('master')}")
            time.sleep(0.3)

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def python_executors(self) -> dict[str, list[Path]]:
        """Worker name -> the executor directories (work-dir/app-id/executor-id) it ran whose
        executor ran Python tasks (the lograft source's reads, the sink's writes)."""
        return {
            f"worker-{n + 1}": sorted(
                p
                for p in (self.workdir / f"worker-{n + 1}").glob("app-*/*")
                if (p / "stderr").exists()
                and "Starting Python task execution" in (p / "stderr").read_text(errors="replace")
            )
            for n in range(self.workers)
        }

    def stop(self) -> None:
        """SIGTERM every process we started (workers first), SIGKILL after the grace period;
        each one's whole session, since a worker's executors are its children."""
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                log(f"{name} (pid {proc.pid}) ignored SIGTERM; SIGKILL")
                proc.kill()
                proc.wait()
            # An executor that outlived its worker is still in the worker's session.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def submit_page_views(
    cluster: StandaloneCluster, bootstrap: str, events: int, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """spark-submit the page-view pipeline to the cluster; its output, captured."""
    cmd = [
        str(spark_home(cluster.env) / "bin" / "spark-submit"),
        "--master", cluster.master_url,
        "--total-executor-cores", str(cluster.workers * cluster.worker_cores),
        "--executor-cores", str(cluster.worker_cores),
        "--executor-memory", "512m",
        "--driver-memory", "512m",
        "--driver-java-options", JVM_OPTIONS,
        "--conf", f"spark.executor.extraJavaOptions={JVM_OPTIONS}",
        "--conf", f"spark.driver.host={LOOPBACK}",
        "--conf", f"spark.driver.bindAddress={LOOPBACK}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.sql.session.timeZone=UTC",
        str(PAGE_VIEWS),
        "run", "--bootstrap", bootstrap, "--events", str(events), "--no-console",
        "--timeout", str(timeout_s),
    ]  # fmt: skip
    log("spark-submit " + " ".join(cmd[1:]))
    return subprocess.run(
        cmd,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=timeout_s + 120,
        check=False,
    )


def run(bootstrap: str, events: int, timeout_s: float, workdir: Path) -> tuple[bool, str]:
    """Start the cluster, submit, check; (passed, what to print)."""
    with StandaloneCluster(workdir) as cluster:
        done = submit_page_views(cluster, bootstrap, events, timeout_s)
        executors = cluster.python_executors()
    lines = [done.stdout.rstrip()]
    for worker, dirs in executors.items():
        lines.append(f"{worker}: {len(dirs)} executor(s) ran Python tasks")
    ok = (
        done.returncode == 0
        and "Spark's match plain Python's" in done.stdout
        and all(executors.values())
    )
    if not ok:
        lines.append(f"spark-submit exited {done.returncode}; its stderr ends:")
        lines.extend(done.stderr.splitlines()[-40:])
    return ok, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default=LOCAL_BOOTSTRAP)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="spark-standalone-"))
    try:
        ok, text = run(args.bootstrap, args.events, args.timeout, workdir)
    finally:
        if args.keep:
            log(f"logs kept in {workdir}")
        else:
            subprocess.run(["rm", "-rf", str(workdir)], check=False)
    print(text)
    print("\nPASSED" if ok else "\nFAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Flame graphs of a lograft node and of its client under bench_compare's loads (py-spy).

Issue 14 asks for profiles taken under the side-by-side harness, so the
largest costs are removed first. This script starts three lograft nodes as
scripts/bench_compare.py does (3 partitions, RF 3, min ISR 2), runs one of its
loads (scripts/compare_load.py, the same worker processes and settings:
acks=all, idempotence, 100 B values, linger 5 ms) and, after an untimed
warm-up, samples with py-spy at `--rate` Hz for `--seconds`:

- the node leading partition 0 (every thread of the process: event loop,
  Raft, log maintenance, workers), and
- the load process (the client) for the workloads that use the Python client.

Per workload and process it writes `<out>/<workload>-<node|client>.svg` (a
flame graph: open it in a browser, click to zoom) and prints, from the same
samples read as py-spy's collapsed stacks, the functions with the largest
share of the busy samples: by own time (any code, C calls included under
their Python caller), and by total time (lograft's own functions with all
they call). Samples whose leaf is a wait (epoll, poll, a condition or event,
an idle worker thread) are counted apart, not as busy: py-spy's own idle
detection misses them when it samples without pausing the process. The flame
graphs keep them.

py-spy is no lograft dependency: it is installed with pip into
.tools/py-spy-venv on first use. It reads the other process's memory, which
needs ptrace rights (root, or kernel.yama.ptrace_scope = 0).

    .venv/bin/python scripts/profile_flame.py                          # produce, json, consume
    .venv/bin/python scripts/profile_flame.py --workloads produce --seconds 20 --out /tmp/flame
    .venv/bin/python scripts/profile_flame.py --workloads latency --out /tmp/flame  # 2,000/s paced
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import bench_compare as bc  # a sibling script
from bench_common import log, machine

ROOT = Path(__file__).resolve().parent.parent
PY_SPY_VENV = ROOT / ".tools" / "py-spy-venv"
PY_SPY_PACKAGE = "py-spy>=0.4"
DEFAULT_OUT = ROOT / "docs" / "flame"
# Records the consume workload reads: enough to outlast the sampling window.
CONSUME_RECORDS = 5_000_000
# Records/s of the latency workload: bench_compare's lower rate, the issue's
# 2,000/s, paced from the schedule as there.
LATENCY_RATE = 2000
# Seconds a load process may take past its own run before it counts as hung.
LOAD_GRACE_S = 120


@dataclass(frozen=True)
class Workload:
    """One of bench_compare's loads, as this script runs it."""

    column: str  # bench_compare's column: which worker drives it
    action: str  # compare_load.py's action
    client_profiled: bool  # the load process runs lograft's Python client


WORKLOADS = {
    "produce": Workload("lograft", "produce", client_profiled=True),
    "json": Workload("lograft JSON", "produce", client_profiled=False),
    "consume": Workload("lograft", "consume", client_profiled=True),
    # The asyncio client's load (bench_compare's "lograft asyncio" column), the
    # client's work on one loop. Without --native, uvloop's own C code and its
    # epoll wait show as the own time of the frame that runs the loop
    # (`lograft_latency_async` here, `Runner.run` in a node), busy or not.
    "latency": Workload("lograft asyncio", "latency-async", client_profiled=True),
}


def py_spy() -> str:
    """The py-spy binary, installed into .tools/py-spy-venv on first use."""
    binary = PY_SPY_VENV / "bin" / "py-spy"
    if binary.exists():
        return str(binary)
    log(f"installing {PY_SPY_PACKAGE} into {PY_SPY_VENV} with pip (first run)")
    subprocess.run([sys.executable, "-m", "venv", str(PY_SPY_VENV)], check=True)
    pip = [str(PY_SPY_VENV / "bin" / "python"), "-m", "pip", "install", "-q", PY_SPY_PACKAGE]
    subprocess.run(pip, check=True)
    return str(binary)


# Leaf frames where a thread waits rather than works (py-spy's idle detection
# misses them in --nonblocking mode): their samples are counted apart.
IDLE_LEAVES = (
    "EpollSelector.select ",
    "PollPoller.poll ",
    "Condition.wait ",
    "Event.wait ",
    "Thread.join ",
    "_worker (concurrent/futures/thread.py)",
)


# lograft's entry frames, under every busy sample of their process, and the
# request middlewares and the request pipeline's steps, under every request:
# left out of the totals, which are to show where the time goes (their own
# time still shows in the own list).
WRAPPER_MARKS = (
    "middleware",
    "json_http_errors.<locals>.handle",
    "handler_mark.<locals>",
    "RequestPipeline.",
)
ENTRY_FRAMES = (
    "main (lograft/cli/main.py",
    "_cmd_node (lograft/cli/main.py",
    "run_node_process (lograft/node/server.py",
    "run_on (lograft/node/event_loop.py",
    "LoopThread._main (lograft/client/loop_thread.py",
)


def is_wrapper(frame: str) -> bool:
    return frame.startswith(ENTRY_FRAMES) or any(m in frame for m in WRAPPER_MARKS)


def is_idle(leaf: str) -> bool:
    return leaf.startswith(IDLE_LEAVES[:-1]) or leaf == IDLE_LEAVES[-1]


def shares(stacks: list[str]) -> tuple[int, int, Counter[str], Counter[str]]:
    """(busy samples, idle samples, own busy samples per function, total busy samples per
    function in lograft's own code) of py-spy's collapsed stacks.

    A line is `frame;frame;...;leaf count`; a function counts once per sample
    in the total even when it recurses."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    busy = idle = 0
    for line in stacks:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if is_idle(frames[-1]):
            idle += count
            continue
        busy += count
        own[frames[-1]] += count
        for frame in set(frames):
            if "(lograft/" in frame and not is_wrapper(frame):
                total[frame] += count
    return busy, idle, own, total


def report(title: str, stacks: list[str], top: int) -> None:
    busy, idle, own, total = shares(stacks)
    print(f"\n### {title}: {busy} busy samples ({idle} more waiting in select/poll/locks)\n")
    if not busy:
        print("(no busy samples)")
        return
    print("| own % of busy | function |\n| ---: | --- |")
    for frame, n in own.most_common(top):
        print(f"| {100 * n / busy:.1f} | `{frame}` |")
    print("\n| total % of busy | lograft function (with what it calls) |\n| ---: | --- |")
    for frame, n in total.most_common(top):
        print(f"| {100 * n / busy:.1f} | `{frame}` |")


def leader_pid(cluster: bc.LograftCluster, topic: str) -> tuple[int, int]:
    node = cluster.leader(topic)["leader"]
    pid = cluster.lc.pid_of(cluster.inner.dir, node)
    if pid is None:
        raise RuntimeError(f"node {node} leads {topic} but has no pid on record")
    return node, pid


def wait_running(proc: subprocess.Popen[str], seconds: float) -> None:
    """Let the load run `seconds` untimed (the warm-up), failing if it exits early."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return
    raise RuntimeError(f"the load process exited during the warm-up ({proc.returncode})")


def load_spec(fam: bc.Family, name: str, work: Workload, seconds: float) -> dict[str, object]:
    if name == "consume":
        topic = bc.fill_consume_topic(fam, CONSUME_RECORDS)
        group = f"flame-{os.getpid()}-{time.monotonic_ns()}"
        return fam.spec(
            work.column,
            "consume",
            topic,
            group=group,
            consumers=1,
            max_records=CONSUME_RECORDS,
            timeout_s=seconds,
        )
    topic = f"flame-{name}"
    bc.ensure_topic(fam, topic)
    if name == "latency":
        group = f"flame-{os.getpid()}-{time.monotonic_ns()}"
        return fam.spec(
            work.column, work.action, topic, rate=LATENCY_RATE, seconds=seconds, group=group
        )
    return fam.spec(work.column, "produce", topic, seconds=seconds)


def profile(
    fam: bc.Family, name: str, args: argparse.Namespace, spy: str, out: Path, scratch: Path
) -> None:
    work = WORKLOADS[name]
    spec = load_spec(fam, name, work, args.warm_s + args.seconds + 5)
    topic = str(spec["topic"])
    node, pid = leader_pid(fam.cluster, topic)
    bc.progress(f"{name}: load started, warming up {args.warm_s:.0f} s; load {bc.load_avg()}")
    load = bc.start_load(fam.python, spec)
    wait_running(load, args.warm_s)
    bc.progress(f"{name}: sampling node {node} (pid {pid}) for {args.seconds:.0f} s")
    targets = [("node", pid, f"node {node}, the leader of {topic}-0")]
    if work.client_profiled:
        targets.append(("client", load.pid, "the client (compare_load.py)"))
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        recorders = {
            role: (pid_, what, _spawn_pair(spy, pid_, args, out, Path(tmp), name, role))
            for role, pid_, what in targets
        }
        for role, (_pid, what, (procs, raw)) in recorders.items():
            for proc in procs:
                if proc.wait(timeout=args.seconds + 60) != 0:
                    raise RuntimeError(f"py-spy failed on the {role} ({proc.returncode})")
            report(f"{name}: {what}", raw.read_text().splitlines(), args.top)
    bc.finish_load(load, LOAD_GRACE_S)
    bc.progress(f"{name}: done; load {bc.load_avg()}")


def _spawn_pair(
    spy: str, pid: int, args: argparse.Namespace, out: Path, tmp: Path, name: str, role: str
) -> tuple[list[subprocess.Popen[bytes]], Path]:
    """Start a flame-graph and a collapsed-stacks recorder on `pid` at once."""
    common = ["record", "-p", str(pid), "-d", str(int(args.seconds)), "-r", str(args.rate)]
    # --function: one frame per function (not per line), so shares add up.
    common += ["--nonblocking", "--function"]
    raw = tmp / f"{name}-{role}.txt"
    svg = out / f"{name}-{role}.svg"
    procs = [
        subprocess.Popen([spy, *common, "-o", str(svg)], stdout=subprocess.DEVNULL),
        subprocess.Popen([spy, *common, "-f", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL),
    ]
    return procs, raw


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workloads", default="produce,json,consume", help="of: produce,json,consume,latency"
    )
    p.add_argument("--seconds", type=float, default=20.0, help="sampling window per workload, s")
    p.add_argument("--warm-s", type=float, default=10.0, help="untimed warm-up per workload, s")
    p.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=15, help="functions listed per table")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the SVGs go")
    args = p.parse_args()
    unknown = set(args.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        p.error(f"unknown workloads: {', '.join(sorted(unknown))} (known: {', '.join(WORKLOADS)})")
    return args


def main() -> int:
    args = parse_args()
    spy = py_spy()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"Machine: {machine()}")
    print(f"Command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    cluster = bc.LograftCluster()
    fam = bc.Family(
        "lograft",
        ("lograft", "lograft JSON"),
        sys.executable,
        cluster,
        failover_column="lograft",
        consume_columns=("lograft",),
        latency_columns=("lograft",),
        work=cluster.inner.dir,
        min_free_gib=bc.MIN_FREE_GIB,
    )
    bc.REAPER.stops.append(cluster.stop)
    try:
        bc.progress("starting three lograft nodes")
        cluster.start()
        with tempfile.TemporaryDirectory() as scratch:
            for name in args.workloads.split(","):
                profile(fam, name, args, spy, args.out, Path(scratch))
    finally:
        bc.REAPER.close()
    print(f"\nflame graphs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

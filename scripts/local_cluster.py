"""Run a local three-node lograft cluster on 127.0.0.1 (what scripts/cluster.sh calls).

    start           write configs (first time), start the nodes that are not running,
                    wait until every node is ready, print curl commands to try
    stop            SIGTERM every node (controlled shutdown), SIGKILL after a grace period
    status          which nodes run, and the cluster view
    kill N          SIGKILL node N (to watch a failover)
    restart N       start node N again with its data

Data, configs, logs and pid files live under data/cluster/ (or --dir); starting
again keeps the data. Ports: HTTP 9091-9093, Raft 19091-19093 (--base-port
moves both).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

NODES = (1, 2, 3)
READY_TIMEOUT_S = 90
STOP_GRACE_S = 20


def http_port(base: int, node: int) -> int:
    return base + node


def raft_port(base: int, node: int) -> int:
    return base + 10_000 + node


def write_configs(directory: Path, base: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    secret_file = directory / "cluster-secret"
    if not secret_file.exists():
        secret_file.write_text(secrets.token_hex(16))
        secret_file.chmod(0o600)
    secret = secret_file.read_text().strip()
    voters = "".join(
        f'\n[[voters]]\nid = {n}\nraft = "127.0.0.1:{raft_port(base, n)}"\n'
        f'http = "127.0.0.1:{http_port(base, n)}"\n'
        for n in NODES
    )
    for n in NODES:
        path = directory / f"node-{n}.toml"
        if path.exists():
            continue
        path.write_text(
            f"# lograft node {n} of the local cluster (written by scripts/cluster.sh)\n"
            f"node_id = {n}\n"
            'roles = ["controller", "broker"]\n'
            f'data_dir = "{directory / f"node-{n}"}"\n'
            'cluster_id = "lograft-local"\n'
            "# Authenticates the internal endpoints; the Raft password is derived from it.\n"
            f'cluster_secret = "{secret}"\n'
            f'\n[http]\nhost = "127.0.0.1"\nport = {http_port(base, n)}\n'
            f"{voters}"
            "\n[broker]\n"
            "# A follower that has not caught up for 10 s leaves the ISR.\n"
            "replica_lag_time_max_ms = 10000\n"
        )


def pid_of(directory: Path, n: int) -> int | None:
    try:
        pid = int((directory / f"node-{n}.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    # Make sure the pid is still our node, not a reused number.
    try:
        cmdline, state = proc_cmdline(pid), proc_state(pid)
    except (FileNotFoundError, IndexError):
        return None
    if state == "Z":
        return None  # exited, not yet reaped
    if not cmdline:
        # For a moment after the exec the kernel shows no command line (the
        # interpreter named by the `lograft` script's shebang is loading): a
        # node just started, which reading it as "exited" made `start` fail.
        return pid
    return pid if f"node-{n}.toml".encode() in cmdline else None


def proc_cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")


def proc_state(pid: int) -> str:
    """R, S, Z, ... from /proc/PID/stat (the field after the command name)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def start_node(directory: Path, n: int) -> None:
    if pid_of(directory, n) is not None:
        print(f"node {n} is already running")
        return
    exe = Path(sys.executable).parent / "lograft"
    log = (directory / f"node-{n}.log").open("ab")
    proc = subprocess.Popen(
        [str(exe), "node", "--config", str(directory / f"node-{n}.toml")],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    (directory / f"node-{n}.pid").write_text(str(proc.pid))
    print(f"started node {n} (pid {proc.pid}), log {directory / f'node-{n}.log'}")


def get_json(url: str, timeout: float = 2.0) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}")


def wait_ready(directory: Path, base: int, nodes: tuple[int, ...]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = set(nodes)
    while pending and time.monotonic() < deadline:
        for n in sorted(pending):
            if pid_of(directory, n) is None:
                print(f"\nnode {n} exited; last lines of its log:", file=sys.stderr)
                tail(directory / f"node-{n}.log")
                return False
            try:
                if get_json(f"http://127.0.0.1:{http_port(base, n)}/readyz").get("ready"):
                    pending.discard(n)
            except (OSError, ValueError):
                pass
        print(
            f"\rwaiting for nodes to be ready: {len(nodes) - len(pending)}/{len(nodes)}",
            end="",
            file=sys.stderr,
            flush=True,
        )
        if pending:
            time.sleep(0.25)  # polling readiness with a deadline
    print(file=sys.stderr)
    if pending:
        for n in sorted(pending):
            print(
                f"node {n} is not ready after {READY_TIMEOUT_S} s; its log ends:", file=sys.stderr
            )
            tail(directory / f"node-{n}.log")
        return False
    return True


def tail(path: Path, lines: int = 15) -> None:
    try:
        for line in path.read_text(errors="replace").splitlines()[-lines:]:
            print(f"  {line}", file=sys.stderr)
    except FileNotFoundError:
        print("  (no log)", file=sys.stderr)


def stop(directory: Path) -> None:
    pids = {n: pid_of(directory, n) for n in NODES}
    for n, pid in pids.items():
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            print(f"stopping node {n} (pid {pid})")
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(pid_of(directory, n) for n in NODES):
        time.sleep(0.1)  # polling process exit with a deadline
    for n in NODES:
        pid = pid_of(directory, n)
        if pid is not None:
            print(f"node {n} did not stop in {STOP_GRACE_S} s; killing it")
            os.kill(pid, signal.SIGKILL)
    for n in NODES:
        (directory / f"node-{n}.pid").unlink(missing_ok=True)
    print("stopped")


def show_status(directory: Path, base: int) -> None:
    for n in NODES:
        pid = pid_of(directory, n)
        print(f"node {n}: {'running, pid ' + str(pid) if pid else 'not running'}")
    for n in NODES:
        try:
            view = get_json(f"http://127.0.0.1:{http_port(base, n)}/v1/cluster")
        except OSError:
            continue
        print(json.dumps(view, indent=2))
        return


def print_examples(base: int) -> None:
    a, b, c = (f"http://127.0.0.1:{http_port(base, n)}" for n in NODES)
    print(f"""
lograft is running: three nodes (controller + broker each) at {a}, {b}, {c}

Try:
  # create a topic with 3 partitions, each replicated on all 3 brokers
  curl -s -XPOST {a}/v1/topics -H 'content-type: application/json' \\
       -d '{{"name": "orders", "partitions": 3, "replication_factor": 3}}'

  # produce JSON records with keys (any node routes them to the partition leaders)
  curl -s -XPOST {b}/v1/topics/orders/records -H 'content-type: application/json' \\
       -d '{{"records": [{{"key": "alice", "value": {{"item": "book", "qty": 1}}}},
                        {{"key": "bob",   "value": {{"item": "pen",  "qty": 3}}}}]}}'

  # see where they went: leader, replicas, in-sync replicas, offsets per partition
  curl -s {a}/v1/topics/orders

  # fetch partition 0 from its leader (a non-leader answers 421 with the leader's URL)
  curl -s '{a}/v1/topics/orders/partitions/0/records?offset=0'

  # tail every partition live from any node (Server-Sent Events; Ctrl-C to stop)
  curl -N '{c}/v1/topics/orders/stream?offset=earliest'

  # cluster view: active controller, Raft term, brokers
  curl -s {c}/v1/cluster

  scripts/cluster.sh kill 1      # SIGKILL node 1 and watch the leaders move
  scripts/cluster.sh restart 1   # bring it back; it catches up and rejoins
  scripts/cluster.sh stop        # stop all three (data stays in data/cluster)
""")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["start", "stop", "status", "kill", "restart"])
    parser.add_argument("node", nargs="?", type=int, choices=NODES)
    parser.add_argument("--dir", default="data/cluster", help="cluster directory")
    parser.add_argument(
        "--base-port",
        type=int,
        default=9090,
        help="HTTP ports are base+1..3, Raft ports base+10001..3",
    )
    args = parser.parse_args()
    directory = Path(args.dir).resolve()
    base = args.base_port
    if args.command in ("kill", "restart") and args.node is None:
        parser.error(f"{args.command} needs a node number (1, 2 or 3)")
    if args.command == "start":
        write_configs(directory, base)
        for n in NODES:
            start_node(directory, n)
        if not wait_ready(directory, base, NODES):
            return 1
        print_examples(base)
    elif args.command == "stop":
        stop(directory)
    elif args.command == "status":
        show_status(directory, base)
    elif args.command == "kill":
        pid = pid_of(directory, args.node)
        if pid is None:
            print(f"node {args.node} is not running")
            return 1
        os.kill(pid, signal.SIGKILL)
        print(f"killed node {args.node} (pid {pid}) with SIGKILL")
    elif args.command == "restart":
        start_node(directory, args.node)
        if not wait_ready(directory, base, (args.node,)):
            return 1
        print(f"node {args.node} is ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())

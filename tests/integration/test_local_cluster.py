"""The README's first command: `scripts/cluster.sh` → `scripts/local_cluster.py`.

The nodes run from a temporary directory on a free port range; every test
stops what it started (by the pids the script recorded) in a `finally`.
"""

from __future__ import annotations

import os
import random
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_harness import Response, eventually, http_request, port_is_free

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "local_cluster.py"
sys.path.insert(0, str(SCRIPT.parent))
import local_cluster  # noqa: E402  (a script, not a package)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def _kill_recorded(directory: Path) -> None:
    """SIGKILL any node the script recorded and still runs (test cleanup)."""
    for n in local_cluster.NODES:
        pid = local_cluster.pid_of(directory, n)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def _free_base() -> int:
    # Every port (HTTP base+n, Raft base+10,000+n, controller base+10,100+n)
    # stays below the kernel's ephemeral range (32768 and up here), where an
    # outgoing connection could take one between the check and the bind.
    for _ in range(200):
        base = random.randrange(10_000, 22_000, 10)
        ports = [
            port(base, n)
            for n in local_cluster.NODES
            for port in (
                local_cluster.http_port,
                local_cluster.raft_port,
                local_cluster.controller_port,
            )
        ]
        if all(port_is_free(p) for p in ports):
            return base
    raise RuntimeError("no free port range")


def test_a_node_is_seen_running_the_moment_it_was_started(tmp_path: Path) -> None:
    """Right after the exec the kernel shows an empty command line while the
    shebang's interpreter loads; `start` took that for "node exited" and
    failed about every other time on this machine."""
    fake = tmp_path / "fake-node"
    fake.write_text("#!/usr/bin/env python3\nimport sys, time\ntime.sleep(60)\n")
    fake.chmod(0o755)
    pid_file = tmp_path / "node-1.pid"
    for _ in range(20):
        proc = subprocess.Popen(
            [str(fake), "node", "--config", str(tmp_path / "node-1.toml")],
            stdin=subprocess.DEVNULL,
        )
        try:
            pid_file.write_text(str(proc.pid))
            assert local_cluster.pid_of(tmp_path, 1) == proc.pid
            # Another node's number, or an exited one, is not node 1.
            assert local_cluster.pid_of(tmp_path, 2) is None
        finally:
            proc.kill()
        # Exited but not yet reaped (a zombie): not running.
        eventually(
            lambda: local_cluster.pid_of(tmp_path, 1) is None, 10, "the killed process to show"
        )
        proc.wait()


@pytest.mark.parametrize(("state", "running"), [("R", True), ("S", True), ("Z", False)])
def test_an_empty_command_line_is_a_node_mid_exec_unless_it_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str, running: bool
) -> None:
    """What the kernel shows in the exec window, made deterministic."""
    pid = os.getpid()  # any live pid: only what /proc says of it is replaced
    (tmp_path / "node-1.pid").write_text(str(pid))
    monkeypatch.setattr(local_cluster, "proc_cmdline", lambda _pid: b"")
    monkeypatch.setattr(local_cluster, "proc_state", lambda _pid: state)
    assert local_cluster.pid_of(tmp_path, 1) == (pid if running else None)


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "cluster"
    try:
        yield directory
    finally:
        _kill_recorded(directory)


def _run(directory: Path, base: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--dir", str(directory), "--base-port", str(base)],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def test_start_serves_the_printed_examples_then_kill_restart_and_stop(cluster_dir: Path) -> None:
    base = _free_base()
    url = f"http://127.0.0.1:{local_cluster.http_port(base, 1)}"
    started = _run(cluster_dir, base, "start")
    assert started.returncode == 0, started.stderr
    assert f"curl -s -XPOST {url}/v1/topics" in started.stdout

    # The first two printed examples, as curl would send them.
    topic = {"name": "orders", "partitions": 3, "replication_factor": 3}
    created = http_request("POST", f"{url}/v1/topics", topic)
    assert created.status in (200, 201), created
    records = {"records": [{"key": "alice", "value": {"item": "book", "qty": 1}}]}
    via = f"http://127.0.0.1:{local_cluster.http_port(base, 2)}"

    def produced() -> bool:
        resp = http_request("POST", f"{via}/v1/topics/orders/records", records)
        return resp.status == 200

    eventually(produced, 30, "a produce through node 2")

    status = _run(cluster_dir, base, "status")
    assert status.returncode == 0, status.stderr
    assert all(f"node {n}: running" in status.stdout for n in local_cluster.NODES)

    killed = _run(cluster_dir, base, "kill", "3")
    assert killed.returncode == 0, killed.stderr
    eventually(lambda: local_cluster.pid_of(cluster_dir, 3) is None, 10, "node 3 to be gone")
    restarted = _run(cluster_dir, base, "restart", "3")
    assert restarted.returncode == 0, restarted.stderr
    assert local_cluster.pid_of(cluster_dir, 3) is not None

    stopped = _run(cluster_dir, base, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert all(local_cluster.pid_of(cluster_dir, n) is None for n in local_cluster.NODES)
    # Starting again keeps the data: the topic is still there.
    again = _run(cluster_dir, base, "start")
    assert again.returncode == 0, again.stderr
    doc = http_request("GET", f"{url}/v1/topics/orders")
    assert doc.status == 200 and len(doc.body["partitions"]) == 3, doc
    assert _run(cluster_dir, base, "stop").returncode == 0


def test_start_secure_serves_https_with_tokens_and_acls(cluster_dir: Path) -> None:
    """`start --secure`: a local CA, node certificates and a token issuer made
    once, an admin token at every start, and the printed curl session's
    steps: no credentials refused, admin allowed (by token and by its client
    certificate), another user's token
    minted by `token` seeing nothing until an ACL allows it."""
    base = _free_base()
    url = f"https://127.0.0.1:{local_cluster.http_port(base, 1)}"
    started = _run(cluster_dir, base, "start", "--secure")
    assert started.returncode == 0, started.stderr
    ca = cluster_dir / "tls" / "ca.pem"
    token_file = cluster_dir / "admin.token"
    assert f"curl -s --cacert $CA {url}/v1/topics" in started.stdout
    assert f'ADMIN="Authorization: Bearer $(cat {token_file})"' in started.stdout
    context = ssl.create_default_context(cafile=ca)
    admin = {"Authorization": f"Bearer {token_file.read_text().strip()}"}

    def call(method: str, path: str, body: object = None, **headers: str) -> Response:
        return http_request(method, url + path, body, headers=headers, context=context)

    refused = call("GET", "/v1/topics")
    assert refused.status == 401, refused
    assert refused.body["error"]["code"] == "SASL_AUTHENTICATION_FAILED"
    topic = {"name": "orders", "partitions": 1, "replication_factor": 3}
    assert call("POST", "/v1/topics", topic, **admin).status == 201
    # The admin client certificate is User:admin (the super user) too: it sees orders.
    with_cert = ssl.create_default_context(cafile=ca)
    tls = cluster_dir / "tls"
    with_cert.load_cert_chain(tls / "admin.pem", tls / "admin-key.pem")
    by_cert = http_request("GET", url + "/v1/topics", None, headers={}, context=with_cert)
    assert [t["name"] for t in by_cert.body["topics"]] == ["orders"], by_cert
    minted = _run(cluster_dir, base, "token", "alice")
    assert minted.returncode == 0, minted.stderr
    alice = {"Authorization": f"Bearer {minted.stdout.strip()}"}
    assert call("GET", "/v1/topics", **alice).body == {"topics": []}
    status = _run(cluster_dir, base, "status")
    assert '"active_controller"' in status.stdout, status
    # Started again: the same CA (the client's ca.pem still verifies) and a new token.
    assert _run(cluster_dir, base, "stop").returncode == 0
    first_ca = ca.read_bytes()
    again = _run(cluster_dir, base, "start")  # the directory is secure: it stays so
    assert again.returncode == 0, again.stderr
    assert ca.read_bytes() == first_ca
    renewed = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    assert call("GET", "/v1/topics/orders", **renewed).status == 200
    assert _run(cluster_dir, base, "stop").returncode == 0

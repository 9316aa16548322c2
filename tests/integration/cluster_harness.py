"""Real `lograft node` processes on 127.0.0.1, for integration and chaos tests.

A `LograftCluster` owns N nodes. Each node gets random free HTTP and Raft
ports, a data dir and a TOML config under the cluster's work dir, and logs to
`<workdir>/node-<id>.log`. Nodes run as `sys.executable -m lograft.cli.main
node --config FILE`, each in its own session (process group), so a signal
sent to the test runner never reaches them and teardown can prove that
nothing of a node's group survived.

Rules the harness keeps:

- **Stop by pid only.** `kill()` is SIGKILL to the pid we spawned,
  `terminate()` SIGTERM, `pause()`/`resume()` SIGSTOP/SIGCONT; every one
  waits for the exit it caused. `close()` SIGKILLs every node still running
  (including stopped ones: SIGKILL works on a stopped process), waits for
  each, and then asserts that no process of any node's group is left and that
  every port the cluster allocated accepts a new listener.
- **No sleeps as synchronisation.** Everything waits by polling a condition
  until a deadline (`eventually`); on timeout the failure carries the tail of
  every node's log.
- **Config generation is separate** (`node_config_toml`), so a chaos test can
  rewrite `[raft.dial]` and `[http.dial]` to put a proxy on each inter-node
  link, or generate configs for nodes it starts itself. Per-node overrides for `[controller]`,
  `[broker]` and `[raft]` tuning go through `NodeSpec`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.process_leash import leashed
from tests.raft_support import free_port

T = TypeVar("T")

CLUSTER_SECRET = "integration-secret"
SECRET_HEADER = "X-Lograft-Cluster-Secret"
HTTP_TIMEOUT_S = 10.0
PROCESS_EXIT_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 60
# [raft] timings every harness node starts with (a test's `raft` settings go
# over them). The defaults (2000-3500 ms) are sized for a 2,000-partition
# node under load (docs/quorum.md, "A busy event loop"); test clusters hold a
# few partitions, and every cluster start and controller kill waits one
# election timeout, so they use pysyncobj's old 400-1400 ms band, raised to
# 600 ms at the bottom for the loaded CI machine.
TEST_RAFT_TIMINGS: dict[str, Any] = {
    "election_timeout_min_ms": 600,
    "election_timeout_max_ms": 1400,
}


def port_is_free(port: int) -> bool:
    """True if a new listener can bind `port` (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
    return True


class NodeExitedError(AssertionError):
    """A node that should be running has exited: waiting longer cannot help."""


def eventually(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.05,
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Poll `predicate` until truthy; at the deadline fail naming `what` (and `on_timeout()`).
    Exceptions count as "not yet", except NodeExitedError, which fails at once."""
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except NodeExitedError:
            raise
        except Exception as exc:  # the condition may not be observable yet
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f"\n{on_timeout()}" if on_timeout is not None else ""
            last = f" (last error: {last_error!r})" if last_error is not None else ""
            raise AssertionError(
                f"timed out after {timeout_s}s waiting for {what}{last}{detail}"
            ) from last_error
        time.sleep(interval_s)


# -- config generation -----------------------------------------------------------------------


@dataclass
class NodeSpec:
    """Everything that goes into one node's TOML config."""

    node_id: int
    http_port: int
    raft_port: int
    data_dir: Path
    # The port of its controller listener (a voter's `controller` address,
    # api/controller_listener.py); None: controller calls go to its HTTP port.
    controller_port: int | None = None
    roles: tuple[str, ...] = ("controller", "broker")
    cluster_secret: str = CLUSTER_SECRET
    cluster_id: str = "lograft-it"
    rack: str | None = None
    log_level: str = "INFO"
    # The node's event loop ("asyncio" or "uvloop"); None: the default.
    event_loop: str | None = None
    # Peer node id -> host:port this node dials instead of the peer's own Raft
    # address (a proxy per link in chaos tests).
    dial: dict[int, str] = field(default_factory=dict)
    # Peer node id -> host:port this node dials for the peer's HTTP API in
    # inter-node calls ([http.dial]); clients still use the advertised address.
    http_dial: dict[int, str] = field(default_factory=dict)
    raft: dict[str, Any] = field(default_factory=dict)
    # Extra [http] settings beside host and port (e.g. request_bytes_max).
    http: dict[str, Any] = field(default_factory=dict)
    controller: dict[str, Any] = field(default_factory=dict)
    broker: dict[str, Any] = field(default_factory=dict)
    # [groups]: the group coordinator's settings.
    groups: dict[str, Any] = field(default_factory=dict)
    # [stream]: the stream endpoint's limits; a dict value is a sub-table
    # ({"source": {...}} -> [stream.source]).
    stream: dict[str, Any] = field(default_factory=dict)
    log_defaults: dict[str, Any] = field(default_factory=dict)
    # [security]: authentication and ACLs; a dict value is a sub-table
    # ({"bearer": {...}} -> [security.bearer]).
    security: dict[str, Any] = field(default_factory=dict)
    # [tls]: empty for plain HTTP; with it the node serves (and calls its
    # peers over) https.
    tls: dict[str, Any] = field(default_factory=dict)
    # [quotas]: how client quotas are measured and enforced.
    quotas: dict[str, Any] = field(default_factory=dict)
    # Extra environment of the node process (test switches such as
    # lograft/power_loss.py's).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def raft_address(self) -> str:
        return f"127.0.0.1:{self.raft_port}"

    @property
    def controller_address(self) -> str | None:
        return None if self.controller_port is None else f"127.0.0.1:{self.controller_port}"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as a TOML value")


def _toml_table(name: str, values: Mapping[str, Any]) -> list[str]:
    lines = [f"[{name}]"]
    lines += [f"{key} = {_toml_value(v)}" for key, v in values.items() if not isinstance(v, dict)]
    for key, v in values.items():
        if isinstance(v, dict):
            lines += ["", *_toml_table(f"{name}.{key}", v)]
    return lines


def node_config_toml(spec: NodeSpec, voters: Iterable[NodeSpec]) -> str:
    """The TOML config of `spec` in a quorum of `voters` (the controller-role nodes)."""
    lines = [
        f"node_id = {spec.node_id}",
        f"roles = {_toml_value(list(spec.roles))}",
        f"data_dir = {_toml_value(spec.data_dir)}",
        f"cluster_id = {_toml_value(spec.cluster_id)}",
        f"cluster_secret = {_toml_value(spec.cluster_secret)}",
        f"log_level = {_toml_value(spec.log_level)}",
    ]
    if spec.rack is not None:
        lines.append(f"rack = {_toml_value(spec.rack)}")
    if spec.event_loop is not None:
        lines.append(f"event_loop = {_toml_value(spec.event_loop)}")
    http = {"host": "127.0.0.1", "port": spec.http_port, **spec.http}
    lines += ["", *_toml_table("http", http)]
    if spec.http_dial:
        lines += ["", *_toml_table("http.dial", {str(k): v for k, v in spec.http_dial.items()})]
    for v in voters:
        lines += [
            "",
            "[[voters]]",
            f"id = {v.node_id}",
            f"raft = {_toml_value(v.raft_address)}",
            f"http = {_toml_value(v.http_address)}",
        ]
        if v.controller_address is not None:
            lines.append(f"controller = {_toml_value(v.controller_address)}")
    lines += ["", *_toml_table("raft", spec.raft)]
    if spec.dial:
        lines += ["", *_toml_table("raft.dial", {str(k): v for k, v in spec.dial.items()})]
    for section in (
        "controller",
        "broker",
        "groups",
        "stream",
        "log_defaults",
        "security",
        "tls",
        "quotas",
    ):
        values = getattr(spec, section)
        if values:
            lines += ["", *_toml_table(section, values)]
    return "\n".join(lines) + "\n"


# -- HTTP ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    status: int
    body: Any  # parsed JSON, or the raw bytes when the body is not JSON

    def json(self) -> Any:
        return self.body


def http_request(
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = HTTP_TIMEOUT_S,
    context: ssl.SSLContext | None = None,
) -> Response:
    """One HTTP request; any status is returned, connection errors raise OSError.
    `context`: what an https URL is verified with."""
    data: bytes | None = None
    hdrs = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        parsed: Any = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw
    return Response(status, parsed)


# -- one node --------------------------------------------------------------------------------


class ClusterNode:
    def __init__(self, cluster: LograftCluster, spec: NodeSpec) -> None:
        self.cluster = cluster
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # identity and files

    @property
    def node_id(self) -> int:
        return self.spec.node_id

    @property
    def url(self) -> str:
        scheme = "https" if self.spec.tls else "http"
        return f"{scheme}://{self.spec.http_address}"

    @property
    def config_path(self) -> Path:
        return self.cluster.workdir / f"node-{self.node_id}.toml"

    @property
    def log_path(self) -> Path:
        return self.cluster.workdir / f"node-{self.node_id}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"node {self.node_id} was never started"
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self) -> Path:
        self.config_path.write_text(node_config_toml(self.spec, self.cluster.voter_specs()))
        return self.config_path

    # process control (always by pid)

    def start(self) -> None:
        """Start the process with the current config (same data dir and ports on a restart)."""
        assert not self.running, f"node {self.node_id} is already running"
        self.spec.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGRAFT_CFG_")}
        env.update(self.spec.env)
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts} of node {self.node_id} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                # leashed: killed with the test process, even by SIGKILL
                leashed(
                    [
                        sys.executable,
                        "-m",
                        "lograft.cli.main",
                        "node",
                        "--config",
                        str(self.config_path),
                    ]
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(self.cluster.workdir),
                env=env,
                start_new_session=True,
            )
        self.cluster.pgids.add(self.proc.pid)

    def kill(self) -> None:
        """SIGKILL by pid: no controlled shutdown, no flush beyond what the kernel has."""
        self._signal_and_wait(signal.SIGKILL)

    def terminate(self, timeout_s: float = PROCESS_EXIT_TIMEOUT_S) -> int:
        """SIGTERM by pid and wait for the exit; returns the exit code."""
        self._signal_and_wait(signal.SIGTERM, timeout_s)
        assert self.proc is not None
        return int(self.proc.returncode)

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, it answers nothing."""
        assert self.running, f"node {self.node_id} is not running"
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.running, f"node {self.node_id} is not running"
        os.kill(self.pid, signal.SIGCONT)

    def restart(self, *, wait_ready: bool = True) -> None:
        """SIGKILL if running, then start again with the same config and data."""
        if self.running:
            self.kill()
        self.start()
        if wait_ready:
            self.wait_ready()

    def _signal_and_wait(
        self, sig: signal.Signals, timeout_s: float = PROCESS_EXIT_TIMEOUT_S
    ) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=PROCESS_EXIT_TIMEOUT_S)
            raise AssertionError(
                f"node {self.node_id} did not exit within {timeout_s}s of {sig.name}; "
                f"killed\n{self.log_tail()}"
            ) from None

    # readiness and logs

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        def ready() -> bool:
            if not self.running:
                assert self.proc is not None
                raise NodeExitedError(
                    f"node {self.node_id} exited with {self.proc.returncode} before it was "
                    f"ready:\n{self.log_tail()}"
                )
            return self.get("/readyz", timeout_s=2.0).status == 200

        self.cluster.eventually(ready, timeout_s, f"node {self.node_id} /readyz")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        text = self.log_text()
        return "\n".join(text.splitlines()[-lines:]) if text else "(no log)"

    # HTTP

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = HTTP_TIMEOUT_S,
    ) -> Response:
        return http_request(
            method,
            self.url + path,
            body,
            headers=headers,
            timeout_s=timeout_s,
            context=self.cluster.client_tls,
        )

    def get(self, path: str, **kw: Any) -> Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Response:
        return self.request("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Response:
        return self.request("DELETE", path, **kw)

    def internal(self, name: str, body: Any, *, secret: str | None = None) -> Response:
        """POST /internal/v1/<name> with the cluster secret (or `secret`, "" for none)."""
        given = self.spec.cluster_secret if secret is None else secret
        headers = {SECRET_HEADER: given} if given else {}
        return self.post(f"/internal/v1/{name}", body, headers=headers)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        resp = self.request(method, path, body)
        assert resp.status == status, f"{method} {path} on node {self.node_id}: {resp}"
        return resp.body

    # views

    def cluster_view(self) -> dict[str, Any]:
        return self.ok("GET", "/v1/cluster")

    def brokers(self) -> dict[int, dict[str, Any]]:
        return {b["id"]: b for b in self.ok("GET", "/v1/brokers")["brokers"]}

    def topic(self, name: str) -> dict[str, Any] | None:
        resp = self.get(f"/v1/topics/{name}")
        if resp.status == 404:
            return None
        assert resp.status == 200, f"describe {name} on node {self.node_id}: {resp}"
        return resp.body

    def topics(self) -> dict[str, dict[str, Any]]:
        return {t["name"]: t for t in self.ok("GET", "/v1/topics")["topics"]}


# -- the cluster -----------------------------------------------------------------------------


class LograftCluster:
    """N nodes (all controller+broker by default) with random ports under `workdir`."""

    def __init__(
        self,
        workdir: Path,
        size: int = 3,
        *,
        raft: Mapping[str, Any] | None = None,
        controller: Mapping[str, Any] | None = None,
        broker: Mapping[str, Any] | None = None,
        http: Mapping[str, Any] | None = None,
        overrides: Mapping[int, Mapping[str, Any]] | None = None,
        roles: Mapping[int, tuple[str, ...]] | None = None,
        tls: Path | None = None,
        tls_settings: Mapping[str, Any] | None = None,
        client_certificate: str | None = None,
        security: Mapping[str, Any] | None = None,
        event_loop: str | None = None,
    ) -> None:
        """`raft`/`controller`/`broker`/`http` apply to every node; `overrides[node_id]` holds
        per-node NodeSpec fields (e.g. {"raft": {...}, "dial": {2: "127.0.0.1:1234"}}),
        merged over the cluster-wide sections. `tls`: a directory of certificates
        `make_local_certificates` wrote (ca.pem, node-<id>.pem, node-<id>-key.pem):
        every node serves https, and the harness's requests trust ca.pem;
        `tls_settings` go into every node's [tls] too; `client_certificate`:
        the name of a client certificate there the harness's requests show.
        `security`: every node's [security]. `event_loop`: every node's
        `event_loop` ("asyncio" or "uvloop"; None: the default)."""
        self.workdir = workdir
        # What the harness's own requests verify https answers with.
        self.client_tls = (
            ssl.create_default_context(cafile=tls / "ca.pem") if tls is not None else None
        )
        if self.client_tls is not None and tls is not None and client_certificate is not None:
            self.client_tls.load_cert_chain(
                tls / f"{client_certificate}.pem", tls / f"{client_certificate}-key.pem"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pgids: set[int] = set()
        self.nodes: dict[int, ClusterNode] = {}
        for node_id in range(1, size + 1):
            node_roles = (roles or {}).get(node_id, ("controller", "broker"))
            spec = NodeSpec(
                node_id=node_id,
                http_port=free_port(),
                raft_port=free_port(),
                data_dir=workdir / f"node-{node_id}",
                roles=node_roles,
                # Every voter serves controller calls on a listener of its own.
                controller_port=free_port() if "controller" in node_roles else None,
                raft={**TEST_RAFT_TIMINGS, **(raft or {})},
                controller=dict(controller or {}),
                broker=dict(broker or {}),
                http=dict(http or {}),
                event_loop=event_loop,
            )
            if tls is not None:
                spec.tls = {
                    "certificate_file": tls / f"node-{node_id}.pem",
                    "key_file": tls / f"node-{node_id}-key.pem",
                    "ca_file": tls / "ca.pem",
                    **(tls_settings or {}),
                }
            if security is not None:
                spec.security = dict(security)
            for key, value in (overrides or {}).get(node_id, {}).items():
                current = getattr(spec, key)
                setattr(spec, key, {**current, **value} if isinstance(current, dict) else value)
            self.nodes[node_id] = ClusterNode(self, spec)
        self._closed = False

    def voter_specs(self) -> list[NodeSpec]:
        return [n.spec for n in self.nodes.values() if "controller" in n.spec.roles]

    def __getitem__(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id]

    def __iter__(self) -> Any:
        return iter(self.nodes.values())

    @property
    def ports(self) -> set[int]:
        return {
            p
            for n in self
            for p in (n.spec.http_port, n.spec.raft_port, n.spec.controller_port)
            if p is not None
        }

    def running(self) -> list[ClusterNode]:
        return [n for n in self if n.running]

    # lifecycle

    def start(self, *, wait_ready: bool = True, timeout_s: float = READY_TIMEOUT_S) -> None:
        for node in self:
            node.start()
        if wait_ready:
            self.wait_ready(timeout_s=timeout_s)

    def wait_ready(
        self, nodes: Iterable[ClusterNode] | None = None, timeout_s: float = READY_TIMEOUT_S
    ) -> None:
        """Every node (or `nodes`) answers /readyz 200, within one shared deadline."""
        deadline = time.monotonic() + timeout_s
        for node in list(self) if nodes is None else list(nodes):
            node.wait_ready(max(0.1, deadline - time.monotonic()))

    def kill_all(self) -> None:
        for node in self:
            node.kill()

    def close(self) -> None:
        """SIGKILL every node still running, by pid; assert nothing is left behind."""
        if self._closed:
            return
        self._closed = True
        for node in self:
            node.kill()
        self.assert_clean()

    def assert_clean(self) -> None:
        for node in self:
            assert not node.running, f"node {node.node_id} (pid {node.pid}) still running"
        for pgid in self.pgids:
            # The node was its session's leader; any process left in the group
            # (a forgotten child) would still answer signal 0.
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                continue
            raise AssertionError(f"process group {pgid} still has live processes")
        busy = sorted(p for p in self.ports if not port_is_free(p))
        assert not busy, f"ports still in use after teardown: {busy}"

    # waiting

    def logs(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(
            f"----- node {n.node_id} ({n.log_path}) -----\n{n.log_tail(lines)}" for n in self
        )

    def eventually(
        self,
        predicate: Callable[[], T],
        timeout_s: float,
        what: str,
        interval_s: float = 0.05,
    ) -> T:
        return eventually(predicate, timeout_s, what, interval_s=interval_s, on_timeout=self.logs)

    # cluster-level views

    def active_controller(
        self, among: Iterable[ClusterNode] | None = None, timeout_s: float = 20.0
    ) -> ClusterNode:
        """The node that all running nodes (or `among`) name as active controller, in one term."""

        def agreed() -> ClusterNode | None:
            nodes = self.running() if among is None else list(among)
            views = [n.cluster_view() for n in nodes]
            ids = {v["active_controller"] for v in views}
            terms = {v["raft"]["term"] for v in views}
            if len(ids) != 1 or len(terms) != 1:
                return None
            (cid,) = ids
            if cid is None or cid not in self.nodes or not self.nodes[cid].running:
                return None
            leader = self.nodes[cid].cluster_view()["raft"]
            return self.nodes[cid] if leader["role"] == "leader" else None

        return self.eventually(agreed, timeout_s, "one agreed active controller")

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        configs: Mapping[str, Any] | None = None,
        via: ClusterNode | None = None,
    ) -> dict[str, Any]:
        node = via or self.running()[0]
        body: dict[str, Any] = {
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
        }
        if configs:
            body["configs"] = dict(configs)
        return node.ok("POST", "/v1/topics", body, status=201)

    def leaders(self, topic: str, via: ClusterNode) -> dict[int, int]:
        doc = via.topic(topic)
        assert doc is not None, f"topic {topic} unknown on node {via.node_id}"
        return {p["partition"]: p["leader"] for p in doc["partitions"]}

"""Start, query and kill Raft node processes (tests/integration/raft_node_main.py).

Processes are stopped only by pid (SIGKILL or SIGTERM to the Popen we
started), and `ProcessCluster.close()` kills whatever is still running; the
fixtures call it in teardown. Each node logs to <tmp>/<id>.log, printed when
a test fails so the Raft side of a failure is visible.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.process_leash import leashed
from tests.raft_support import FAST_TIMINGS, RAFT_TEST_PASSWORD, eventually, free_port

NODE_MAIN = Path(__file__).with_name("raft_node_main.py")
HTTP_TIMEOUT_S = 10.0
PROCESS_EXIT_TIMEOUT_S = 10.0


class NodeProcess:
    def __init__(self, node_id: str, workdir: Path, raft: dict[str, Any]) -> None:
        self.node_id = node_id
        self.workdir = workdir
        self.raft = raft
        self.control_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{node_id}.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        assert not self.running, f"{self.node_id} already running"
        config_path = self.workdir / f"{self.node_id}.json"
        config_path.write_text(json.dumps({"raft": self.raft, "control_port": self.control_port}))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                leashed([sys.executable, str(NODE_MAIN), str(config_path)]),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.workdir),
            )

    def wait_serving(self, timeout_s: float = 30.0) -> None:
        def serving() -> bool:
            assert self.running, f"{self.node_id} exited:\n{self.log_tail()}"
            return bool(self.status())

        eventually(serving, timeout_s, f"{self.node_id} to serve its control API")

    def kill(self) -> None:
        """SIGKILL by pid: no clean shutdown, no flush beyond what the kernel has."""
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        proc.wait(timeout=PROCESS_EXIT_TIMEOUT_S)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- control API -----------------------------------------------------------

    def _request(
        self, method: str, path: str, body: bytes | None = None, timeout_s: float = HTTP_TIMEOUT_S
    ) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.control_port}{path}"
        request = urllib.request.Request(url, data=body, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def status(self) -> dict[str, Any]:
        return self._request("GET", "/status")[1]

    def state(self) -> dict[str, Any]:
        return self._request("GET", "/state")[1]

    def batches(self) -> list[bytes]:
        return [bytes.fromhex(h) for _o, h in self.state()["items"]]

    def append(self, batch: bytes) -> tuple[int, dict[str, Any]]:
        return self._request("POST", "/append", batch)

    def compact(self) -> None:
        self._request("POST", "/compact", b"")

    def bench(self, count: int, timeout_s: float = 300.0) -> list[float]:
        return self._request("POST", f"/bench?count={count}", b"", timeout_s)[1]["latencies_ms"]


class ProcessCluster:
    """Voters `ids` (and optional observers) as separate processes on 127.0.0.1."""

    def __init__(self, workdir: Path, ids: list[str], **raft_overrides: Any) -> None:
        self.workdir = workdir
        self.ids = list(ids)
        self.raft_ports = {i: free_port() for i in ids}
        self.overrides = {**FAST_TIMINGS, "password": RAFT_TEST_PASSWORD, **raft_overrides}
        self.nodes: dict[str, NodeProcess] = {}
        for node_id in ids:
            self.nodes[node_id] = NodeProcess(node_id, workdir, self._voter_raft(node_id))

    def _address(self, node_id: str) -> str:
        return f"127.0.0.1:{self.raft_ports[node_id]}"

    def _voter_raft(self, node_id: str) -> dict[str, Any]:
        return {
            "node_id": node_id,
            "data_dir": str(self.workdir / node_id),
            "listen_address": self._address(node_id),
            "peers": {o: self._address(o) for o in self.ids if o != node_id},
            **self.overrides,
        }

    def add_observer(self, node_id: str, **raft_overrides: Any) -> NodeProcess:
        raft = {
            "node_id": node_id,
            "data_dir": str(self.workdir / node_id),
            "voter": False,
            "peers": {v: self._address(v) for v in self.ids},
            **self.overrides,
            **raft_overrides,
        }
        node = NodeProcess(node_id, self.workdir, raft)
        self.nodes[node_id] = node
        return node

    @property
    def voters(self) -> list[NodeProcess]:
        return [self.nodes[i] for i in self.ids]

    def start(self, nodes: list[NodeProcess] | None = None) -> None:
        nodes = self.voters if nodes is None else nodes
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_serving()

    def running_voters(self) -> list[NodeProcess]:
        return [n for n in self.voters if n.running]

    def leader(
        self, timeout_s: float = 20.0, among: list[NodeProcess] | None = None
    ) -> NodeProcess:
        """The voter that leads and that every running voter (or `among`) names as leader."""

        def agreed() -> NodeProcess | None:
            running = self.running_voters() if among is None else among
            leaders = {n.status()["leader_id"] for n in running}
            if len(leaders) != 1:
                return None
            (leader_id,) = leaders
            if leader_id is None or leader_id not in self.nodes:
                return None
            leader = self.nodes[leader_id]
            return leader if leader.running and leader.status()["role"] == "leader" else None

        return eventually(agreed, timeout_s, "one agreed leader among running voters")

    def wait_applied(self, nodes: list[NodeProcess], offset: int, timeout_s: float = 20.0) -> None:
        for node in nodes:
            eventually(
                lambda node=node: node.status()["last_applied"] >= offset,
                timeout_s,
                f"{node.node_id} to apply offset {offset}",
            )

    def close(self) -> None:
        for node in self.nodes.values():
            node.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {n.node_id} ---\n{n.log_tail()}" for n in self.nodes.values())

"""The toxiproxy server process and the calls the fault-injection suite makes to it.

The server is the binary scripts/setup.sh builds (`go install`, pinned
version) into .tools/bin. It runs on 127.0.0.1 with a free API port, in its
own session, and is stopped by its pid.

Proxies are created with `toxiproxy-python`. Toxics, enabling, disabling and
the reset go to the HTTP API directly (`ToxiproxyServer.api`) because the
client sets no timeout on its requests: a toxiproxy that wedges while
removing a toxic (it did, in v2.12.0, when a `latency` toxic that held bytes
was removed after the far end had closed: its API then answered nothing)
would hang the test run forever instead of failing it. Every call here is
bounded by API_TIMEOUT_S.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from toxiproxy.api import APIConsumer
from toxiproxy.server import Toxiproxy

from tests.integration.cluster_harness import PROCESS_EXIT_TIMEOUT_S, eventually, free_port
from tests.process_leash import leashed

ROOT = Path(__file__).resolve().parents[2]
SERVER_PATH = ROOT / ".tools" / "bin" / "toxiproxy-server"
# How long the toxiproxy server may take to answer its API after start, s.
SERVER_START_TIMEOUT_S = 10.0
# Bounds one call to toxiproxy's API, s.
API_TIMEOUT_S = 10.0


class ToxiproxyError(AssertionError):
    """The toxiproxy API refused a call or did not answer in time."""


class ToxiproxyServer:
    """One toxiproxy server process, started and stopped by its pid."""

    def __init__(self, path: Path, log_path: Path) -> None:
        self.path = path
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.path.exists(), f"{self.path} is missing: scripts/setup.sh builds it"
        self.port = free_port()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                leashed([str(self.path), "-host", "127.0.0.1", "-port", str(self.port)]),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Per-connection info lines would dwarf the nodes' own logs.
                env={"LOG_LEVEL": "warn"},
                start_new_session=True,
            )
        # toxiproxy-python keeps the server's address in class attributes.
        APIConsumer.host, APIConsumer.port = "127.0.0.1", self.port
        client = Toxiproxy()

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"toxiproxy server exited; see {self.log_path}")
            return bool(client.running())

        eventually(up, SERVER_START_TIMEOUT_S, "the toxiproxy server's API")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the toxiproxy server was never started"
        return self.proc.pid

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=PROCESS_EXIT_TIMEOUT_S)

    def create_proxy(self, name: str, listen: str, upstream: str) -> None:
        """Raises ToxiproxyError naming toxiproxy's reason (e.g. the listen
        address is taken); toxiproxy-python answered that with a KeyError."""
        self.api("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream})

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the HTTP API: the decoded JSON answer (None if empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method
        )
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ToxiproxyError(
                f"toxiproxy {method} {path}: HTTP {exc.code} {exc.read()[:200]!r}"
            ) from None
        except OSError as exc:
            raise ToxiproxyError(f"toxiproxy {method} {path}: {exc!r}") from None
        return json.loads(raw) if raw else None

    def add_toxic(
        self, proxy: str, name: str, toxic_type: str, stream: str, attributes: dict[str, int]
    ) -> None:
        body = {
            "name": name,
            "type": toxic_type,
            "stream": stream,
            "toxicity": 1.0,
            "attributes": attributes,
        }
        self.api("POST", f"/proxies/{proxy}/toxics", body)

    def remove_toxic(self, proxy: str, name: str) -> None:
        self.api("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        """Disabling closes every open connection of the proxy and its listener."""
        self.api("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def reset(self) -> None:
        """Every proxy enabled, every toxic removed."""
        self.api("POST", "/reset")

    def proxies(self) -> dict[str, Any]:
        """Name -> {listen, upstream, enabled, toxics: [...]}."""
        result: dict[str, Any] = self.api("GET", "/proxies")
        return result

"""A Server-Sent Events stream of a real node, read in a thread (integration tests)."""

from __future__ import annotations

import http.client
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.integration.cluster_harness import ClusterNode
from tests.sse_support import SseEvent, SseParser

# Beyond the 15 s heartbeat interval: a quiet stream still sends within this, s.
STREAM_READ_TIMEOUT_S = 40.0


@dataclass
class StreamReader:
    """Reads one stream in a thread; the test looks at `events` as they arrive."""

    node: ClusterNode
    path: str  # with the query
    events: list[SseEvent] = field(default_factory=list)
    failure: list[BaseException] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        host, port = self.node.url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=STREAM_READ_TIMEOUT_S)
        self.conn.request("GET", self.path)
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.read()
        self.thread = threading.Thread(target=self._read, name="sse-reader", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        parser = SseParser()
        try:
            while chunk := self.resp.read1(1 << 16):
                self.events.extend(parser.feed(chunk))
        except (OSError, http.client.HTTPException) as exc:
            if not self.ended.is_set():
                self.failure.append(exc)
        finally:
            self.ended.set()

    def records(self) -> list[dict[str, Any]]:
        assert not self.failure, self.failure
        errors = [e for e in self.events if e.name == "error"]
        assert not errors, errors[0].data
        return [e.json() for e in list(self.events) if e.name == "message" and e.data]

    def assignment(self) -> list[int] | None:
        """The partitions of the latest `event: assignment` (group streams)."""
        found = [e.json()["partitions"] for e in list(self.events) if e.name == "assignment"]
        return found[-1] if found else None

    def close(self) -> None:
        """End the stream from the client side (idempotent; nothing if never started)."""
        if not hasattr(self, "thread") or (self.conn.sock is None and not self.thread.is_alive()):
            return
        self.ended.set()
        if self.conn.sock is not None:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        self.conn.close()

"""Shared helpers for the Raft adapter tests (unit and process tests).

- `ListStateMachine`: the simplest faithful state machine, a list of
  (offset, batch) in apply order, with a JSON snapshot. Thread-safe reads.
- `free_port()`: a port that was free a moment ago on 127.0.0.1, never handed
  out twice in one test run.
- `eventually` / `eventually_async`: poll a condition until a deadline, so no
  test sleeps a fixed time to "let things settle".
- `FAST_TIMINGS`: Raft timings that elect in well under a second on loopback.
- `RAFT_TEST_PASSWORD`: the password test clusters share (Raft needs one).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

FAST_TIMINGS: dict[str, Any] = {
    "election_timeout_min_ms": 200,
    "election_timeout_max_ms": 450,
    "heartbeat_interval_ms": 40,
    "leader_fallback_timeout_ms": 800,
    "connection_timeout_ms": 1000,
    "connection_retry_ms": 200,
    "tick_interval_ms": 20,
}

# Every RaftConfig needs a password (see raft_config); test clusters share this one.
RAFT_TEST_PASSWORD = "raft-test-password"


class ListStateMachine:
    """Applies batches to a list; snapshot is JSON of (offset, hex batch)."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple[int, bytes]] = []
        self.restores: list[int] = []
        self.fail_on = fail_on

    def apply(self, offset: int, batch: bytes) -> None:
        if self.fail_on is not None and batch == self.fail_on:
            raise ValueError(f"refusing {batch!r}")
        with self._lock:
            assert not self._items or offset > self._items[-1][0], "offsets must increase"
            self._items.append((offset, bytes(batch)))

    def snapshot(self) -> bytes:
        with self._lock:
            return json.dumps([[o, b.hex()] for o, b in self._items]).encode()

    def restore(self, data: bytes) -> None:
        items = [(int(o), bytes.fromhex(h)) for o, h in json.loads(data)]
        with self._lock:
            self._items = items
            self.restores.append(items[-1][0] if items else 0)

    @property
    def items(self) -> list[tuple[int, bytes]]:
        with self._lock:
            return list(self._items)

    @property
    def batches(self) -> list[bytes]:
        return [b for _o, b in self.items]


# Ports handed out once per test run: a port picked for one listener and not
# yet bound must never be picked again for another (two Raft members, or a
# member and a test's forwarder, once raced for one and failed to bind).
_allocated: set[int] = set()
# Where test servers listen: below Linux's ephemeral range (32768-60999 by
# default), so no process's outgoing connection can take a port between the
# pick and the server's bind, as one picked by bind(0), inside that range,
# could. Below scripts/loopback_ports.py's range (21000-32000, benchmarks).
TEST_PORT_RANGE = (12_000, 21_000)
_pick = random.Random()


def free_port() -> int:
    """A port on 127.0.0.1 in TEST_PORT_RANGE that was free a moment ago and
    that this run never handed out."""
    for _ in range(1000):
        port = _pick.randrange(*TEST_PORT_RANGE)
        if port in _allocated:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:  # no SO_REUSEADDR: a port some connection still holds is passed over
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _allocated.add(port)
        return port
    raise RuntimeError(f"no free port found in {TEST_PORT_RANGE}")


def eventually(
    predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.02
) -> T:
    """Poll `predicate` until it returns a truthy value; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the condition may not be observable yet
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}") from last_error
        time.sleep(interval_s)


async def eventually_async(
    predicate: Callable[[], Awaitable[T] | T],
    timeout_s: float,
    what: str,
    interval_s: float = 0.02,
) -> T:
    """Async `eventually`: the predicate may be sync or a coroutine function."""
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}") from last_error
        await asyncio.sleep(interval_s)
